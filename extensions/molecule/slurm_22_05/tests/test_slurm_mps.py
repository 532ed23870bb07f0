"""CUDA MPS kept by playbooks/mps.yml on a real Slurm 22.05 and a real systemd (slurm_22_05 verify).

Issue 29, item 5's lab proof, after the health check cases and before the settle wait (which uses the other node).
On s22-gpu1 (4x L40S, the lab's stand-in ``nvidia-cuda-mps-control``, extensions/molecule/lab/gpu_tools.yml):

0. without a scheduler (``scheduler: none``, as under Kubernetes): the node's one daemon,
   ``gpuops-mps@node.service``, enabled and started under systemd, answering on ``/run/nvidia-mps`` with the
   declared default thread percentage;
1. ``playbooks/mps.yml`` with ``gpuops_mps`` {devices all, scheduler slurm, active_thread_percentage 50,
   pinned_device_memory_limit 2G}: the node's daemon of step 0, no longer declared, stopped, disabled and its
   drop-in removed; the template unit and one drop-in per GPU under systemd (never enabled, not running), the pipe
   and log directories root's 0755, gres.conf's marked block of ``Name=mps`` lines beside the lab's gpu line, the
   node drained in Slurm around that first block and given back, the Prolog, Epilog and TaskProlog installed; the
   run fails at its end, naming the ``Gres=`` slurm.conf must give the node (Slurm's is still ``gpu:4``);
2. slurm.conf, the controller's, given what the role printed for the node (GresTypes with mps, the node's Gres= with
   its ``mps:<total>``, Prolog=, Epilog=, TaskProlog=), as an operator does; slurmctld and slurmd restarted (a
   GresTypes change needs both): ``scontrol show node`` reports the node's gres/mps;
3. a job with ``--gres=mps:50`` runs through the hooks: the Prolog started its GPU's daemon (the job finds it
   active, its pipe directory exported by the TaskProlog, and the daemon answering 50.0 and 2G, the defaults the
   drop-in sent), the Epilog stopped it once the job ended (the daemon's control.log ends with the ``quit``);
4. a second run of the playbook passes and changes nothing.

The case's wall time goes to ``.lab/slurm_22_05_measures.json`` (``mps_case_wall_s``).
"""

from __future__ import annotations

import re
import time

import pytest
from rollout_helpers import record, ru

NODE = ru.CANARY
SLURM_CONF = "/etc/slurm/slurm.conf"
SETTINGS = {
    "devices": "all",
    "scheduler": "slurm",
    "active_thread_percentage": 50,
    "pinned_device_memory_limit": "2G",
}
PIPE = "/run/nvidia-mps"
LOG = "/var/log/nvidia-mps"
HOOKS = "/etc/slurm/gpuops-mps"
JOBS = "/run/gpuops-mps"
UNIT_DIR = "/etc/systemd/system"
SAY_TASK = "Say what slurm.conf needs for this node"
DRAIN_TASK = "Drain the node in Slurm before the change, and wait for its jobs"
WRITE_TASK = "Write this node's gres/mps lines in gres.conf"
MISMATCH_TASK = "Fail where slurm.conf does not give the node the block's gres/mps"
NODE_DAEMON = "gpuops-mps@node.service"
RESTART_TASK = "Restart slurmd so that it reads the new gres/mps records (only where it runs)"
RESUME_TASK = "Give the node back to Slurm"
DRAIN_REASON = re.compile(r"^gpuops-mps\[")
# The job's view: its environment (Slurm's and the TaskProlog's), its daemon's state and answers, the Prolog's record.
JOB = (
    'echo "visible=$CUDA_VISIBLE_DEVICES"; '
    'echo "percentage=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"; '
    'echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"; '
    "gpu=${CUDA_MPS_PIPE_DIRECTORY##*/}; "
    'echo "active=$(systemctl is-active gpuops-mps@$gpu.service)"; '
    'echo "threads=$(echo get_default_active_thread_percentage | nvidia-cuda-mps-control)"; '
    'echo "pinned=$(echo get_default_device_pinned_mem_limit 0 | nvidia-cuda-mps-control)"; '
    'echo "record=$(cat /run/gpuops-mps/$SLURM_JOB_ID)"'
)


def apply(workdir, name: str, settings: dict | None = None):
    """playbooks/mps.yml on NODE with ``settings`` as gpuops_mps (SETTINGS by default)."""
    extravars = {"gpuops_mps": SETTINGS if settings is None else settings}
    return ru.run_playbook("playbooks/mps.yml", ru.INVENTORY_DIR, workdir / name, extravars=extravars, limit=NODE)


def ask(pipe: str, command: str) -> str:
    """A control command sent to the daemon listening in ``pipe``, as a client does."""
    script = f"echo {command} | CUDA_MPS_PIPE_DIRECTORY={pipe} nvidia-cuda-mps-control"
    return ru.sh(NODE, "sh", "-c", script, check=False).strip()


