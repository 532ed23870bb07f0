"""The node-side verdict: the one line of an unhealthy node, its exit code, checks added to the verdict."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    node_verdict,
    nvidia_smi_xml,
)

from .test_error_rates import H100, with_counts


def check(name, status="fail", detail="x", gpu=None, bus=None, action="reset_gpu"):
    return {"name": name, "status": status, "detail": detail, "gpu_index": gpu, "pci_bus_id": bus, "action": action}


def test_the_strongest_action_is_named_first_and_the_rest_counted():
    verdict = {
        "checks": [
            check("ecc_errors", gpu=1, bus="00000000:2A:00.0"),
            check("row_remap", gpu=3, bus="00000000:5D:00.0", detail="a row remapping failed",
                  action="hardware_inspection"),
            check("xid", detail="Xid 13", action="restart_application"),
            check("temperature", status="warn", gpu=0, bus="00000000:18:00.0"),
        ]
    }  # fmt: skip
    assert node_verdict.reason(verdict) == (
        "GPU 3 (0000:5d:00.0) row_remap: a row remapping failed; action: drain and inspect the hardware (RMA)"
        " (+2 more: ecc_errors[gpu1], xid)"
    )
    assert node_verdict.reason({"checks": [check("xid", status="pass")]}) is None


def test_a_long_detail_is_cut_but_never_the_gpu_or_the_action():
    line = node_verdict.reason({"checks": [check("nvlink", gpu=7, bus="00000000:DB:00.0", detail="y" * 500)]})
    assert len(line) <= node_verdict.REASON_LENGTH
    assert line.startswith("GPU 7 (0000:db:00.0) nvlink: yyy")
    assert line.endswith("...; action: drain and reset")


def test_with_checks_recomputes_the_verdict_and_honours_skip():
    smi = nvidia_smi_xml.parse(H100)
    verdict = health_checks.evaluate({"smi": smi})
    assert verdict["healthy"]
    extra = [check("ecc_rate", gpu=3, bus="00000000:5D:00.0", action="hardware_inspection")]
    merged = node_verdict.with_checks(verdict, extra, smi["gpus"])
    assert not merged["healthy"]
    assert merged["actions"]["node"] == "hardware_inspection"
    assert merged["actions"]["gpus"][3]["action"] == "hardware_inspection"
    assert merged["summary"]["failed"] == ["ecc_rate[gpu3]: x"]
    skipped = node_verdict.with_checks(verdict, extra, smi["gpus"], skip=["ecc_rate"])
    assert skipped["healthy"]
    assert skipped["checks"][-1]["status"] == "skip"


def test_the_verdict_of_a_real_capture_reads_as_the_issue_asks():
    verdict = health_checks.evaluate({"smi": nvidia_smi_xml.parse(with_counts(H100, 3, uncorrectable=12))})
    assert node_verdict.reason(verdict) == (
        "GPU 3 (0000:5d:00.0) ecc_errors: 12 uncorrectable ECC errors since the driver loaded; action: drain and reset"
    )
    assert node_verdict.exit_code(verdict) == node_verdict.EXIT_UNHEALTHY
