"""The gpu_health reader against a fake node tree (``root``) and a stand-in module, without AnsibleModule."""

from __future__ import annotations

import datetime
import shutil

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import node_reader

from .conftest import FIXTURES

BTIME = 1710233891  # 2024-03-12 08:58:11 UTC, the boot of the kernel-log fixtures


class Failed(Exception):
    pass


class StandIn:
    """The part of AnsibleModule the reader uses."""

    def __init__(self, answers=None, bins=("nvidia-smi", "journalctl", "systemctl"), **params):
        self.params = {
            "skip_checks": [],
            "nvidia_smi_xml": None,
            "nvidia_smi_path": None,
            "kernel_log": None,
            "kernel_log_source": "auto",
            "nvlink_status": None,
            "nvlink_errors": None,
            "infiniband_root": None,
            "fabricmanager_state": None,
            "dcgm_diag_json": None,
            "nccl_output": None,
            "all_reduce_perf_path": None,
            "level": "quick",
            **params,
        }
        self.answers = answers or {}
        self.bins = set(bins)
        self.calls = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return "/usr/bin/" + name if name in self.bins else None

    def run_command(self, argv):
        self.calls.append(argv)
        return self.answers[" ".join([argv[0].rsplit("/", 1)[-1], *argv[1:]])]

    def fail_json(self, msg, **kwargs):
        raise Failed(msg)


@pytest.fixture
def tree(tmp_path):
    """A node root with /proc/stat, one NVSwitch and the healthy InfiniBand sysfs."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu  1 2 3 4\nbtime %d\nprocesses 42\n" % BTIME)
    (tmp_path / "proc/driver/nvidia-nvswitch/devices").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia-nvswitch/devices/0000:05:00.0").write_text("")
    shutil.copytree(FIXTURES / "infiniband/healthy-8x-ndr/sys", tmp_path / "sys")
    return tmp_path


def test_boot_time_and_nvswitches_come_from_the_root(tree, tmp_path_factory):
    booted = node_reader.boot_time(str(tree))
    assert booted == datetime.datetime.fromtimestamp(BTIME, datetime.timezone.utc)
    assert node_reader.nvswitch_devices(str(tree)) == ["0000:05:00.0"]
    empty = tmp_path_factory.mktemp("empty")
    assert node_reader.boot_time(str(empty)) is None
    assert node_reader.nvswitch_devices(str(empty)) == []


def test_live_read_under_a_fake_root(tree):
    xml = (FIXTURES / "nvidia-smi/l40s-1x.xml").read_text()  # a PCIe GPU: no fabric in the capture
    module = StandIn(
        answers={
            "nvidia-smi -q -x": (0, xml, ""),
            "nvidia-smi nvlink -s": (0, (FIXTURES / "nvlink/l40s-status.txt").read_text(), ""),
            "journalctl -k -b 0 -o short-iso --no-pager": (
                0,
                (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(),
                "",
            ),
            "systemctl is-active nvidia-fabricmanager": (0, "active\n", ""),
        }
    )
    reader = node_reader.NodeReader(module, root=str(tree))
    inputs = reader.read_all(offline=False, since=None)
    # the NVSwitch under the fake root makes Fabric Manager required, so systemctl is asked
    assert inputs["fabricmanager"] == {"required": True, "state": "active"}
    assert [port["name"] for port in inputs["infiniband"]["ports"]][:2] == ["mlx5_0:1", "mlx5_1:1"]
    assert inputs["smi"]["gpus"][0]["product_name"] == "NVIDIA L40S"
    assert reader.commands == [
        "/usr/bin/nvidia-smi -q -x",
        "/usr/bin/journalctl -k -b 0 -o short-iso --no-pager",
        "/usr/bin/nvidia-smi nvlink -s",
        "/usr/bin/systemctl is-active nvidia-fabricmanager",
    ]
    assert inputs["unavailable"]["nvlink_errors"] == "NVLink error counters are read from level=standard"


def test_without_nvswitch_fabricmanager_is_not_required(tmp_path):
    module = StandIn(answers={"nvidia-smi -q -x": (0, (FIXTURES / "nvidia-smi/l40s-1x.xml").read_text(), "")})
    reader = node_reader.NodeReader(module, root=str(tmp_path))
    smi = reader.smi()
    assert reader.fabricmanager(False, smi) == {"required": False, "reason": "no NVSwitch on this node"}
    assert module.calls == [["/usr/bin/nvidia-smi", "-q", "-x"]]


def test_offline_reads_captures_and_runs_nothing(tree):
    module = StandIn(nvidia_smi_xml=str(FIXTURES / "nvidia-smi/h100-sxm-8x-healthy.xml"))
    reader = node_reader.NodeReader(module, root=str(tree))
    inputs = reader.read_all(offline=True, since=None)
    assert module.calls == []
    assert inputs["infiniband"] is None  # offline needs infiniband_root, the reader's root is not used
    assert inputs["unavailable"]["fabricmanager"] == "offline triage without fabricmanager_state"


def test_unreadable_capture_fails_with_the_path(tmp_path):
    module = StandIn(kernel_log=str(tmp_path / "missing.log"))
    with pytest.raises(Failed, match=r"cannot read kernel_log .*missing\.log"):
        node_reader.NodeReader(module).kernel(offline=True, since=None)


def test_gate_tools_looks_up_what_the_gates_run_without_running_anything(tmp_path):
    module = StandIn(bins=("dcgmi",))
    assert node_reader.NodeReader(module).gate_tools() == {"dcgmi": "/usr/bin/dcgmi", "all_reduce_perf": None}
    assert module.calls == []


def test_a_given_all_reduce_perf_path_counts_only_when_it_is_an_executable_file(tmp_path):
    binary = tmp_path / "all_reduce_perf"
    module = StandIn(bins=(), all_reduce_perf_path=str(binary))
    assert node_reader.NodeReader(module).gate_tools()["all_reduce_perf"] is None
    binary.write_text("#!/bin/sh\n")
    assert node_reader.NodeReader(module).gate_tools()["all_reduce_perf"] is None  # not executable
    binary.chmod(0o755)
    assert node_reader.NodeReader(module).gate_tools()["all_reduce_perf"] == str(binary)
