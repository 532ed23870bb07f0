"""The rolling upgrade on Slurm 22.05 (molecule verify of slurm_22_05): one healthy rollout.

Two L40S lab nodes (s22-gpu1 the canary, a job running on it from converge) on 550.127.05, a Slurm
22.05 controller: the run to 550.127.08 one node at a time gates the canary at ``extended`` (the
stand-in dcgmi and all_reduce_perf) and the other at ``standard``, waits for the canary's job,
upgrades both and resumes them. The helpers are the rolling_upgrade scenario's (Slurm read through
``sinfo --json`` here: 22.05 has no ``scontrol --json``); its cases run on Slurm 24.11.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from rollout_helpers import ru


def release_and_watch(node: str, job: str) -> tuple[threading.Thread, dict]:
    """``ru.release_when_draining``, then the job's settled state, read at once: slurmctld forgets a finished job
    after MinJobAge (300 s), sooner than a rollout on a loaded machine ends (``scontrol show job`` then fails)."""
    seen = {}

    def release():
        try:
            ru.wait_for(f"{node} draining", lambda: ru.drained(ru.slurm_nodes()[node]), timeout=600)
            time.sleep(3)
        finally:
            ru.sh(node, "touch", ru.RELEASE, check=False)
        seen["job_state"] = ru.settled_job_state(job)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread, seen


@pytest.fixture(scope="module", name="rollout")
def fixture_rollout(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm_22_05")
    version = ru.sh(ru.CONTROLLER, "sinfo", "--version").strip()
    # no scontrol --json on 22.05: the helpers (and the product) read sinfo --json
    scontrol_json = subprocess.run(
        ["podman", "exec", ru.CONTROLLER, "scontrol", "show", "nodes", "--json"],
        capture_output=True,
        check=False,
        timeout=ru.PODMAN_TIMEOUT,
    )
    assert all(ru.installed(node)["nvidia-driver"].startswith(ru.OLD) for node in ru.NODES)
    ru.sh(ru.CANARY, "rm", "-f", ru.RELEASE)
    job = ru.submit_job(ru.CANARY, ru.UNTIL_RELEASED, minutes=5)
    release, seen = release_and_watch(ru.CANARY, job)
    run, audit, wall = ru.upgrade(
        workdir, "healthy_22_05", ru.NEW, gpuops_upgrade_max_unavailable=1, gpuops_upgrade_max_job_wait=600
    )
    release.join(timeout=150)
    ru.sh(ru.CANARY, "rm", "-f", ru.RELEASE)
    state = {
        "version": version,
        "scontrol_json_rc": scontrol_json.returncode,
        "job_state": seen.get("job_state"),
        "slurm": ru.slurm_nodes(),
        "sinfo": json.loads(ru.sh(ru.CONTROLLER, "sinfo", "--json")),
        "installed": {node: ru.installed(node) for node in ru.NODES},
    }
    ru.record("slurm_22_05_rollout_wall_s", wall)
    return run, audit, state


def test_the_controller_runs_slurm_22_05(rollout):
    _unused, _unused, state = rollout
    assert state["version"].startswith("slurm-wlm 22.05"), state["version"]
    assert state["scontrol_json_rc"] != 0
    assert state["sinfo"]["meta"]["Slurm"]["release"].startswith("22.05")


def test_every_node_upgraded_gated_and_resumed(rollout):
    run, audit, state = rollout
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "completed"
    assert ru.statuses(audit) == dict.fromkeys(ru.NODES, "upgraded")
    levels = {node["host"]: [gate["level"] for gate in node["gates"]] for node in audit["nodes"]}
    assert levels == {ru.CANARY: ["extended"], **{n: ["standard"] for n in ru.NODES if n != ru.CANARY}}
    assert all(gate["healthy"] for node in audit["nodes"] for gate in node["gates"])
    for node in ru.NODES:
        assert state["installed"][node]["nvidia-driver"].startswith(ru.NEW)
        assert not ru.drained(state["slurm"][node]), state["slurm"][node]
        assert state["slurm"][node]["state"] in {"idle", "mixed", "allocated"}


def test_the_canary_drain_waited_for_its_job(rollout):
    _unused, audit, state = rollout
    drain = ru.node_of(audit, ru.CANARY)["drain"]
    assert drain["ours"]
    assert drain["waited"] > 0
    assert not drain["timed_out"]
    assert state["job_state"] == "COMPLETED"
