"""The rolling upgrade's gate waits, within its bound, for the NVLink fabric after a reboot (slurm_22_05 verify).

Issue 18, item 2's proof, last in the scenario. s22-gpu2 (upgraded by the rollout) becomes an NVSwitch node for the
simulated ``nvidia-smi`` (4x H100 SXM, ``nvswitch: true`` in /etc/gpuops-lab/gpus.json) with the lab's stand-in
Fabric Manager at its driver's version, whose start is slowed by a drop-in: the unit is active at once, its daemon
(and so the fabric, ``<fabric><state>`` ``In Progress`` until then, as on a real HGX) comes up 45 s later. gate.yml
runs the gate with the rolling upgrade's options set (rolling_upgrade_health_options):

1. Fabric Manager restarted, gate bound 8 s (``gpuops_health_settle_timeout``): the gate fails, naming the fabric
   that did not complete in time;
2. the node rebooted, gate with the default bound (300 s): it waits for the fabric, then passes.

Then the node is an L40S node again, without Fabric Manager. Wall times go to ``.lab/slurm_22_05_measures.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rollout_helpers import record, ru

SCENARIO = Path(__file__).resolve().parents[1]
NODE = next(node for node in ru.NODES if node != ru.CANARY)
GPUS = "/etc/gpuops-lab/gpus.json"
DROP_IN_DIR = "/etc/systemd/system/nvidia-fabricmanager.service.d"
FABRIC_DELAY = 45  # s from Fabric Manager's start to the fabric Completed
SLOW_FABRIC = (
    "[Service]\nExecStart=\n"
    f"ExecStart=/bin/sh -c 'sleep {FABRIC_DELAY}; exec /usr/lib/gpuops-lab/nvidia-fabricmanager'\n"
)


def gate(workdir: Path, name: str, **settings) -> tuple:
    start = time.monotonic()
    run = ru.run_playbook(
        SCENARIO / "gate.yml",
        ru.INVENTORY_DIR,
        workdir / name,
        extravars=settings,
        limit=NODE,
    )
    wall = round(time.monotonic() - start, 1)
    (result,) = run.results_for(task="Health gate", host=NODE)
    return run, result.result, wall


def settle_check(result: dict) -> dict:
    return next(check for check in result["checks"] if check["name"] == "settle")


@pytest.fixture(scope="module", name="gates")
def fixture_gates(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("settle_wait")
    gpus = ru.sh(NODE, "cat", GPUS)
    driver = ru.installed(NODE)["nvidia-driver"]
    branch = driver.split(".")[0]
    try:
        ru.write_file(
            NODE,
            GPUS,
            json.dumps({"model": "H100-SXM", "count": 4, "nvswitch": True}) + "\n",
        )
        ru.sh(
            NODE, "apt-get", "install", "-y", "--no-install-recommends",
            f"nvidia-fabricmanager-{branch}={driver}", f"libnvidia-nscq-{branch}={driver}",
        )  # fmt: skip
        ru.sh(NODE, "mkdir", "-p", DROP_IN_DIR)
        ru.write_file(NODE, f"{DROP_IN_DIR}/50-gpuops-lab-slow-fabric.conf", SLOW_FABRIC)
        ru.sh(NODE, "systemctl", "daemon-reload")
        ru.sh(NODE, "systemctl", "enable", "nvidia-fabricmanager")
        ru.sh(NODE, "systemctl", "restart", "nvidia-fabricmanager")
        short = gate(workdir, "short_bound", gpuops_health_settle_timeout=8)
        # after a reboot: Fabric Manager starts at boot, the fabric completes FABRIC_DELAY s later
        ru.sh(NODE, "systemctl", "reboot", check=False)
        ru.wait_for(
            f"{NODE} back after its reboot",
            lambda: ru.sh(NODE, "systemctl", "is-system-running", check=False).strip() in ("running", "degraded"),
            timeout=120,
        )
        default = gate(workdir, "default_bound")
        record("settle_gate_short_bound_wall_s", short[2])
        record("settle_gate_after_reboot_wall_s", default[2])
        record(
            "settle_gate_after_reboot_waited_s",
            default[1].get("settle", {}).get("waited_s"),
        )
        yield {"short": short, "default": default}
    finally:
        ru.sh(NODE, "systemctl", "disable", "--now", "nvidia-fabricmanager", check=False)
        ru.sh(NODE, "rm", "-rf", DROP_IN_DIR, check=False)
        ru.write_file(NODE, GPUS, gpus)
        ru.sh(
            ru.CONTROLLER,
            "scontrol",
            "update",
            f"nodename={NODE}",
            "state=resume",
            check=False,
        )


def test_the_gate_fails_naming_the_fabric_not_up_within_its_bound(gates):
    run, result, _wall = gates["short"]
    assert run.rc != 0
    check = settle_check(result)
    assert check["status"] == "fail"
    assert check["detail"].startswith("NVLink fabric not Completed after 8 s (In Progress on GPU 0, 1, 2, 3)")
    assert result["settle"]["conditions"]["fabricmanager"]["state"] == "up"
    assert result["settle"]["timeout"] == 8
    (failed,) = run.results_for(task="Fail the node when its gate failed", host=NODE)
    assert failed.result["msg"].startswith(
        "health gate (standard) failed: settle: NVLink fabric not Completed after 8 s (In Progress on GPU 0, 1, 2, 3)"
    )


def test_after_a_reboot_the_gate_waits_for_the_fabric_then_passes(gates):
    run, result, _wall = gates["default"]
    assert run.rc == 0, run.stdout[-4000:]
    assert result["healthy"] is True, result["summary"]
    settle = result["settle"]
    assert settle["timeout"] == 300
    assert settle["settled"] is True
    assert settle["waited_s"] > 0  # the fabric was still training when the gate started
    assert settle["conditions"]["fabric"]["state"] == "up"
    assert settle["conditions"]["nvlink"]["state"] == "up"
    check = settle_check(result)
    assert check["status"] == "pass"
    assert check["detail"].startswith("settled in ")
    fabric = [check for check in result["checks"] if check["name"] == "fabric"]
    assert len(fabric) == 4
    assert all(check["status"] == "pass" for check in fabric)
