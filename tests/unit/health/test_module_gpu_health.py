"""gpuops.cluster.gpu_health through its argument spec: offline triage on fixtures, live mode with commands mocked."""

import os
import stat

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module

from tests.unit.module_harness import FakeBins, FakeCommands

from .conftest import FIXTURES


def fixture(relative):
    return str(FIXTURES / relative)


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


# --- offline triage ---------------------------------------------------------------------------------


def test_offline_triage_runs_no_command(harness):
    # the harness's FakeCommands has no answer: any command fails the test
    result = harness.run(
        module,
        {
            "nvidia_smi_xml": fixture("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"),
            "kernel_log": fixture("kernel-log/clean-journal-short-iso.log"),
            "expected_gpu_count": 8,
        },
    )
    assert result["mode"] == "offline"
    assert result["commands"] == []
    assert harness.commands.calls == []
    assert result["healthy"] is False
    assert result["actions"]["node"] == "reset_gpu"
    assert result["changed"] is False
    assert by_name(result, "nvlink")[0]["detail"] == "offline triage without nvlink_status"
    assert by_name(result, "infiniband")[0]["detail"] == "offline triage without infiniband_root"


def test_offline_full_capture_of_a_broken_h100(harness):
    result = harness.run(
        module,
        {
            "nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-7of8.xml"),
            "kernel_log": fixture("kernel-log/xid-journal-short.log"),
            "nvlink_status": fixture("nvlink/h100-8x-status-link-inactive.txt"),
            "nvlink_errors": fixture("nvlink/h100-8x-errors-crc.txt"),
            "infiniband_root": fixture("infiniband/degraded-8x-ndr"),
            "fabricmanager_state": "failed",
            "dcgm_diag_json": fixture("dcgm/dcgmi-diag-r2-pcie-fail.json"),
            "nccl_output": fixture("nccl-tests/all_reduce_perf-h100-8x-slow.txt"),
            "expected_gpu_count": 8,
            "expected_ib_ports": ["mlx5_3", "mlx5_5"],
            "expected_ib_rate": 400,
            "thresholds": {"nvlink_errors": 100},
        },
    )
    failed = {c["name"] for c in result["checks"] if c["status"] == "fail"}
    assert failed >= {"gpu_count", "xid", "sxid", "nvlink", "infiniband", "fabricmanager", "dcgm_diag", "nccl_busbw"}
    assert result["facts"]["gpu_count"] == 7
    assert result["facts"]["kernel_log_formats"] == ["journal_short"]
    crc = [c for c in by_name(result, "nvlink_errors") if c["status"] == "warn"]
    assert len(crc) == 1
    assert "crc_errors=912" in crc[0]["detail"]


def test_fail_on_unhealthy(harness):
    result = harness.fail(
        module,
        {"nvidia_smi_xml": fixture("nvidia-smi/v100-sxm2-8x-r470-retired-pages.xml"), "fail_on_unhealthy": True},
    )
    assert result["msg"].startswith("GPU health: ")
    assert "retired_pages[gpu2]" in result["msg"]
    assert "recommended action reset_gpu" in result["msg"]
    assert result["healthy"] is False
    assert result["checks"]


