"""A real Slurm 22.05 drains a node with the node-side health command (slurm_22_05 verify, after the rollout).

Issue 18, item 1's proof. healthcheck.yml installs gpuops-gpu-health on both GPU nodes (playbooks/gpu_healthcheck.yml,
level quick, HealthCheckInterval 10 s for the lab, 300 s by default), includes its snippet from slurm.conf on every
Slurm host and restarts slurmd. Once the command has run on s22-gpu1 (its first run stores the baseline; the node
stays in service), the simulated GPU 1 gains 14 correctable ECC errors (``gpuops-lab-fault ecc``): the next run
judges more than 10 per hour (``ecc_rate``), and the command, run by slurmd as HealthCheckProgram, drains the node
with its one-line reason, which ``scontrol show node`` shows. s22-gpu2, healthy, is not drained. Then the Include
goes, the fault is cleared and the node resumed. Also times the command per level on a lab node (``--no-state``),
written to ``.lab/slurm_22_05_measures.json``; nothing asserts on durations.

Issue 25's proof follows on s22-gpu1, each case judged by slurmd's own runs: a job of uid 65534 that runs a
program named like an Xid 79 message and crashes (the kernel's real segfault line, read from the lab host's
kernel, goes into the node's kernel log) leaves the node in service; a misspelt configuration key and a stored
state with one field of the wrong shape each drain it with ``gpuops-health: check failed: ...``; an Xid logged
while slurmctld is stopped, whose first drain (the Slurm wrapper run by hand) fails, drains the node once
slurmctld is back.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from rollout_helpers import record, ru

SCENARIO = Path(__file__).resolve().parents[1]
NODE = ru.CANARY
HEALTHY = next(node for node in ru.NODES if node != NODE)
STATE = "/var/lib/gpuops-health/state.json"
SNIPPET_LINE = "Include /etc/gpuops/slurm-gpu-health.conf"
PREFIX = "gpuops-health: "


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


# --- issue 25: the command fails closed under slurmd, and a job cannot forge its evidence ---------------------
CONFIG = "/etc/gpuops/gpu-health.json"
KERN_LOG = "/var/log/gpuops-lab/kern.log"
CHECK_FAILED = PREFIX + "check failed: "
# Writes an x86-64 ELF that segfaults in its own file: the kernel's segfault line starts with the first 15
# characters of its name and names the file after " in " (the device scripts run the same program).
PROGRAMS = ru.REPO / "tests" / "tooling" / "device_programs.py"


def last_run(node: str) -> float:
    """When the command last read the kernel log on ``node`` (its stored cursor), 0 before any run."""
    text = ru.sh(node, "cat", STATE, check=False)
    try:
        return float((json.loads(text).get("cursor") or {}).get("time") or 0)
    except ValueError:
        return 0.0


def wait_for_a_run_after(node: str, moment: float) -> None:
    ru.wait_for(f"a health check run on {node}", lambda: last_run(node) > moment + 1, timeout=90)


def kernel_events(node: str) -> int:
    """Driver events the command finds in the node's whole kernel log (a run that stores nothing)."""
    out = ru.sh(node, "gpuops-gpu-health", "--json", "--no-state", "--since", "boot", check=False)
    return json.loads(out)["facts"]["kernel_events"]


def queued(job: str) -> str:
    """The job's line in the queue, empty once it has left."""
    return ru.sh(ru.CONTROLLER, "squeue", "-h", "-j", job, check=False).strip()


def resume(node: str) -> None:
    ru.sh(ru.CONTROLLER, "scontrol", "update", f"nodename={node}", "state=resume", check=False)
    ru.wait_for(f"{node} in service", lambda: not ru.drained(ru.slurm_nodes()[node]), timeout=60)


