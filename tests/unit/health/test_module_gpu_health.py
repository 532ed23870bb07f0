"""gpuops.cluster.gpu_health through its argument spec: offline triage on fixtures, live mode with commands mocked."""

import json
import os
import stat

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module

from .conftest import FIXTURES


class AnsibleExitJson(Exception):
    pass


class AnsibleFailJson(Exception):
    pass


@pytest.fixture(autouse=True)
def module_exits(monkeypatch):
    def exit_json(self, **kwargs):
        raise AnsibleExitJson(kwargs)

    def fail_json(self, **kwargs):
        kwargs["failed"] = True
        raise AnsibleFailJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def run(args, expect=AnsibleExitJson):
    with patch_module_args(args), pytest.raises(expect) as raised:
        module.main()
    result = raised.value.args[0]
    json.dumps(result)  # what Ansible returns must be JSON
    return result


def fixture(relative):
    return str(FIXTURES / relative)


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


# --- offline triage ---------------------------------------------------------------------------------


def test_offline_triage_runs_no_command(monkeypatch):
    def no_command(self, *args, **kwargs):
        raise AssertionError("offline triage ran a command: %s" % (args,))

    monkeypatch.setattr(basic.AnsibleModule, "run_command", no_command)
    result = run(
        {
            "nvidia_smi_xml": fixture("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"),
            "kernel_log": fixture("kernel-log/clean-journal-short-iso.log"),
            "expected_gpu_count": 8,
        }
    )
    assert result["mode"] == "offline"
    assert result["commands"] == []
    assert result["healthy"] is False
    assert result["actions"]["node"] == "reset_gpu"
    assert result["changed"] is False
    assert by_name(result, "nvlink")[0]["detail"] == "offline triage without nvlink_status"
    assert by_name(result, "infiniband")[0]["detail"] == "offline triage without infiniband_root"


def test_offline_full_capture_of_a_broken_h100():
    result = run(
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
        }
    )
    failed = {c["name"] for c in result["checks"] if c["status"] == "fail"}
    assert failed >= {"gpu_count", "xid", "sxid", "nvlink", "infiniband", "fabricmanager", "dcgm_diag", "nccl_busbw"}
    assert result["facts"]["gpu_count"] == 7
    assert result["facts"]["kernel_log_formats"] == ["journal_short"]
    crc = [c for c in by_name(result, "nvlink_errors") if c["status"] == "warn"]
    assert len(crc) == 1
    assert "crc_errors=912" in crc[0]["detail"]


def test_fail_on_unhealthy():
    result = run(
        {"nvidia_smi_xml": fixture("nvidia-smi/v100-sxm2-8x-r470-retired-pages.xml"), "fail_on_unhealthy": True},
        expect=AnsibleFailJson,
    )
    assert result["msg"].startswith("GPU health: ")
    assert "retired_pages[gpu2]" in result["msg"]
    assert "recommended action reset_gpu" in result["msg"]
    assert result["healthy"] is False
    assert result["checks"]


