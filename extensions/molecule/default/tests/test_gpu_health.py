"""The GPU health engine end to end on the lab nodes, healthy and with faults injected.

``playbooks/health_check.yml`` runs ``gpuops.cluster.gpu_health`` live on every lab node (the
simulated nvidia-smi, the lab kernel log, systemd's view of nvidia-fabricmanager) through
ansible-runner (``tests/integration/playbook_run.py``), so one run per state proves both the
module's verdict (its full result, read from the run's events) and the playbook's exit code and
JSON report. Three states, in one module fixture that always clears the faults again:

1. as converged: both nodes healthy, every expected check passes, the run exits 0;
2. faults: the NVSwitch node loses a GPU, an NVLink and gets a pending row remap; the PCIe node
   gets an Xid 79 in its kernel log and a GPU in HW slowdown: both unhealthy, the run fails;
3. the PCIe node cleared but for an Xid 13 (an application fault): healthy again; the NVSwitch
   node also loses nvidia-fabricmanager: the run still fails and its report names it alone.

Faults go in through the simulator's ``gpuops-lab-fault`` (see extensions/molecule/lab/README.md) and
``systemctl stop``; the fixture clears them, removes the kernel log and starts Fabric Manager
again, so the other verify tests, converge and verify can run again.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
import testinfra
import yaml

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from tests.integration.playbook_run import PlaybookRun, run_playbook

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
NODES = sorted(_INVENTORY["lab_nodes"]["hosts"])
INVENTORY_DIR = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent

KERNEL_LOG = "/var/log/gpuops-lab/kern.log"
DRIVER = "550.127.05"
JUDGE = "Judge GPUs, kernel log, NVLink, Fabric Manager and InfiniBand"
EXTRAVARS = {
    "gpuops_health_hosts": "lab_nodes",
    "gpuops_health_kernel_log": KERNEL_LOG,
    # Per node, from the scenario inventory: lab_gpus {model: H100-SXM, count: 8} -> 8 GPUs named "*H100*".
    "gpuops_health_expected_gpu_count": "{{ lab_gpus.count }}",
    "gpuops_health_expected_gpu_model": "{{ lab_gpus.model.split('-') | first }}",
    "gpuops_health_expected_driver_version": DRIVER,
}

# What a healthy, converged lab node must show (level quick, no InfiniBand in a container).
PASS_ON_EVERY_NODE = {
    "nvidia_smi", "gpu_count", "gpu_model", "driver_version", "persistence_mode", "ecc_mode", "ecc_errors",
    "row_remap", "pcie_link", "temperature", "clock_events", "recovery", "xid", "fallen_off_bus", "sxid",
}  # fmt: skip
NVSWITCH_ONLY = {"mig_mode", "fabric", "nvlink", "fabricmanager"}
# kernel_module: the lab's stand-in driver packages register no DKMS module and ship no nvidia.ko, so there is
# nothing to check ("no NVIDIA driver installed by DKMS or a kernel module package"); tests/unit covers the check.
SKIPPED_ON_EVERY_NODE = {
    "retired_pages",
    "nvlink_errors",
    "infiniband",
    "dcgm_diag",
    "nccl_busbw",
    "kernel_module",
    # the smoke nodes have no container toolkit, no DCGM Exporter and no RDMA HCA: each check skips, never passes
    "cdi_spec",
    "dcgm_exporter",
    "gpudirect_rdma",
    # no MIG layout declared (gpuops_mig): nothing to compare
    "mig_layout",
}
PER_GPU = {"gpu_model", "persistence_mode", "ecc_mode", "ecc_errors", "row_remap", "pcie_link", "temperature",
           "clock_events", "recovery"}  # fmt: skip
PER_GPU_NVSWITCH = {"mig_mode", "fabric", "nvlink"}

# Injected faults, by GPU slot (the simulator's --gpu; nvidia-smi renumbers after a missing GPU,
# so assertions go by PCI bus id).
NVSWITCH_MISSING, NVSWITCH_NVLINK, NVSWITCH_NVLINK_LINK, NVSWITCH_REMAP = 7, 2, 5, 4
PCIE_XID79, PCIE_SLOWDOWN, PCIE_XID13 = 1, 2, 0
XID79_TEXT = "pid=<unknown>, name=<unknown>, GPU has fallen off the bus."
XID13_TEXT = "pid=31337, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address"


def _node(name: str):
    return testinfra.get_host(f"podman://{name}")


def _kernel_log_lines(node: str) -> str:
    """A clean boot's NVIDIA kernel lines in rsyslog's format: noise the Xid parser must ignore."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    return (
        f"{now} {node} kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 239\n"
        f"{now} {node} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build\n"
    )


