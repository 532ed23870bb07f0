"""The dcgm_exporter check: the node's DCGM Exporter answers /metrics with a DCGM field for every GPU.

Fixtures: tests/fixtures/dcgm_exporter/readme-4.5.3-4.8.2.txt is the output NVIDIA/dcgm-exporter's README prints at
tag 4.5.3-4.8.2 (one GPU, GPU-604ac76c-...). The 4.8.x series layout (gpu, UUID, pci_bus_id, device, modelName,
Hostname) is render_metrics.go's gpuMetricsFormat at that tag, filled for an 8-GPU node here.
"""

from __future__ import annotations

import socket
import urllib.error
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import dcgm_exporter, health_checks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm_exporter"
README = (FIXTURES / "readme-4.5.3-4.8.2.txt").read_text(encoding="utf-8")
README_UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"


def uuid_of(index):
    return "GPU-0000000%d-1111-2222-3333-444444444444" % index


def rendered(indexes, fields=("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")):
    """dcgm-exporter 4.8.x text (render_metrics.go gpuMetricsFormat at 4.5.3-4.8.2) for GPUs ``indexes``."""
    lines = []
    for field in fields:
        lines += ["# HELP %s help" % field, "# TYPE %s gauge" % field]
        lines += [
            '%s{gpu="%d",UUID="%s",pci_bus_id="00000000:%02X:00.0",device="nvidia%d",modelName="NVIDIA H100 80GB HBM3",'
            'Hostname="gpu-node-1"} 34' % (field, index, uuid_of(index), 0x18 + index, index)
            for index in indexes
        ]
    return "\n".join(lines) + "\n"


def gpus(indexes, uuid=uuid_of):
    return [{"index": index, "uuid": uuid(index)} for index in indexes]


def node(tmp_path, dropin=None, unit="/usr/lib/systemd/system/nvidia-dcgm-exporter.service"):
    if unit:
        path = tmp_path / unit.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[Service]\nExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv\n")
    if dropin is not None:
        path = tmp_path / dcgm_exporter.DROPIN.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dropin)
    return str(tmp_path)


def answering(status, text, seen=None):
    def opener(url, timeout):
        if seen is not None:
            seen.append((url, timeout))
        return status, text

    return opener


def raising(error):
    def opener(url, timeout):
        raise error

    return opener


def test_parse_reads_the_readme_output_with_its_spaces():
    metrics = dcgm_exporter.parse(README)
    assert sorted(metrics) == ["DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_SM_CLOCK"]
    assert metrics["DCGM_FI_DEV_SM_CLOCK"] == [{"labels": {"gpu": "0", "UUID": README_UUID}, "value": 139.0}]
    assert dcgm_exporter.gpu_series(metrics) == {
        README_UUID: ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP"]
    }


def test_the_readme_gpu_passes_when_nvidia_smi_lists_it(tmp_path):
    seen = []
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(200, README, seen))
    assert seen == [("http://127.0.0.1:9400/metrics", dcgm_exporter.TIMEOUT)]
    [(status, detail)] = dcgm_exporter.findings(reading, [{"index": 0, "uuid": README_UUID}])
    assert status == "pass"
    assert "3 fields for 1 GPUs" in detail


def test_every_gpu_of_an_8_gpu_node_passes(tmp_path):
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(200, rendered(range(8))))
    assert dcgm_exporter.findings(reading, gpus(range(8)))[0][0] == "pass"


def test_a_gpu_without_a_series_fails_naming_it(tmp_path):
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(200, rendered([0, 1, 2, 4, 5, 6, 7])))
    [(status, detail)] = dcgm_exporter.findings(reading, gpus(range(8)))
    assert status == "fail"
    assert "GPU 3 (%s)" % uuid_of(3) in detail
    assert "of the 8 nvidia-smi lists" in detail


def test_the_port_comes_from_the_roles_dropin(tmp_path):
    dropin = "[Service]\nExecStart=\nExecStart=/usr/bin/dcgm-exporter -f /etc/x.csv -a :9500 -r localhost:5555\n"
    seen = []
    dcgm_exporter.read(node(tmp_path, dropin=dropin), opener=answering(200, README, seen))
    assert seen[0][0] == "http://127.0.0.1:9500/metrics"


