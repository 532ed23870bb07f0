"""prometheus_textfile.render_prometheus: the node_exporter textfile of a verdict."""

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    kernel_log,
    nvidia_smi_xml,
    prometheus_textfile,
)


def test_prometheus_textfile(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": nvidia_smi_xml.parse(fixture_text("nvidia-smi/h100-sxm-8x-healthy.xml")),
            "kernel": kernel_log.parse(fixture_text("kernel-log/xid-dmesg.log")),
        }
    )
    text = prometheus_textfile.render_prometheus(result, 1710234000.7)
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    series = [line.rsplit(" ", 1)[0] for line in samples]
    assert len(series) == len(set(series))  # no duplicate series, even with two Xid codes on one GPU
    assert 'gpuops_gpu_health_check{check="xid",gpu="3",pci_bus_id="00000000:5D:00.0"} 2' in samples
    assert 'gpuops_gpu_health_check{check="xid",gpu="4",pci_bus_id="00000000:9A:00.0"} 2' in samples
    assert "gpuops_gpu_health_healthy 0" in samples
    assert 'gpuops_gpu_health_action{action="reboot_node"} 1' in samples
    assert "gpuops_gpu_health_last_run_timestamp_seconds 1710234000" in samples
    assert all(re.match(r"^[a-z_]+(\{[^}]*\})? -?\d+$", line) for line in samples)


def test_prometheus_label_escaping():
    result = {
        "checks": [{"name": "x", "status": "pass", "gpu_index": None, "pci_bus_id": 'a"b\\c'}],
        "healthy": True,
        "actions": {"node": "none"},
    }
    assert 'pci_bus_id="a\\"b\\\\c"' in prometheus_textfile.render_prometheus(result, 0)