def test_healthy_with_fail_on_unhealthy_exits(harness):
    result = harness.run(module, {"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "fail_on_unhealthy": True})
    assert result["healthy"] is True


def test_unreadable_capture_says_what_to_do(harness):
    result = harness.fail(module, {"nvidia_smi_xml": "/nonexistent/x.xml"})
    assert "cannot read nvidia_smi_xml /nonexistent/x.xml" in result["msg"]


def test_bad_since(harness):
    result = harness.fail(module, {"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "since": "last tuesday"})
    assert result["msg"].startswith("since: not a time")


def test_bad_skip_check_is_rejected_by_the_spec(harness):
    result = harness.fail(module, {"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "skip_checks": ["ecc"]})
    assert "skip_checks" in result["msg"]


def test_since_window_in_offline_mode(harness):
    args = {
        "nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"),
        "kernel_log": fixture("kernel-log/xid-journal-short-iso.log"),
    }
    default = harness.run(module, args)
    wide = harness.run(module, dict(args, since="2024-03-11T00:00:00+00:00"))
    # nine Xid and SXid events, and the "fallen off the bus" line after the Xid 79
    assert default["facts"]["kernel_events"] == 10
    assert wide["facts"]["kernel_events"] == 11  # the Xid 94 of the previous boot


# --- Prometheus textfile ----------------------------------------------------------------------------


def test_textfile_atomic_write_mode_and_idempotence(harness, tmp_path):
    path = tmp_path / "gpuops_gpu_health.prom"
    args = {"nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"), "prometheus_textfile": str(path)}
    first = harness.run(module, args)
    assert first["changed"] is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert "gpuops_gpu_health_healthy 1" in path.read_text()
    assert sorted(os.listdir(tmp_path)) == ["gpuops_gpu_health.prom"]  # no temporary file left
    second = harness.run(module, args)
    assert second["changed"] is False  # only the run-time gauge moved


def test_textfile_check_and_diff_mode(harness, tmp_path):
    path = tmp_path / "health.prom"
    path.write_text("old\n")
    result = harness.run(
        module,
        {
            "nvidia_smi_xml": fixture("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"),
            "prometheus_textfile": str(path),
        },
        check_mode=True,
        diff=True,
    )
    assert result["changed"] is True
    assert path.read_text() == "old\n"  # check mode writes nothing
    assert result["diff"]["before"] == "old\n"
    assert "gpuops_gpu_health_healthy 0" in result["diff"]["after"]


def test_textfile_directory_must_exist(harness, tmp_path):
    result = harness.fail(
        module,
        {"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "prometheus_textfile": str(tmp_path / "no" / "f.prom")},
    )
    assert "does not exist" in result["msg"]


# --- live mode --------------------------------------------------------------------------------------

LIVE_TOOLS = ("nvidia-smi", "journalctl", "systemctl")


@pytest.fixture
def node(harness):
    """``node(xml, nvlink_status=..., tools=...)``: the harness answers the module's commands from fixtures."""

    def install(xml, nvlink_status="nvlink/h100-8x-status-healthy.txt", tools=LIVE_TOOLS):
        harness.commands = FakeCommands(
            {
                "nvidia-smi -q -x": (FIXTURES / "nvidia-smi" / xml).read_text(),
                "nvidia-smi nvlink -s": (FIXTURES / nvlink_status).read_text(),
                "nvidia-smi nvlink -e": (FIXTURES / "nvlink/h100-8x-errors-clean.txt").read_text(),
                "journalctl": (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(),
                "systemctl": "active\n",
                "dcgmi": (FIXTURES / "dcgm/dcgmi-diag-r1-pass.json").read_text(),
            }
        )
        harness.bins = FakeBins(set(tools))
        return harness.commands

    return install


def test_live_quick_runs_nvidia_smi_q_x_exactly_once(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    result = harness.run(module, {"infiniband_root": str(tmp_path), "expected_gpu_count": 8})
    assert result["mode"] == "live"
    assert [c for c in fake.calls if c[1:] == ["-q", "-x"]] == [["/usr/bin/nvidia-smi", "-q", "-x"]]
    assert fake.calls == [
        ["/usr/bin/nvidia-smi", "-q", "-x"],
        ["/usr/bin/journalctl", "-k", "-b", "0", "-o", "short-iso", "--no-pager"],
        ["/usr/bin/nvidia-smi", "nvlink", "-s"],
        ["/usr/bin/systemctl", "is-active", "nvidia-fabricmanager"],
    ]
    assert all(env["LC_ALL"] == "C" for env in fake.environments)
    assert result["commands"] == [" ".join(call) for call in fake.calls]
    assert result["healthy"] is True, result["summary"]
    assert by_name(result, "fabricmanager")[0]["status"] == "pass"
    assert by_name(result, "nvlink_errors")[0]["detail"] == "NVLink error counters are read from level=standard"


def test_live_with_nvlink_skipped_is_one_nvidia_smi_call(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    harness.run(module, {"infiniband_root": str(tmp_path), "skip_checks": ["nvlink", "nvlink_errors"]})
    assert fake.of("nvidia-smi") == [["/usr/bin/nvidia-smi", "-q", "-x"]]


def test_live_nvidia_smi_calls_do_not_grow_with_gpu_count(harness, node, tmp_path):
    eight = node("h100-sxm-8x-healthy.xml")
    harness.run(module, {"infiniband_root": str(tmp_path)})
    one = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt")
    harness.run(module, {"infiniband_root": str(tmp_path)})
    assert len(eight.of("nvidia-smi")) == len(one.of("nvidia-smi")) == 2


def test_live_standard_without_dcgm_fails_closed_with_the_fix(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    result = harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard"})
    assert ["/usr/bin/nvidia-smi", "nvlink", "-e"] in fake.calls
    (check,) = by_name(result, "dcgm_diag")
    assert check["status"] == "fail"
    assert "dcgmi not installed" in check["detail"]
    assert "install datacenter-gpu-manager" in check["detail"]
    assert result["healthy"] is False


def test_live_standard_with_dcgm_skipped_asks_for_nothing(harness, node, tmp_path):
    node("h100-sxm-8x-healthy.xml")
    result = harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard", "skip_checks": ["dcgm_diag"]})
    assert by_name(result, "dcgm_diag")[0]["status"] == "skip"
    assert result["healthy"] is True


def test_live_dcgm_host_engine_not_up_fails(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi"))
    fake.add("dcgmi", (255, "", "Error: unable to establish a connection to the specified host: localhost\n"))
    (check,) = by_name(harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard"}), "dcgm_diag")
    assert check["status"] == "fail"
    assert "gave no results" in check["detail"]
    assert "host engine did not answer" in check["detail"]
    assert "unable to establish a connection" in check["detail"]


def test_live_standard_runs_dcgmi_diag_r1(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi"))
    result = harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard"})
    assert ["/usr/bin/dcgmi", "diag", "-r", "1", "-j"] in fake.calls
    assert by_name(result, "dcgm_diag")[0]["status"] == "pass"


def test_live_extended_without_nccl_tests_fails_closed(harness, node, tmp_path):
    node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi"))
    result = harness.run(module, {"infiniband_root": str(tmp_path), "level": "extended"})
    (check,) = by_name(result, "nccl_busbw")
    assert check["status"] == "fail"
    assert check["detail"].startswith("nccl-tests all_reduce_perf not installed")


def test_live_extended_failed_all_reduce_fails(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi", "all_reduce_perf"))
    fake.add("all_reduce_perf", (1, "", "NCCL failure common.cu:1000 'unhandled cuda error'\n"))
    (check,) = by_name(harness.run(module, {"infiniband_root": str(tmp_path), "level": "extended"}), "nccl_busbw")
    assert check["status"] == "fail"
    assert "unhandled cuda error" in check["detail"]


def test_live_without_nvidia_smi(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=("journalctl",))
    result = harness.run(module, {"infiniband_root": str(tmp_path)})
    assert result["healthy"] is False
    assert by_name(result, "nvidia_smi")[0]["detail"].startswith("nvidia-smi not found")
    assert fake.of("nvidia-smi") == []


def test_live_nvidia_smi_path_option(harness, node, tmp_path):
    fake = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt", tools=("journalctl",))
    result = harness.run(module, {"infiniband_root": str(tmp_path), "nvidia_smi_path": "/opt/lab/bin/nvidia-smi"})
    assert fake.calls[0] == ["/opt/lab/bin/nvidia-smi", "-q", "-x"]
    assert result["facts"]["gpu_models"] == ["NVIDIA L40S"]


def test_live_since_reads_the_journal_across_boots(harness, node, tmp_path):
    fake = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt")
    harness.run(module, {"infiniband_root": str(tmp_path), "since": "2024-03-12T09:00:00+00:00"})
    (journal,) = fake.of("journalctl")
    assert journal[:5] == ["/usr/bin/journalctl", "_TRANSPORT=kernel", "-o", "short-iso", "--no-pager"]
    assert journal[5] == "--since"


def test_live_without_systemd_fails_fabricmanager_on_an_nvswitch_node(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    fake.add("systemctl", (1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"))
    result = harness.run(module, {"infiniband_root": str(tmp_path)})
    (check,) = by_name(result, "fabricmanager")
    assert check["status"] == "fail"
    assert "gave no state" in check["detail"]
    assert result["healthy"] is False


def test_live_inactive_fabricmanager_fails(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    fake.add("systemctl", (3, "inactive\n", ""))
    (check,) = by_name(harness.run(module, {"infiniband_root": str(tmp_path)}), "fabricmanager")
    assert check["status"] == "fail"
    assert check["action"] == "reboot_node"


# --- the detection gaps through the module's options -----------------------------------------------


def test_offline_all_links_inactive_and_fallen_off_bus(harness):
    result = harness.run(
        module,
        {
            "nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"),
            "nvlink_status": fixture("nvlink/h100-8x-status-all-inactive.txt"),
            "kernel_log": fixture("kernel-log/fallen-off-bus-dmesg.log"),
        },
    )
    assert {c["status"] for c in by_name(result, "nvlink")} == {"fail"}
    assert {c["status"] for c in by_name(result, "fallen_off_bus")} == {"fail"}
    assert result["healthy"] is False


def test_pcie_platform_width_and_baseline_options(harness):
    args = {"nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-pcie-x8-platform.xml")}
    assert {c["status"] for c in by_name(harness.run(module, args), "pcie_link")} == {"fail"}
    declared = harness.run(module, dict(args, expected_pcie_width=8, expected_pcie_gen=5))
    assert {c["status"] for c in by_name(declared, "pcie_link")} == {"pass"}
    baseline = declared["facts"]["pcie"]
    assert baseline["00000000:18:00.0"] == {"width": 8, "gen": 5}
    kept = harness.run(module, dict(args, pcie_baseline=baseline))
    assert {c["status"] for c in by_name(kept, "pcie_link")} == {"pass"}
    failure = harness.fail(module, dict(args, pcie_baseline={"GPU0": {"width": 8}}))
    assert "pcie_baseline" in failure["msg"]


# --- every command under a time limit, and fail-closed reads ---------------------------------------


def unwrapped(fake):
    """Answer ``timeout -k 5 N tool ...`` as ``tool ...`` would be answered."""

    def answer(argv):
        assert argv[1:3] == ["-k", "5"], argv
        assert argv[3].isdigit(), argv
        return fake.answer(argv[4:])

    return answer


def test_every_command_runs_under_timeout(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi", "timeout"))
    fake.fallback = unwrapped(fake)
    result = harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard", "command_timeout": 20})
    assert fake.calls
    assert all(call[0] == "/usr/bin/timeout" for call in fake.calls)
    assert {call[3] for call in fake.calls if call[4] != "/usr/bin/dcgmi"} == {"20"}
    (dcgmi,) = [call for call in fake.calls if call[4] == "/usr/bin/dcgmi"]
    assert dcgmi[:4] == ["/usr/bin/timeout", "-k", "5", "300"]
    assert result["commands"][0] == "/usr/bin/timeout -k 5 20 /usr/bin/nvidia-smi -q -x"
    assert result["healthy"] is True, result["summary"]


def test_a_hung_dcgmi_is_a_failure_naming_the_limit(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "dcgmi", "timeout"))
    answer = unwrapped(fake)
    fake.fallback = lambda argv: (124, "", "") if argv[4].endswith("dcgmi") else answer(argv)
    args = {"infiniband_root": str(tmp_path), "level": "standard", "diag_timeout": 60}
    (check,) = by_name(harness.run(module, args), "dcgm_diag")
    assert check["status"] == "fail"
    assert check["detail"].startswith("dcgmi diag -r 1: the DCGM host engine did not answer in 60 s")


def test_a_hung_nvidia_smi_fails_the_node(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=(*LIVE_TOOLS, "timeout"))
    fake.fallback = lambda argv: (137, "", "")
    result = harness.run(module, {"infiniband_root": str(tmp_path)})
    (check,) = by_name(result, "nvidia_smi")
    assert check["status"] == "fail"
    assert "did not finish in 60 s" in check["detail"]


def test_without_coreutils_timeout_the_module_warns(harness, node, tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, message: warned.append(message))
    node("h100-sxm-8x-healthy.xml")
    harness.run(module, {"infiniband_root": str(tmp_path)})
    assert warned == ["coreutils timeout not found: commands run without a time limit"]


def test_unreadable_kernel_log_fails_the_xid_checks(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    fake.add("journalctl", (1, "", "No journal files were opened due to insufficient permissions.\n"))
    result = harness.run(module, {"infiniband_root": str(tmp_path), "kernel_log_source": "journalctl"})
    assert {c["status"] for c in result["checks"] if c["name"] in ("xid", "fallen_off_bus", "sxid")} == {"fail"}
    assert "run as root" in by_name(result, "xid")[0]["detail"]


def test_failed_nvlink_read_fails_only_where_links_are_expected(harness, node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    fake.add("nvidia-smi nvlink -s", (255, "", "Unable to determine the device handle for GPU 0000:18:00.0\n"))
    (check,) = by_name(harness.run(module, {"infiniband_root": str(tmp_path)}), "nvlink")
    assert check["status"] == "fail"
    assert "nvidia-smi nvlink -s failed" in check["detail"]
    fake = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt")
    fake.add("nvidia-smi nvlink -s", (255, "", "not supported\n"))
    (check,) = by_name(harness.run(module, {"infiniband_root": str(tmp_path)}), "nvlink")
    assert check["status"] == "skip"


def test_expected_ib_port_count(harness):
    args = {
        "nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"),
        "infiniband_root": fixture("infiniband/degraded-8x-ndr"),
    }
    loose = harness.run(module, args)
    assert {c["status"] for c in by_name(loose, "infiniband")} == {"pass", "warn"}  # a down port only warns
    strict = harness.run(module, dict(args, expected_ib_port_count=8, expected_ib_rate=400))
    (count,) = [c for c in by_name(strict, "infiniband") if c["detail"].startswith(("6 of 8", "7 of 8"))]
    assert count["status"] == "fail"
    assert "mlx5_3" in count["detail"]
    healthy = harness.run(
        module, dict(args, infiniband_root=fixture("infiniband/healthy-8x-ndr"), expected_ib_port_count=8)
    )
    assert "fail" not in {c["status"] for c in by_name(healthy, "infiniband")}


@pytest.mark.parametrize("capture", ["h200-1x-vm-idle.xml", "h200-1x-vm-load.xml"])
def test_one_h200_in_a_vm_is_healthy_live_and_offline(harness, node, tmp_path, capture):
    """Real captures (driver 580.159.04, one GPU, no NVSwitch): nvidia-smi nvlink -s prints nothing (issue 26)."""
    fake = node(capture, nvlink_status="nvlink/h200-1x-vm-status-empty.txt")
    fake.add("nvidia-smi nvlink -e", (FIXTURES / "nvlink/h200-1x-vm-errors-empty.txt").read_text())
    harness.bins = FakeBins(set(LIVE_TOOLS) | {"dcgmi"})
    live = harness.run(module, {"infiniband_root": str(tmp_path), "level": "standard"})
    offline = harness.run(
        module,
        {
            "nvidia_smi_xml": fixture("nvidia-smi/" + capture),
            "nvlink_status": fixture("nvlink/h200-1x-vm-status-empty.txt"),
            "nvlink_errors": fixture("nvlink/h200-1x-vm-errors-empty.txt"),
            "kernel_log": fixture("kernel-log/clean-journal-short-iso.log"),
        },
    )
    for result in (live, offline):
        assert result["healthy"] is True, result["summary"]["failed"]
        assert result["actions"]["node"] == "none"
        assert by_name(result, "nvlink")[0]["detail"] == "one GPU, no NVSwitch: no NVLink expected"