def needs(run) -> dict:
    """What the role printed for slurm.conf: the node's gres/mps and the three hooks."""
    (said,) = run.results_for(task=SAY_TASK, host=NODE)
    message = said.result["msg"]
    hooks = dict(re.findall(r"\b(Prolog|Epilog|TaskProlog)=([^\s,;]+)", message))
    return {"gres": re.search(r"Gres= with (mps:\d+)", message).group(1), "hooks": hooks}


def with_mps(text: str, gres: str, hooks: dict) -> str:
    """slurm.conf with GresTypes gpu,mps, NODE's Gres= given ``gres`` (the other nodes as they were) and the hooks."""
    lines = []
    for original in text.splitlines():
        line = "GresTypes=gpu,mps" if original == "GresTypes=gpu" else original
        found = re.match(r"^NodeName=(\S+) (.*\bGres=)(\S+)(.*)$", line)
        if found:
            names, head, node_gres, tail = found.groups()
            for name in ru.sh(ru.CONTROLLER, "scontrol", "show", "hostnames", names).split():
                extra = f",{gres}" if name == NODE else ""
                lines.append(f"NodeName={name} {head}{node_gres}{extra}{tail}")
            continue
        lines.append(line)
    lines.extend(f"{key}={value}" for key, value in sorted(hooks.items()))
    return "\n".join(lines) + "\n"


def unit(name: str) -> dict:
    props = "LoadState,ActiveState,UnitFileState,DropInPaths,Environment,Type"
    out = ru.sh(NODE, "systemctl", "show", f"--property={props}", name)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def uuids() -> dict[int, str]:
    found = re.findall(r"^GPU (\d+): .*\(UUID: (GPU-[0-9a-f-]+)\)", ru.sh(NODE, "nvidia-smi", "-L"), re.M)
    return {int(index): uuid for index, uuid in found}


def stat(path: str) -> str:
    return ru.sh(NODE, "stat", "-c", "%U:%G %a %F", path).strip()