def _shell(host, *commands: list) -> str:
    """Run ``commands`` (argv lists) joined by ``&&`` in one podman exec; their output."""
    return host.check_output(" && ".join(shlex.join(str(arg) for arg in argv) for argv in commands))


def _fault(*args) -> list:
    return ["gpuops-lab-fault", *args]


RESET = [_fault("clear"), ["rm", "-f", KERNEL_LOG]]
# Converge starts nvidia-fabricmanager on the NVSwitch node; state 3 stops it, the fixture starts it again.
# Under load the stand-in's stop can run past its stop timeout: systemd then kills it and the unit
# ends "failed" (and systemctl stop exits non-zero). Both "inactive" and "failed" are a Fabric Manager
# that is not running, which the health check must fail; the fixture waits for either before judging.
FABRICMANAGER_STOP = ["sh", "-c", "systemctl stop nvidia-fabricmanager || true"]
FABRICMANAGER_START = ["systemctl", "start", "nvidia-fabricmanager"]
FABRICMANAGER_STOPPED = ("inactive", "failed")
SETTLE_S = 90


def _wait_for_fabricmanager(host, states: tuple) -> str:
    """Poll ``systemctl is-active nvidia-fabricmanager`` until it reads one of ``states`` (bounded); the state."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        state = host.run("systemctl is-active nvidia-fabricmanager").stdout.strip()
        if state in states or time.monotonic() > deadline:
            assert state in states, f"nvidia-fabricmanager still {state!r} after {SETTLE_S} s, expected one of {states}"
            return state
        time.sleep(1)


def _start_clean(node: str) -> list:
    """Commands giving ``node`` a clean kernel log, then printing its faults (expected: none)."""
    return [["sh", "-c", f"printf %s {shlex.quote(_kernel_log_lines(node))} > {KERNEL_LOG}"], _fault("show")]


def _health_check(workdir: Path, name: str) -> tuple[PlaybookRun, dict]:
    report = workdir / f"{name}.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        INVENTORY_DIR,
        workdir / name,
        extravars={**EXTRAVARS, "gpuops_health_report_path": str(report)},
    )
    assert report.is_file(), run.stdout[-3000:]
    return run, json.loads(report.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Run health_check.yml in the three states; always clear the faults afterwards."""
    workdir = tmp_path_factory.mktemp("gpu_health")
    hosts = {name: _node(name) for name in NODES}
    gpus = {name: json.loads(host.file("/etc/gpuops-lab/gpus.json").content_string) for name, host in hosts.items()}
    nvswitch = [name for name in NODES if gpus[name]["nvswitch"]]
    pcie = [name for name in NODES if not gpus[name]["nvswitch"]]
    assert len(nvswitch) == 1, f"this test needs one NVSwitch node and one PCIe node: {gpus}"
    assert len(pcie) == 1, f"this test needs one NVSwitch node and one PCIe node: {gpus}"
    state = {"gpus": gpus, "nvswitch": nvswitch[0], "pcie": pcie[0]}
    big, small = hosts[state["nvswitch"]], hosts[state["pcie"]]
    try:
        for name, host in hosts.items():
            faults = json.loads(_shell(host, *_start_clean(name)))
            assert faults == {}, f"{name}: a fault was left from an earlier run: {faults}"
        state["healthy"] = _health_check(workdir, "healthy")
        # GPU slot -> PCI bus id, read before any GPU goes missing.
        state["bus"] = {
            name: {
                gpu["index"]: gpu["pci_bus_id"] for gpu in _module_result(state["healthy"][0], name)["facts"]["gpus"]
            }
            for name in NODES
        }

        _shell(
            big,
            _fault("missing", "--gpu", NVSWITCH_MISSING),
            _fault("nvlink-down", "--gpu", NVSWITCH_NVLINK, "--link", NVSWITCH_NVLINK_LINK),
            _fault("row-remap-pending", "--gpu", NVSWITCH_REMAP),
        )
        _shell(
            small,
            _fault("xid", "--gpu", PCIE_XID79, "--code", 79, "--message", XID79_TEXT),
            _fault("hw-slowdown", "--gpu", PCIE_SLOWDOWN),
        )
        state["faulty"] = _health_check(workdir, "faulty")

        _shell(
            small,
            *RESET,
            *_start_clean(state["pcie"]),
            _fault("xid", "--gpu", PCIE_XID13, "--code", 13, "--message", XID13_TEXT),
        )
        _shell(big, FABRICMANAGER_STOP)
        state["fabricmanager_stopped"] = _wait_for_fabricmanager(big, FABRICMANAGER_STOPPED)
        state["xid13"] = _health_check(workdir, "xid13")
    finally:
        for host in hosts.values():
            _shell(host, *RESET)
        _shell(big, FABRICMANAGER_START)
        _wait_for_fabricmanager(big, ("active",))  # the later tests (test_lab_smoke) find it running
    return state


