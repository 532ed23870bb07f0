"""roles/mps: the control daemon's unit and drop-ins as systemd reads them, and the Slurm Prolog, Epilog and TaskProlog
run as slurmd runs them (bash, with the job's environment) against a stand-in systemctl that records its calls."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.mps import mps_node_plan, mps_settings

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "mps"
H100_8X = (ROOT / "tests" / "fixtures" / "nvidia-smi" / "h100-sxm-8x-healthy.xml").read_text()
CONTROL = "/usr/bin/nvidia-cuda-mps-control"
UUID_5 = "GPU-d7a3b5c9-0e2f-4168-a4d6-3b9f7c1e5a65"
VARIABLES = {
    **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
    **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()),
    "ansible_managed": "Ansible managed",
}


def render(template, **more):
    text = (ROLE / "templates" / template).read_text()
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(**{**VARIABLES, **more})


def ini(text):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def plan_for(spec, scheduler):
    settings = mps_settings(spec, scheduler)
    # AutoDetect=nvml: Slurm knows each GPU's type, so MPS on some of them is scheduled where it is
    return settings, mps_node_plan(settings, H100_8X, "AutoDetect=nvml\n")


def test_the_unit_forks_the_control_daemon_and_quits_it_through_its_pipe():
    unit = ini(render("gpuops-mps@.service.j2"))
    service = unit["Service"]
    assert service["Type"] == "forking"
    assert service["ExecStart"] == "/usr/bin/nvidia-cuda-mps-control -d"
    assert service["ExecStop"] == "/bin/sh -c 'echo quit | exec /usr/bin/nvidia-cuda-mps-control'"
    assert service["ExecStartPre"] == "/usr/bin/systemd-tmpfiles --create /etc/tmpfiles.d/gpuops-mps.conf"
    # an instance without its drop-in fails to start (an Assert), never reads as started (a Condition would)
    assert unit["Unit"]["AssertPathExists"] == "/etc/systemd/system/gpuops-mps@%i.service.d/gpuops-mps.conf"
    assert not [key for key in unit["Unit"] if key.startswith("Condition")]
    assert "gpuops-mig-layout.service" in unit["Unit"]["After"].split()
    assert {"slurmd.service", "kubelet.service"} <= set(unit["Unit"]["Before"].split())


def test_a_drop_in_gives_the_daemon_its_directories_gpus_and_defaults():
    _settings, plan = plan_for(
        {"devices": [5], "active_thread_percentage": 40, "pinned_device_memory_limit": "8G"}, None
    )
    text = render("gpuops-mps.conf.j2", daemon=plan["daemons"][0])
    environment = [line for line in text.splitlines() if line.startswith("Environment=")]
    assert environment == [
        "Environment=CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps",
        "Environment=CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps",
        "Environment=CUDA_VISIBLE_DEVICES=%s" % UUID_5,
    ]
    assert [line for line in text.splitlines() if line.startswith("ExecStartPost=")] == [
        "ExecStartPost=/bin/sh -c 'echo set_default_active_thread_percentage 40 | exec %s'" % CONTROL,
        "ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit 0 8G | exec %s'" % CONTROL,
    ]


def test_the_directories_are_roots_and_not_world_writable():
    _settings, plan = plan_for({"devices": [0, 5]}, "slurm")
    lines = [line for line in render("gpuops-mps.tmpfiles.j2", __mps_plan=plan).splitlines() if line[:2] == "d "]
    assert [line.split()[1] for line in lines] == plan["directories"] + ["/run/gpuops-mps"]
    assert {tuple(line.split()[2:]) for line in lines} == {("0755", "root", "root", "-")}


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_reads_the_unit_and_its_drop_in(tmp_path):
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\n")
    control.chmod(0o755)
    _settings, plan = plan_for({"active_thread_percentage": 50}, "kubernetes")
    unit = tmp_path / "gpuops-mps@node.service"
    unit.write_text(render("gpuops-mps@.service.j2", mps_control_path=str(control), mps_systemd_tmpfiles="/bin/true"))
    dropin = tmp_path / "gpuops-mps@node.service.d"
    dropin.mkdir()
    (dropin / "gpuops-mps.conf").write_text(
        render("gpuops-mps.conf.j2", daemon=plan["daemons"][0], mps_control_path=str(control))
    )
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
    )
    mine = [line for line in result.stderr.splitlines() if "gpuops-mps" in line]
    assert mine == [], result.stderr


@pytest.fixture
def slurm_node(tmp_path):
    """The Slurm hooks rendered for GPUs 0 and 5 of the 8x H100 capture, with a systemctl that records its calls
    and keeps each unit's state in a file."""
    settings, plan = plan_for({"devices": [0, 5]}, "slurm")
    jobs, units, calls = tmp_path / "jobs", tmp_path / "units", tmp_path / "calls"
    jobs.mkdir()
    units.mkdir()
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(
        "#!/bin/bash\n"
        'echo "$*" >> %s\n'
        'case "$1" in\n'
        '  start) touch %s/"$2" ;;\n'
        '  stop) rm -f %s/"$2" ;;\n'
        '  is-active) [ -e %s/"$3" ] ;;\n'
        "esac\n" % (calls, units, units, units)
    )
    systemctl.chmod(0o755)
    hooks = {}
    for name in ("prolog", "epilog", "task-prolog"):
        path = tmp_path / name
        path.write_text(
            render(
                "slurm-%s.j2" % name,
                __mps_plan=plan,
                __mps_settings=settings,
                mps_slurm_job_dir=str(jobs),
                mps_systemctl=str(systemctl),
                mps_slurm_hooks={"prolog": "p", "epilog": "e", "task_prolog": "t"},
            )
        )
        path.chmod(0o755)
        hooks[name] = path

    def run(hook, **environment):
        env = {"PATH": os.environ["PATH"], **environment}
        return subprocess.run([str(hooks[hook])], env=env, capture_output=True, text=True, check=False)

    def called():
        return calls.read_text().splitlines() if calls.exists() else []

    return {"run": run, "called": called, "jobs": jobs, "units": units}