@pytest.mark.parametrize(
    ("text", "port"),
    [
        ("ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv", None),
        ("ExecStart=/usr/bin/dcgm-exporter --address=[::]:9401", 9401),
        ("ExecStart=/usr/bin/dcgm-exporter -a 0.0.0.0:9402\nExecStart=\n", None),
        ("ExecStart=\nExecStart=/usr/bin/dcgm-exporter -a :9403", 9403),
    ],
)
def test_port_from_unit(text, port):
    assert dcgm_exporter.port_from_unit(text) == port


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), "connection refused"),
        (urllib.error.URLError(socket.timeout("timed out")), "no answer in 10 s"),
        (socket.timeout("timed out"), "no answer in 10 s"),
    ],
)
def test_an_exporter_that_does_not_answer_fails_closed_with_the_fix(tmp_path, error, said):
    reading = dcgm_exporter.read(node(tmp_path), opener=raising(error))
    [(status, detail)] = dcgm_exporter.findings(reading, gpus(range(2)))
    assert status == "fail"
    assert said in detail
    assert "systemctl restart nvidia-dcgm-exporter" in detail


def test_an_http_error_fails(tmp_path):
    error = urllib.error.HTTPError("http://127.0.0.1:9400/metrics", 503, "Service Unavailable", {}, None)
    reading = dcgm_exporter.read(node(tmp_path), opener=raising(error))
    [(status, detail)] = dcgm_exporter.findings(reading, gpus(range(2)))
    assert (status, "HTTP 503" in detail) == ("fail", True)


def test_an_answer_without_gpu_series_fails(tmp_path):
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(200, "# HELP x\n# TYPE x gauge\n"))
    assert dcgm_exporter.findings(reading, gpus(range(1)))[0][0] == "fail"


def test_no_unit_is_not_installed_and_asks_nothing(tmp_path):
    reading = dcgm_exporter.read(node(tmp_path, unit=None), opener=raising(AssertionError("asked")))
    assert reading["installed"] is False


def evaluate(reading, smi_gpus, unavailable=None):
    smi = {"gpus": [dict(gpu, pci_bus_id="00000000:%02X:00.0" % (0x18 + gpu["index"])) for gpu in smi_gpus],
           "warnings": [], "driver_version": "580.65.06"}  # fmt: skip
    inputs = {"smi": smi, "dcgm_exporter": reading, "unavailable": unavailable or {}}
    return [check for check in health_checks.evaluate(inputs)["checks"] if check["name"] == "dcgm_exporter"]


def test_the_evaluator_fails_the_node_on_a_stale_exporter(tmp_path):
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(503, "host engine connection lost\n"))
    [check] = evaluate(reading, gpus(range(2)))
    assert check["status"] == "fail"


def test_the_evaluator_skips_where_the_exporter_is_not_part_of_the_stack():
    [check] = evaluate(None, gpus(range(2)), {"dcgm_exporter": "no DCGM Exporter on this node"})
    assert check == dict(check, status="skip", detail="no DCGM Exporter on this node")


def test_the_lab_stand_in_output_passes(tmp_path):
    """The lab's stand-in dcgm-exporter renders what this check reads (extensions/molecule/lab/dcgm-exporter)."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "extensions/molecule/lab/dcgm-exporter/dcgm_exporter_sim.py"
    spec = importlib.util.spec_from_file_location("dcgm_exporter_sim", path)
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    rows = [
        {"index": str(i), "uuid": uuid_of(i), "pci.bus_id": "00000000:18:00.0", "name": "NVIDIA H100 80GB HBM3",
         "temperature.gpu": "32", "power.draw": "71.23"}
        for i in range(4)
    ]  # fmt: skip
    text = sim.render(["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"], rows, "lab-node")
    reading = dcgm_exporter.read(node(tmp_path), opener=answering(200, text))
    assert dcgm_exporter.findings(reading, gpus(range(4)))[0][0] == "pass"
    assert dcgm_exporter.findings(reading, gpus(range(5)))[0][0] == "fail"