def _module_result(run: PlaybookRun, node: str) -> dict:
    (result,) = run.results_for(task=JUDGE, host=node)
    assert result.event == "runner_on_ok", result.result
    return result.result


def _by_status(result: dict, status: str) -> list[dict]:
    return [check for check in result["checks"] if check["status"] == status]


def _failed(result: dict) -> dict:
    """{(check name, PCI bus id or None): action} of the failed checks."""
    return {(check["name"], check["pci_bus_id"]): check["action"] for check in _by_status(result, "fail")}


def _line(run: PlaybookRun, node: str) -> list[str]:
    """The first words of the playbook's line for ``node``: verdict, node, action."""
    (result,) = run.results_for(task="Print one line for this node", host=node)
    return result.result["msg"].split()[:3]


# --- 1. as converged --------------------------------------------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_converged_node_is_healthy_with_every_expected_check_passing(lab, node):
    result = _module_result(lab["healthy"][0], node)
    expected = lab["gpus"][node]
    on_nvswitch = expected["nvswitch"]
    assert result["healthy"] is True, result["summary"]
    assert result["mode"] == "live"
    assert not _by_status(result, "fail")
    assert not _by_status(result, "warn"), _by_status(result, "warn")
    passed = {check["name"] for check in _by_status(result, "pass")}
    skipped = {check["name"] for check in _by_status(result, "skip")}
    assert passed == PASS_ON_EVERY_NODE | (NVSWITCH_ONLY if on_nvswitch else set())
    assert skipped == SKIPPED_ON_EVERY_NODE | (set() if on_nvswitch else NVSWITCH_ONLY)
    for name in PER_GPU | (PER_GPU_NVSWITCH if on_nvswitch else set()):
        indexes = sorted(check["gpu_index"] for check in result["checks"] if check["name"] == name)
        assert indexes == list(range(expected["count"])), name
    assert result["actions"]["node"] == "none"
    assert result["facts"]["gpu_count"] == expected["count"]
    assert result["facts"]["driver_version"] == DRIVER
    assert result["facts"]["kernel_events"] == 0
    fabricmanager = next(check for check in result["checks"] if check["name"] == "fabricmanager")
    if on_nvswitch:
        # the default scenario's converge starts nvidia-fabricmanager on the NVSwitch node: the check is real here.
        assert fabricmanager["detail"] == "nvidia-fabricmanager active"
    else:
        assert fabricmanager["detail"] == "no NVSwitch on this node"
    # One nvidia-smi -q -x per run; the kernel log is the lab file, so no journalctl or dmesg.
    # Every command runs under coreutils timeout: "/usr/bin/timeout -k 5 60 /usr/bin/nvidia-smi -q -x".
    wrapped = [command.split() for command in result["commands"]]
    assert all(Path(argv[0]).name == "timeout" and argv[1:4] == ["-k", "5", "60"] for argv in wrapped), wrapped
    commands = [" ".join([Path(argv[4]).name, *argv[5:]]) for argv in wrapped]
    wanted = ["nvidia-smi -q -x", "nvidia-smi nvlink -s"]
    assert commands == wanted + (["systemctl is-active nvidia-fabricmanager"] if on_nvswitch else [])