@pytest.fixture(scope="module", name="mps")
def fixture_mps(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mps")
    start = time.monotonic()
    state: dict = {}
    alone = apply(workdir, "alone", {**SETTINGS, "scheduler": "none"})
    assert alone.rc == 0, alone.stdout[-4000:]
    state["alone"] = {"unit": unit(NODE_DAEMON), "threads": ask(PIPE, "get_default_active_thread_percentage")}

    first = apply(workdir, "first")
    state["first"] = first
    state["alone_after"] = {
        "unit": unit(NODE_DAEMON),
        "dropin": ru.sh(NODE, "ls", "-d", f"{UNIT_DIR}/{NODE_DAEMON}.d", check=False).strip(),
    }
    state["gpus"] = uuids()
    state["units"] = {index: unit(f"gpuops-mps@{index}.service") for index in state["gpus"]}
    state["dirs"] = {
        path: stat(path) for path in [PIPE, LOG, *(f"{d}/{i}" for d in (PIPE, LOG) for i in state["gpus"])]
    }
    state["hooks"] = {name: stat(f"{HOOKS}/{name}") for name in ("prolog", "epilog", "task-prolog")}
    state["gres_conf"] = ru.sh(NODE, "cat", "/etc/slurm/gres.conf")
    state["after_first"] = ru.slurm_nodes()[NODE]

    need = needs(first)
    state["need"] = need
    conf = with_mps(ru.sh(ru.CONTROLLER, "cat", SLURM_CONF), need["gres"], need["hooks"])
    for host in [ru.CONTROLLER, *ru.NODES]:
        ru.write_file(host, SLURM_CONF, conf)
    ru.sh(ru.CONTROLLER, "systemctl", "restart", "slurmctld")
    for node in ru.NODES:
        ru.sh(node, "systemctl", "restart", "slurmd")
    ru.wait_for(
        f"{NODE} idle with its gres/mps",
        lambda: (
            f"Gres=gpu:4,{need['gres']}" in ru.scontrol_node(NODE)
            and ru.slurm_nodes()[NODE]["state"] == "idle"
            and not ru.drained(ru.slurm_nodes()[NODE])
        ),
        timeout=60,
    )
    state["scontrol"] = ru.scontrol_node(NODE)

    out = f"/tmp/gpuops-mps-job-{time.time_ns()}.out"
    job = ru.sh(
        ru.CONTROLLER, "sbatch", "--parsable", f"--nodelist={NODE}", "--gres=mps:50", f"--output={out}", "--wrap", JOB
    ).strip()
    state["job"] = job
    state["job_state"] = ru.settled_job_state(job)
    text = ru.sh(NODE, "cat", out, check=False)
    state["job_view"] = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    gpu = state["job_view"].get("pipe", "").rsplit("/", 1)[-1]
    state["gpu"] = gpu
    state["after_job"] = {
        "active": ru.sh(NODE, "systemctl", "is-active", f"gpuops-mps@{gpu}.service", check=False).strip(),
        "record": ru.sh(NODE, "ls", "-A", JOBS).split(),
        "control_log": ru.sh(NODE, "cat", f"{LOG}/{gpu}/control.log", check=False),
        "pipe": ru.sh(NODE, "ls", "-A", f"{PIPE}/{gpu}", check=False).split(),
        "node": ru.slurm_nodes()[NODE],
        "slurmd_log": ru.sh(NODE, "tail", "-n", "30", "/var/log/slurm/slurmd.log", check=False),
    }

    second = apply(workdir, "second")
    state["second"] = second
    record("mps_case_wall_s", round(time.monotonic() - start, 1))
    return state


def test_without_a_scheduler_the_nodes_daemon_runs_from_boot_and_answers_with_the_defaults(mps):
    props = mps["alone"]["unit"]
    assert (props["LoadState"], props["ActiveState"], props["UnitFileState"]) == ("loaded", "active", "enabled")
    assert f"CUDA_MPS_PIPE_DIRECTORY={PIPE}" in props["Environment"].split()
    assert mps["alone"]["threads"] == "50.0"


def test_the_nodes_daemon_no_longer_declared_is_stopped_disabled_and_its_drop_in_removed(mps):
    props = mps["alone_after"]["unit"]
    assert props["ActiveState"] == "inactive", props
    assert props["UnitFileState"] in ("disabled", "indirect"), props
    assert mps["alone_after"]["dropin"] == ""


def test_the_role_declared_one_daemon_per_gpu_under_systemd_none_running(mps):
    assert sorted(mps["gpus"]) == [0, 1, 2, 3]
    for index, props in mps["units"].items():
        assert props["LoadState"] == "loaded", props
        assert props["Type"] == "forking"
        assert props["UnitFileState"] in ("disabled", "indirect"), props  # Slurm's hooks start it, never boot
        assert props["ActiveState"] == "inactive", props
        assert f"{UNIT_DIR}/gpuops-mps@{index}.service.d/gpuops-mps.conf" in props["DropInPaths"]
        env = props["Environment"].split()
        assert f"CUDA_MPS_PIPE_DIRECTORY={PIPE}/{index}" in env
        assert f"CUDA_MPS_LOG_DIRECTORY={LOG}/{index}" in env
        assert f"CUDA_VISIBLE_DEVICES={mps['gpus'][index]}" in env


def test_pipe_and_log_directories_and_hooks_are_roots(mps):
    assert set(mps["dirs"].values()) == {"root:root 755 directory"}, mps["dirs"]
    assert set(mps["hooks"].values()) == {"root:root 755 regular file"}, mps["hooks"]


def test_gres_conf_holds_the_nodes_mps_lines_beside_the_gpu_line(mps):
    lines = mps["gres_conf"].splitlines()
    assert "Name=gpu File=/dev/nvidia[0-3]" in lines
    assert [line for line in lines if line.startswith("Name=mps")] == [
        f"Name=mps Count=100 File=/dev/nvidia{index}" for index in range(4)
    ]
    assert mps["need"]["gres"] == "mps:400"


def test_the_first_block_drained_the_node_and_gave_it_back(mps):
    changed = {r.task for r in mps["first"].changed if r.host == NODE}
    assert {DRAIN_TASK, WRITE_TASK, RESTART_TASK, RESUME_TASK} <= changed, changed
    assert not ru.drained(mps["after_first"]), mps["after_first"]
    assert not DRAIN_REASON.match(mps["after_first"]["reason"] or "")


def test_the_first_run_fails_naming_the_gres_slurm_conf_must_give_the_node(mps):
    first = mps["first"]
    assert first.rc != 0
    (failed,) = first.results_for(task=MISMATCH_TASK, host=NODE)
    assert failed.result["msg"].startswith(f"{NODE}: slurm.conf gives the node mps:0 (Slurm's Gres=gpu:4"), failed
    assert f"until slurm.conf says NodeName={NODE} Gres=<its gpu>,mps:400" in failed.result["msg"]


def test_scontrol_reports_the_nodes_mps_gres(mps):
    assert "Gres=gpu:4,mps:400" in mps["scontrol"], mps["scontrol"]
    assert re.search(r"\bState=IDLE\b", mps["scontrol"]), mps["scontrol"]


def test_a_gres_mps_job_ran_through_the_prolog_with_its_gpus_daemon(mps):
    view = mps["job_view"]
    assert mps["job_state"] == "COMPLETED", (mps["job_state"], view, mps["after_job"]["slurmd_log"])
    gpu = mps["gpu"]
    assert view["percentage"] == "50"
    assert view["pipe"] == f"{PIPE}/{gpu}"
    assert view["active"] == "active"
    assert view["threads"] == "50.0"
    assert view["pinned"] == "2G"
    assert view["record"] == gpu


def test_the_epilog_stopped_the_daemon_after_the_job(mps):
    after = mps["after_job"]
    assert after["active"] == "inactive", after
    assert after["record"] == [".lock"], after["record"]
    assert "control" not in after["pipe"], after["pipe"]  # the daemon's socket went with it
    assert not ru.drained(after["node"]), after["node"]
    commands = re.findall(r"\] Cmd:(.*)$", after["control_log"], re.M)
    assert commands[:2] == ["set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 2G"]
    assert commands[-1] == "quit"
    assert after["control_log"].rstrip().endswith("Exit")


def test_a_second_run_changes_nothing(mps):
    second = mps["second"]
    assert second.rc == 0, second.stdout[-4000:]
    assert [r.task for r in second.changed] == []