def host_kernel_lines(token: str) -> list[str]:
    """The lab host's kernel messages (the nodes share its kernel) that carry ``token``, without the time."""
    done = subprocess.run(["dmesg"], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, f"dmesg on the lab host: {done.stderr}"
    return [line.split("] ", 1)[1] for line in done.stdout.splitlines() if token in line and "] " in line]


def append_kernel_line(node: str, message: str) -> None:
    """``message`` into the node's kernel log as rsyslog writes the kernel's lines (the lab's log transport)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    ru.sh(node, "sh", "-c", 'printf "%s\\n" "$1" >> ' + KERN_LOG, "sh", f"{stamp} {node} kernel: {message}")


@pytest.fixture(scope="module", name="fail_closed")
def fixture_fail_closed(drain):
    """After the ECC case: four faults of the command itself, each judged by slurmd's own runs.

    1. A job of uid 65534 runs a program named like an Xid 79 message, which crashes: the kernel's segfault
       line (read from the lab host's kernel, which the nodes share) goes into the node's kernel log. Slurm's
       next runs leave the node in service.
    2. The configuration gains a misspelt key: slurmd's next run drains the node with ``check failed``.
    3. The stored state gets one field of the wrong shape: drained with ``check failed``, the file set aside.
    4. slurmctld is stopped, an Xid 79 is logged and the Slurm wrapper runs (its drain fails); slurmctld is
       started again: slurmd's next run drains the node for the Xid.
    """
    seen = {}
    ru.sh(NODE, "gpuops-lab-fault", "clear")
    log_before = ru.sh(NODE, "cat", KERN_LOG, check=False)
    ru.sh(NODE, "cp", "-p", CONFIG, CONFIG + ".lab")
    try:
        resume(NODE)
        wait_for_a_run_after(NODE, time.time())
        seen["resumed"] = ru.slurm_nodes()[NODE]
        # 1. the forgery, as an unprivileged job
        token = "lab%d" % int(time.time())
        name = f"NVRM: Xid (PCI:0000:18:00): 79, pid=1, name={token}, GPU has fallen off the bus"
        ru.sh(NODE, "mkdir", "-p", "-m", "0755", "/var/tmp/forge")
        ru.sh(NODE, "python3", "-c", PROGRAMS.read_text(encoding="utf-8"), "write", "/var/tmp/forge/" + name)
        job = ru.sh(
            ru.CONTROLLER, "runuser", "-u", "nobody", "--", "sbatch", "--parsable", f"--nodelist={NODE}",
            "--chdir=/tmp", "--output=/dev/null", "--wrap", "'/var/tmp/forge/%s'" % name,
        ).strip()  # fmt: skip
        ru.wait_for(f"the forging job {job} to end", lambda: not queued(job))
        lines = ru.wait_for("the kernel's segfault line", lambda: host_kernel_lines(token), timeout=30)
        seen["forged"] = lines[0]
        events_before = kernel_events(NODE)
        append_kernel_line(NODE, lines[0])
        forged_at = time.time()
        seen["events"] = (events_before, kernel_events(NODE))
        wait_for_a_run_after(NODE, forged_at)
        wait_for_a_run_after(NODE, last_run(NODE))
        seen["after_forgery"] = ru.slurm_nodes()[NODE]
        # 2. a misspelt key, as a tired operator's hand edit
        edit = "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['levle']='quick'; json.dump(c, open(p,'w'))"
        ru.sh(NODE, "python3", "-c", edit, CONFIG)
        ru.wait_for("a check-failed drain", lambda: ru.slurm_nodes()[NODE]["reason"] or "", timeout=90)
        seen["misspelt"] = ru.slurm_nodes()[NODE]
        ru.sh(NODE, "cp", "-p", CONFIG + ".lab", CONFIG)
        resume(NODE)
        # 3. a state field of the wrong shape
        broken = json.loads(ru.sh(NODE, "flock", "/var/lib/gpuops-health/lock", "cat", STATE))
        broken["samples"] = [{"time": "yesterday"}]
        # under the command's own lock, so that a run in progress cannot save over it
        write = f'printf "%s" "$1" > {STATE}.new && mv {STATE}.new {STATE}'
        ru.sh(NODE, "flock", "/var/lib/gpuops-health/lock", "sh", "-c", write, "sh", json.dumps(broken))
        ru.wait_for("a check-failed drain", lambda: ru.slurm_nodes()[NODE]["reason"] or "", timeout=90)
        seen["broken_state"] = ru.slurm_nodes()[NODE]
        seen["set_aside"] = ru.sh(NODE, "sh", "-c", "ls /var/lib/gpuops-health/ | grep unreadable", check=False)
        resume(NODE)
        wait_for_a_run_after(NODE, time.time())
        seen["after_set_aside"] = ru.slurm_nodes()[NODE]
        # 4. an Xid while the controller is stopped
        ru.sh(ru.CONTROLLER, "systemctl", "stop", "slurmctld")
        try:
            ru.sh(NODE, "gpuops-lab-fault", "xid", "--gpu", "0", "--code", "79")
            done = subprocess.run(
                ["podman", "exec", NODE, "/usr/local/sbin/gpuops-gpu-health-slurm"],
                capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
            seen["first_attempt"] = {"rc": done.returncode, "out": done.stdout, "err": done.stderr}
        finally:
            ru.sh(ru.CONTROLLER, "systemctl", "start", "slurmctld")
        ru.wait_for("slurmd's drain for the Xid", lambda: ru.slurm_nodes()[NODE]["reason"] or "", timeout=120)
        seen["xid_drain"] = ru.slurm_nodes()[NODE]
        yield seen
    finally:
        ru.sh(NODE, "cp", "-p", CONFIG + ".lab", CONFIG, check=False)
        ru.sh(NODE, "sh", "-c", f'printf "%s" "$1" > {KERN_LOG}', "sh", log_before, check=False)
        ru.sh(NODE, "gpuops-lab-fault", "clear", check=False)
        ru.sh(NODE, "rm", "-rf", "/var/tmp/forge", check=False)
        ru.sh(ru.CONTROLLER, "systemctl", "start", "slurmctld", check=False)
        ru.sh(ru.CONTROLLER, "scontrol", "update", f"nodename={NODE}", "state=resume", check=False)


def test_a_job_named_like_an_xid_message_leaves_the_node_in_service(fail_closed):
    assert not ru.drained(fail_closed["resumed"]), fail_closed["resumed"]
    forged = fail_closed["forged"]
    assert forged.startswith("NVRM: Xid (PCI:[")
    assert "segfault at 0" in forged
    assert " in NVRM: Xid (PCI:0000:18:00): 79, pid=1" in forged
    before, after = fail_closed["events"]
    assert after == before  # the line is in the log the command reads, and is no event
    assert not ru.drained(fail_closed["after_forgery"]), fail_closed["after_forgery"]


def test_a_misspelt_configuration_drains_with_check_failed(fail_closed):
    node = fail_closed["misspelt"]
    assert ru.drained(node), node
    assert node["reason"].startswith(CHECK_FAILED + "configuration: ")
    assert "unknown key 'levle'" in node["reason"]


def test_a_broken_state_file_drains_with_check_failed_and_is_set_aside(fail_closed):
    node = fail_closed["broken_state"]
    assert ru.drained(node), node
    assert node["reason"].startswith(CHECK_FAILED + "stored state unusable (samples has the wrong shape)")
    assert "state.json.unreadable-" in fail_closed["set_aside"]
    assert not ru.drained(fail_closed["after_set_aside"])  # the fresh state is good: once


def test_an_xid_whose_first_drain_failed_drains_once_the_controller_is_back(fail_closed):
    first = fail_closed["first_attempt"]
    assert first["rc"] == 1, first
    assert "xid: Xid 79" in first["out"]
    assert "slurm: scontrol" in first["err"]
    node = fail_closed["xid_drain"]
    assert ru.drained(node), node
    assert node["reason"].startswith(PREFIX + "GPU 0 (")
    assert "xid: Xid 79" in node["reason"]