def test_health_check_playbook_exits_zero_when_every_node_is_healthy(lab):
    run, report = lab["healthy"]
    assert run.rc == 0, run.stdout[-3000:]
    assert run.status == "successful"
    assert report["unhealthy"] == []
    assert sorted(node["host"] for node in report["nodes"]) == NODES
    assert all(node["healthy"] is True for node in report["nodes"])
    for node in NODES:
        assert _line(run, node) == ["HEALTHY", node, "action=none"]


# --- 2. faults on both nodes ------------------------------------------------------------------------


def test_nvswitch_node_with_a_missing_gpu_nvlink_down_and_pending_remap(lab):
    node = lab["nvswitch"]
    bus = lab["bus"][node]
    result = _module_result(lab["faulty"][0], node)
    assert result["healthy"] is False
    assert _failed(result) == {
        ("gpu_count", None): "reboot_node",
        ("nvlink", bus[NVSWITCH_NVLINK]): "reset_gpu",
        ("row_remap", bus[NVSWITCH_REMAP]): "reset_gpu",
    }
    details = {check["name"]: check["detail"] for check in _by_status(result, "fail")}
    count = lab["gpus"][node]["count"]
    assert details["gpu_count"].startswith(f"{count - 1} of {count} GPUs visible")
    assert details["nvlink"].startswith(f"NVLink {NVSWITCH_NVLINK_LINK} inactive of ")
    assert details["row_remap"] == "row remapping pending: reset the GPU to apply it"
    assert result["actions"]["node"] == "reboot_node"
    per_gpu = {gpu["pci_bus_id"]: gpu["action"] for gpu in result["actions"]["gpus"]}
    assert bus[NVSWITCH_MISSING] not in per_gpu
    assert {bus_id: action for bus_id, action in per_gpu.items() if action != "none"} == {
        bus[NVSWITCH_NVLINK]: "reset_gpu",
        bus[NVSWITCH_REMAP]: "reset_gpu",
    }
    assert result["facts"]["gpu_count"] == count - 1
    assert result["summary"]["counts"]["fail"] == 3


def test_pcie_node_with_xid_79_and_hw_slowdown(lab):
    node = lab["pcie"]
    bus = lab["bus"][node]
    result = _module_result(lab["faulty"][0], node)
    assert result["healthy"] is False
    assert _failed(result) == {
        ("xid", bus[PCIE_XID79]): "reboot_node",
        ("clock_events", bus[PCIE_SLOWDOWN]): "hardware_inspection",
    }
    (xid,) = [check for check in result["checks"] if check["name"] == "xid"]
    assert xid["detail"].startswith("Xid 79 (GPU has fallen off the bus, critical) x1 on ")
    assert xid["gpu_index"] == PCIE_XID79
    assert result["actions"]["node"] == "hardware_inspection"
    per_gpu = {gpu["pci_bus_id"]: gpu["action"] for gpu in result["actions"]["gpus"]}
    assert {bus_id: action for bus_id, action in per_gpu.items() if action != "none"} == {
        bus[PCIE_XID79]: "reboot_node",
        bus[PCIE_SLOWDOWN]: "hardware_inspection",
    }
    assert result["facts"]["kernel_events"] == 1
    assert result["summary"]["counts"]["fail"] == 2


