"""gpuops-gpu-health on a GPU with MIG on: the layout in --json, and an Xid 63 kept open across runs.

With MIG on the driver does not report remapped rows, so a recorded remap (Xid 63) is the only sign of a pending
one: the command keeps it open like a fatal finding instead of seeing it in one run's window only.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    kernel_log,
    mig_health,
    nvidia_smi_xml,
    open_findings,
)

from . import test_node_command
from .conftest import FIXTURES
from .test_mig_drift import H200_SET, declared
from .test_node_command import CLEAN, Tools, drain_reason, run

node = test_node_command.node  # the node command tests' fixture, under its name here
MIG = (FIXTURES / "nvidia-smi/h200-1x-mig-3211.xml").read_text(encoding="utf-8")
XID63 = (
    "2024-03-12T10:00:00+0000 gpu-a01 kernel: NVRM: Xid (PCI:0000:00:06): 63, pid=0, name=x, "
    "Row Remapper: New row (0x00000000001ff1c0) Marked for Remapping, reset gpu to activate.\n"
)


def row_remap(out):
    payload = json.loads(out)
    return next(c for c in payload["checks"] if c["name"] == "row_remap"), payload


def test_the_json_verdict_carries_the_mig_layout(node):
    code, out, _err = run(node, Tools(smi=MIG), "--json")
    check, payload = row_remap(out)
    mig = payload["facts"]["gpus"][0]["mig"]
    assert (mig["current"], mig["pending"]) == (True, True)
    assert [instance["id"] for instance in mig["gpu_instances"]] == [2, 4, 7, 8]
    assert check["status"] == "pass"
    assert code == 1  # the node's config expects 8 GPUs; this one has 1


def test_an_xid_63_with_mig_on_stays_open_until_a_drain_is_confirmed(node):
    first = Tools(smi=MIG, log=XID63, update_rc=1)
    run(node, first, "--drain")
    second = Tools(smi=MIG, log=CLEAN)  # the log since the last run has nothing new
    _code, out, _err = run(node, second, "--drain", "--json")
    check, _payload = row_remap(out)
    assert check["status"] == "fail"
    assert "Xid 63 x1" in check["detail"]
    assert drain_reason(second)  # the second run drained the node, and Slurm confirms it
    third = Tools(smi=MIG, log=CLEAN)  # drained and confirmed by the second run: acted on
    check, _payload = row_remap(run(node, third, "--json")[1])
    assert check["status"] == "pass"


def test_only_xid_63_of_a_gpu_with_mig_on_is_kept():
    smi = nvidia_smi_xml.parse(MIG)
    kernel = kernel_log.parse(XID63 + XID63.replace("0000:00:06", "0000:18:00"))
    keep = mig_health.pending_remap(smi["gpus"])
    stored = open_findings.still_open(kernel, [], "boot-1", False, keep)
    assert [entry["pci_bus_id"] for entry in stored] == ["0000:00:06"]
    without_mig = nvidia_smi_xml.parse((FIXTURES / "nvidia-smi/h200-1x-vm-idle.xml").read_text(encoding="utf-8"))
    assert open_findings.still_open(kernel, [], "boot-1", False, mig_health.pending_remap(without_mig["gpus"])) == []
    reopened, count = open_findings.reopen(kernel_log.parse(CLEAN), stored, "boot-1")
    assert count == 1
    check = next(
        c for c in health_checks.evaluate({"smi": smi, "kernel": reopened})["checks"] if c["name"] == "row_remap"
    )
    assert check["status"] == "fail"


def test_the_command_fails_a_gpu_whose_layout_differs_from_the_declared_one(node):
    config = json.loads((node["tmp"] / "gpu-health.json").read_text())
    config.update(mig_profile_set=H200_SET, mig_declared=declared({"1g.18gb": 7}), expected_gpu_count=1)
    (node["tmp"] / "gpu-health.json").write_text(json.dumps(config))
    _code, out, _err = run(node, Tools(smi=MIG), "--json")
    found = next(c for c in json.loads(out)["checks"] if c["name"] == "mig_layout")
    assert (found["status"], found["gpu_index"]) == ("fail", 0)
    assert found["detail"] == "GPU 0: declared 7x 1g.18gb, found 2x 1g.18gb + 1x 2g.35gb + 1x 3g.71gb"