@pytest.mark.skipif(not shutil.which("flock"), reason="flock is not installed")
def test_mps_jobs_start_the_gpus_daemon_get_its_pipe_and_the_last_one_stops_it(slurm_node):
    run, jobs, units = slurm_node["run"], slurm_node["jobs"], slurm_node["units"]
    mps_job = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_VISIBLE_DEVICES": "5"}
    assert run("prolog", SLURM_JOB_ID="11", **mps_job).returncode == 0
    assert slurm_node["called"]() == ["start gpuops-mps@5.service"]
    assert (jobs / "11").read_text() == "5\n"
    task = run("task-prolog", SLURM_JOB_ID="11", CUDA_VISIBLE_DEVICES="0")
    assert task.stdout.splitlines() == [
        "export CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps/5",
        "export CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps/5",
    ]
    # Slurm may give the GPU's UUID (gres.conf Flags=env_uuid): the same daemon
    assert (
        run("prolog", SLURM_JOB_ID="12", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25", CUDA_VISIBLE_DEVICES=UUID_5).returncode
        == 0
    )
    assert (jobs / "12").read_text() == "5\n"
    assert run("epilog", SLURM_JOB_ID="11").returncode == 0
    assert not (jobs / "11").exists()
    assert (units / "gpuops-mps@5.service").exists()  # job 12 still uses it
    assert run("epilog", SLURM_JOB_ID="12").returncode == 0
    assert not (units / "gpuops-mps@5.service").exists()
    assert slurm_node["called"]()[-1] == "stop gpuops-mps@5.service"


@pytest.mark.skipif(not shutil.which("flock"), reason="flock is not installed")
def test_a_whole_gpu_job_stops_a_daemon_left_on_its_gpu_and_leaves_others_alone(slurm_node):
    run, units = slurm_node["run"], slurm_node["units"]
    (units / "gpuops-mps@0.service").touch()
    result = run("prolog", SLURM_JOB_ID="21", CUDA_VISIBLE_DEVICES="0,1,2")
    assert result.returncode == 0, result.stderr
    assert slurm_node["called"]() == ["is-active --quiet gpuops-mps@0.service", "stop gpuops-mps@0.service"]
    assert not list(slurm_node["jobs"].glob("2*"))
    # no record: the TaskProlog and the Epilog leave the job alone
    assert run("task-prolog", SLURM_JOB_ID="21").stdout == ""
    assert run("epilog", SLURM_JOB_ID="21").returncode == 0


@pytest.mark.skipif(not shutil.which("flock"), reason="flock is not installed")
def test_an_mps_job_on_a_gpu_without_mps_fails_the_prolog_naming_it(slurm_node):
    result = slurm_node["run"](
        "prolog", SLURM_JOB_ID="31", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50", CUDA_VISIBLE_DEVICES="3"
    )
    assert result.returncode == 1
    assert "job 31 has gres/mps on GPU 3, which gpuops_mps does not share" in result.stderr
    assert slurm_node["called"]() == []


@pytest.mark.skipif(not shutil.which("flock"), reason="flock is not installed")
def test_a_daemon_that_does_not_start_fails_the_prolog(slurm_node, tmp_path):
    (tmp_path / "systemctl").write_text("#!/bin/sh\nexit 1\n")
    result = slurm_node["run"](
        "prolog", SLURM_JOB_ID="41", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50", CUDA_VISIBLE_DEVICES="0"
    )
    assert result.returncode == 1
    assert "gpuops-mps@0.service did not start" in result.stderr
    assert not (slurm_node["jobs"] / "41").exists()