def test_healthy_with_fail_on_unhealthy_exits():
    result = run({"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "fail_on_unhealthy": True})
    assert result["healthy"] is True


def test_unreadable_capture_says_what_to_do():
    result = run({"nvidia_smi_xml": "/nonexistent/x.xml"}, expect=AnsibleFailJson)
    assert "cannot read nvidia_smi_xml /nonexistent/x.xml" in result["msg"]


def test_bad_since():
    result = run({"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "since": "last tuesday"}, expect=AnsibleFailJson)
    assert result["msg"].startswith("since: not a time")


def test_bad_skip_check_is_rejected_by_the_spec():
    result = run({"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "skip_checks": ["ecc"]}, expect=AnsibleFailJson)
    assert "skip_checks" in result["msg"]


def test_since_window_in_offline_mode():
    args = {
        "nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"),
        "kernel_log": fixture("kernel-log/xid-journal-short-iso.log"),
    }
    default = run(args)
    wide = run(dict(args, since="2024-03-11T00:00:00+00:00"))
    assert default["facts"]["kernel_events"] == 9
    assert wide["facts"]["kernel_events"] == 10  # the Xid 94 of the previous boot


# --- Prometheus textfile ----------------------------------------------------------------------------


def test_textfile_atomic_write_mode_and_idempotence(tmp_path):
    path = tmp_path / "gpuops_gpu_health.prom"
    args = {"nvidia_smi_xml": fixture("nvidia-smi/h100-sxm-8x-healthy.xml"), "prometheus_textfile": str(path)}
    first = run(args)
    assert first["changed"] is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert "gpuops_gpu_health_healthy 1" in path.read_text()
    assert sorted(os.listdir(tmp_path)) == ["gpuops_gpu_health.prom"]  # no temporary file left
    second = run(args)
    assert second["changed"] is False  # only the run-time gauge moved


def test_textfile_check_and_diff_mode(tmp_path):
    path = tmp_path / "health.prom"
    path.write_text("old\n")
    result = run(
        {
            "nvidia_smi_xml": fixture("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"),
            "prometheus_textfile": str(path),
            "_ansible_check_mode": True,
            "_ansible_diff": True,
        }
    )
    assert result["changed"] is True
    assert path.read_text() == "old\n"  # check mode writes nothing
    assert result["diff"]["before"] == "old\n"
    assert "gpuops_gpu_health_healthy 0" in result["diff"]["after"]


def test_textfile_directory_must_exist(tmp_path):
    result = run(
        {"nvidia_smi_xml": fixture("nvidia-smi/l40s-1x.xml"), "prometheus_textfile": str(tmp_path / "no" / "f.prom")},
        expect=AnsibleFailJson,
    )
    assert "does not exist" in result["msg"]


# --- live mode --------------------------------------------------------------------------------------


class FakeNode:
    """Answers the module's commands from fixtures and records them."""

    def __init__(
        self, xml, nvlink_status="nvlink/h100-8x-status-healthy.txt", tools=("nvidia-smi", "journalctl", "systemctl")
    ):
        self.xml = (FIXTURES / "nvidia-smi" / xml).read_text()
        self.nvlink_status = (FIXTURES / nvlink_status).read_text()
        self.tools = set(tools)
        self.calls = []

    def get_bin_path(self, module_self, name, required=False, opt_dirs=None):
        return "/usr/bin/" + name if name in self.tools else None

    def run_command(self, module_self, args, environ_update=None, **kwargs):
        assert isinstance(args, list), "commands are argv lists"
        assert environ_update == {"LC_ALL": "C"}
        self.calls.append(args)
        tool = os.path.basename(args[0])
        if tool == "nvidia-smi" and args[1:] == ["-q", "-x"]:
            return 0, self.xml, ""
        if tool == "nvidia-smi" and args[1:] == ["nvlink", "-s"]:
            return 0, self.nvlink_status, ""
        if tool == "nvidia-smi" and args[1:] == ["nvlink", "-e"]:
            return 0, (FIXTURES / "nvlink/h100-8x-errors-clean.txt").read_text(), ""
        if tool == "journalctl":
            return 0, (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(), ""
        if tool == "systemctl":
            return 0, "active\n", ""
        if tool == "dcgmi":
            return 0, (FIXTURES / "dcgm/dcgmi-diag-r1-pass.json").read_text(), ""
        raise AssertionError("unexpected command %s" % args)

    def nvidia_smi_calls(self):
        return [call for call in self.calls if os.path.basename(call[0]) == "nvidia-smi"]


def patch_method(monkeypatch, name, function):
    """Replace ``AnsibleModule.<name>`` by ``function(module_self, *args, **kwargs)``."""

    def method(module_self, *args, **kwargs):
        return function(module_self, *args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, name, method)


@pytest.fixture
def node(monkeypatch):
    def install(*args, **kwargs):
        fake = FakeNode(*args, **kwargs)
        patch_method(monkeypatch, "get_bin_path", fake.get_bin_path)
        patch_method(monkeypatch, "run_command", fake.run_command)
        return fake

    return install


def test_live_quick_runs_nvidia_smi_q_x_exactly_once(node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    result = run({"infiniband_root": str(tmp_path), "expected_gpu_count": 8})
    assert result["mode"] == "live"
    assert [c for c in fake.calls if c[1:] == ["-q", "-x"]] == [["/usr/bin/nvidia-smi", "-q", "-x"]]
    assert fake.calls == [
        ["/usr/bin/nvidia-smi", "-q", "-x"],
        ["/usr/bin/journalctl", "-k", "-b", "0", "-o", "short-iso", "--no-pager"],
        ["/usr/bin/nvidia-smi", "nvlink", "-s"],
        ["/usr/bin/systemctl", "is-active", "nvidia-fabricmanager"],
    ]
    assert result["commands"] == [" ".join(call) for call in fake.calls]
    assert result["healthy"] is True, result["summary"]
    assert by_name(result, "fabricmanager")[0]["status"] == "pass"
    assert by_name(result, "nvlink_errors")[0]["detail"] == "NVLink error counters are read from level=standard"


def test_live_with_nvlink_skipped_is_one_nvidia_smi_call(node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    run({"infiniband_root": str(tmp_path), "skip_checks": ["nvlink", "nvlink_errors"]})
    assert fake.nvidia_smi_calls() == [["/usr/bin/nvidia-smi", "-q", "-x"]]


def test_live_nvidia_smi_calls_do_not_grow_with_gpu_count(node, tmp_path):
    eight = node("h100-sxm-8x-healthy.xml")
    run({"infiniband_root": str(tmp_path)})
    one = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt")
    run({"infiniband_root": str(tmp_path)})
    assert len(eight.nvidia_smi_calls()) == len(one.nvidia_smi_calls()) == 2


def test_live_standard_without_dcgm_is_a_skip_with_reason(node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml")
    result = run({"infiniband_root": str(tmp_path), "level": "standard"})
    assert ["/usr/bin/nvidia-smi", "nvlink", "-e"] in fake.calls
    (check,) = by_name(result, "dcgm_diag")
    assert check["status"] == "skip"
    assert "dcgmi not installed" in check["detail"]
    assert result["healthy"] is True


def test_live_standard_runs_dcgmi_diag_r1(node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=("nvidia-smi", "journalctl", "systemctl", "dcgmi"))
    result = run({"infiniband_root": str(tmp_path), "level": "standard"})
    assert ["/usr/bin/dcgmi", "diag", "-r", "1", "-j"] in fake.calls
    assert by_name(result, "dcgm_diag")[0]["status"] == "pass"


def test_live_extended_without_nccl_tests_is_a_skip(node, tmp_path):
    node("h100-sxm-8x-healthy.xml")
    result = run({"infiniband_root": str(tmp_path), "level": "extended"})
    assert by_name(result, "nccl_busbw")[0]["detail"] == "nccl-tests all_reduce_perf not installed"


def test_live_without_nvidia_smi(node, tmp_path):
    fake = node("h100-sxm-8x-healthy.xml", tools=("journalctl",))
    result = run({"infiniband_root": str(tmp_path)})
    assert result["healthy"] is False
    assert by_name(result, "nvidia_smi")[0]["detail"].startswith("nvidia-smi not found")
    assert fake.nvidia_smi_calls() == []


def test_live_nvidia_smi_path_option(node, tmp_path):
    fake = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt", tools=("journalctl",))
    result = run({"infiniband_root": str(tmp_path), "nvidia_smi_path": "/opt/lab/bin/nvidia-smi"})
    assert fake.calls[0] == ["/opt/lab/bin/nvidia-smi", "-q", "-x"]
    assert result["facts"]["gpu_models"] == ["NVIDIA L40S"]


def test_live_since_reads_the_journal_across_boots(node, tmp_path):
    fake = node("l40s-1x.xml", nvlink_status="nvlink/l40s-status.txt")
    run({"infiniband_root": str(tmp_path), "since": "2024-03-12T09:00:00+00:00"})
    journal = next(call for call in fake.calls if call[0].endswith("journalctl"))
    assert journal[:5] == ["/usr/bin/journalctl", "_TRANSPORT=kernel", "-o", "short-iso", "--no-pager"]
    assert journal[5] == "--since"


def test_live_without_systemd_skips_fabricmanager(node, tmp_path, monkeypatch):
    fake = node("h100-sxm-8x-healthy.xml")
    original = fake.run_command

    def no_systemd(module_self, args, **kwargs):
        if args[0].endswith("systemctl"):
            fake.calls.append(args)
            return 1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
        return original(module_self, args, **kwargs)

    patch_method(monkeypatch, "run_command", no_systemd)
    result = run({"infiniband_root": str(tmp_path)})
    (check,) = by_name(result, "fabricmanager")
    assert check["status"] == "skip"
    assert "gave no state" in check["detail"]
    assert result["healthy"] is True


def test_live_inactive_fabricmanager_fails(node, tmp_path, monkeypatch):
    fake = node("h100-sxm-8x-healthy.xml")
    original = fake.run_command

    def inactive(module_self, args, **kwargs):
        if args[0].endswith("systemctl"):
            return 3, "inactive\n", ""
        return original(module_self, args, **kwargs)

    patch_method(monkeypatch, "run_command", inactive)
    (check,) = by_name(run({"infiniband_root": str(tmp_path)}), "fabricmanager")
    assert check["status"] == "fail"
    assert check["action"] == "reboot_node"
