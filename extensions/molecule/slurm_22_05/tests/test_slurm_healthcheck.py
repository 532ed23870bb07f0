"""A real Slurm 22.05 drains a node with the node-side health command (slurm_22_05 verify, after the rollout).

Issue 18, item 1's proof. healthcheck.yml installs gpuops-gpu-health on both GPU nodes (playbooks/gpu_healthcheck.yml,
level quick, HealthCheckInterval 10 s for the lab, 300 s by default), includes its snippet from slurm.conf on every
Slurm host and restarts slurmd. Once the command has run on s22-gpu1 (its first run stores the baseline; the node
stays in service), the simulated GPU 1 gains 14 correctable ECC errors (``gpuops-lab-fault ecc``): the next run
judges more than 10 per hour (``ecc_rate``), and the command, run by slurmd as HealthCheckProgram, drains the node
with its one-line reason, which ``scontrol show node`` shows. s22-gpu2, healthy, is not drained. Then the Include
goes, the fault is cleared and the node resumed. Also times the command per level on a lab node (``--no-state``),
written to ``.lab/slurm_22_05_measures.json``; nothing asserts on durations.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
from rollout_helpers import ru

SCENARIO = Path(__file__).resolve().parents[1]
MEASURES = ru.REPO / ".lab" / "slurm_22_05_measures.json"
NODE = ru.CANARY
HEALTHY = next(node for node in ru.NODES if node != NODE)
STATE = "/var/lib/gpuops-health/state.json"
SNIPPET_LINE = "Include /etc/gpuops/slurm-gpu-health.conf"
PREFIX = "gpuops-health: "


def record(key: str, value) -> None:
    measures = json.loads(MEASURES.read_text()) if MEASURES.exists() else {}
    measures[key] = value
    MEASURES.write_text(json.dumps(measures, indent=2, sort_keys=True) + "\n")


def stored_samples(node: str) -> int:
    text = ru.sh(node, "cat", STATE, check=False)
    return len(json.loads(text).get("samples") or []) if text.strip() else 0


def drained_by_the_command(node: dict) -> bool:
    return ru.drained(node) and (node["reason"] or "").startswith(PREFIX)


def time_levels(node: str, runs: int = 3) -> dict:
    """Seconds per level of ``gpuops-gpu-health --level L --json --no-state`` on the node (its own duration_s)."""
    figures = {}
    for level in ("quick", "standard", "extended"):
        durations = []
        for _run in range(runs):
            out = ru.sh(node, "gpuops-gpu-health", "--level", level, "--json", "--no-state", check=False)
            durations.append(json.loads(out)["duration_s"])
        figures[level] = {"median_s": round(statistics.median(durations), 2), "worst_s": round(max(durations), 2)}
    return figures


def remove_health_check() -> None:
    for host in [ru.CONTROLLER, *ru.NODES]:
        ru.sh(host, "sed", "-i", f"\\|^{SNIPPET_LINE}$|d", "/etc/slurm/slurm.conf")
    ru.sh(ru.CONTROLLER, "scontrol", "reconfigure")
    for node in ru.NODES:
        ru.sh(node, "systemctl", "restart", "slurmd")


@pytest.fixture(scope="module", name="drain")
def fixture_drain(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("healthcheck")
    start = time.monotonic()
    run = ru.run_playbook(
        SCENARIO / "healthcheck.yml",
        ru.INVENTORY_DIR,
        workdir / "install",
        extravars={"gpu_healthcheck_slurm_interval": 10},
    )
    installed = round(time.monotonic() - start, 1)
    try:
        assert run.rc == 0, run.stdout[-4000:]
        config = ru.sh(ru.CONTROLLER, "scontrol", "show", "config")
        # slurmd's first run (at its start) stores the node's first sample: the baseline
        ru.wait_for(f"a stored sample on {NODE}", lambda: stored_samples(NODE) >= 1, timeout=90)
        before = ru.slurm_nodes()[NODE]
        ru.sh(
            NODE,
            "gpuops-lab-fault",
            "ecc",
            "--gpu",
            "1",
            "--volatile-uncorrectable",
            "0",
            "--volatile-correctable",
            "14",
        )
        faulted = time.monotonic()
        ru.wait_for(
            "Slurm to drain the node with the command's reason",
            lambda: drained_by_the_command(ru.slurm_nodes()[NODE]),
            timeout=120,
        )
        to_drain = round(time.monotonic() - faulted, 1)
        state = {
            "config": config,
            "before": before,
            "after": ru.slurm_nodes(),
            "scontrol": ru.scontrol_node(NODE),
        }
        record("healthcheck_install_wall_s", installed)
        record("healthcheck_fault_to_drain_s", to_drain)
        record("health_command_per_level_on_a_lab_node", time_levels(HEALTHY))
        yield state
    finally:
        remove_health_check()
        ru.sh(NODE, "gpuops-lab-fault", "clear")
        ru.sh(ru.CONTROLLER, "scontrol", "update", f"nodename={NODE}", "state=resume", check=False)


def test_slurm_runs_the_command_as_its_health_check(drain):
    config = dict(
        (key.strip(), value.strip())
        for key, _sep, value in (line.partition("=") for line in drain["config"].splitlines())
    )
    assert config["HealthCheckProgram"] == "/usr/local/sbin/gpuops-gpu-health-slurm"
    assert config["HealthCheckInterval"] == "10 sec"
    assert set(config["HealthCheckNodeState"].split(",")) == {"ANY", "CYCLE"}  # 22.05 prints CYCLE,ANY
    assert not ru.drained(drain["before"]), drain["before"]  # the first run, healthy, stored the baseline


def test_a_rising_ecc_count_drains_the_node_with_the_reason_in_slurm(drain):
    node = drain["after"][NODE]
    assert ru.drained(node), node
    reason = node["reason"]
    assert reason.startswith(PREFIX + "GPU 1 (")
    assert "ecc_rate: 14 correctable (single-bit) ECC errors in " in reason
    assert reason.endswith("action: drain and inspect the hardware (RMA)")
    assert "Reason=" + PREFIX + "GPU 1 (" in drain["scontrol"]


def test_the_healthy_node_stays_in_service(drain):
    other = drain["after"][HEALTHY]
    assert not ru.drained(other), other
    assert other["state"] in {"idle", "mixed", "allocated"}