def test_health_check_playbook_fails_and_names_both_faulty_nodes(lab):
    run, report = lab["faulty"]
    assert run.rc != 0
    assert run.status == "failed"
    assert report["unhealthy"] == NODES
    verdicts = {node["host"]: node for node in report["nodes"]}
    assert verdicts[lab["nvswitch"]]["action"] == "reboot_node"
    assert verdicts[lab["pcie"]]["action"] == "hardware_inspection"
    assert len(verdicts[lab["nvswitch"]]["problems"]) == 3
    assert any(problem.startswith(f"xid[gpu{PCIE_XID79}]: Xid 79 ") for problem in verdicts[lab["pcie"]]["problems"])
    assert _line(run, lab["nvswitch"]) == ["UNHEALTHY", lab["nvswitch"], "action=reboot_node"]
    assert _line(run, lab["pcie"]) == ["UNHEALTHY", lab["pcie"], "action=hardware_inspection"]
    (failure,) = run.failures
    assert failure.task == "Fail the run when any node is unhealthy"
    assert all(node in failure.result["msg"] for node in NODES)


# --- 3. Xid 13 alone on the PCIe node, Fabric Manager stopped on the NVSwitch node ------------------


def test_xid_13_alone_leaves_the_node_healthy(lab):
    node = lab["pcie"]
    result = _module_result(lab["xid13"][0], node)
    assert result["healthy"] is True, result["summary"]
    assert not _by_status(result, "fail")
    (warning,) = _by_status(result, "warn")
    assert warning["name"] == "xid"
    assert warning["detail"].startswith("Xid 13 (Graphics Engine Exception, application fault) x1 on ")
    assert warning["pci_bus_id"] == lab["bus"][node][PCIE_XID13]
    assert warning["action"] == "restart_application"
    assert result["actions"]["node"] == "restart_application"


def test_nvswitch_node_without_fabric_manager(lab):
    node = lab["nvswitch"]
    bus = lab["bus"][node]
    result = _module_result(lab["xid13"][0], node)
    assert result["healthy"] is False
    visible = [bus[slot] for slot in sorted(bus) if slot != NVSWITCH_MISSING]
    assert _failed(result) == {
        ("gpu_count", None): "reboot_node",
        ("nvlink", bus[NVSWITCH_NVLINK]): "reset_gpu",
        ("row_remap", bus[NVSWITCH_REMAP]): "reset_gpu",
        ("fabricmanager", None): "reboot_node",
        **{("fabric", bus_id): "reboot_node" for bus_id in visible},
    }
    fabricmanager = next(check for check in result["checks"] if check["name"] == "fabricmanager")
    # "inactive" after a clean stop, "failed" when the stop timed out under load: both are correct detections.
    stopped = lab["fabricmanager_stopped"]
    assert stopped in FABRICMANAGER_STOPPED
    assert any(fabricmanager["detail"].startswith(f"nvidia-fabricmanager {seen} on an NVSwitch system")
               for seen in FABRICMANAGER_STOPPED), fabricmanager["detail"]  # fmt: skip
    assert not fabricmanager["detail"].startswith("nvidia-fabricmanager active")
    fabric = [check["detail"] for check in _by_status(result, "fail") if check["name"] == "fabric"]
    assert all(detail.startswith("fabric registration In Progress") for detail in fabric), fabric
    assert result["summary"]["counts"]["fail"] == 3 + 1 + len(visible)


def test_health_check_report_names_only_the_faulty_node(lab):
    run, report = lab["xid13"]
    assert run.rc != 0
    assert report["unhealthy"] == [lab["nvswitch"]]
    verdicts = {node["host"]: node["healthy"] for node in report["nodes"]}
    assert verdicts == {lab["nvswitch"]: False, lab["pcie"]: True}
    assert _line(run, lab["pcie"]) == ["HEALTHY", lab["pcie"], "action=restart_application"]
