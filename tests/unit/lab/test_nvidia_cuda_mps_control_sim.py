"""The lab's stand-in nvidia-cuda-mps-control: what the mps role's unit and Slurm hooks rely on, run as they run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "extensions" / "molecule" / "lab" / "gpu-tools" / "nvidia_cuda_mps_control_sim.py"


@pytest.fixture(name="env")
def fixture_env(tmp_path):
    env = dict(os.environ)
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(tmp_path / "pipe")
    env["CUDA_MPS_LOG_DIRECTORY"] = str(tmp_path / "log")
    env["CUDA_VISIBLE_DEVICES"] = "GPU-1c7a6f02-0000-0000-0000-000000000000"
    yield env
    # never leave a daemon behind
    subprocess.run([sys.executable, str(TOOL)], input="quit\n", env=env, capture_output=True, text=True, check=False)


def control(env, *args, commands=None):
    return subprocess.run(
        [sys.executable, str(TOOL), *args],
        input=commands,
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def test_d_starts_the_daemon_in_the_background_with_its_socket_and_log(env, tmp_path):
    started = control(env, "-d")
    assert started.returncode == 0, started.stderr
    assert (tmp_path / "pipe" / "control").is_socket()
    log = (tmp_path / "log" / "control.log").read_text()
    assert f"Starting control daemon using socket {tmp_path}/pipe/control" in log


def test_a_second_daemon_on_the_same_pipe_directory_is_refused(env):
    assert control(env, "-d").returncode == 0
    second = control(env, "-d")
    assert second.returncode == 1
    assert "An instance of this daemon is already running" in second.stderr


def test_defaults_set_on_stdin_are_answered_and_logged(env, tmp_path):
    assert control(env, "-d").returncode == 0
    assert control(env, commands="get_default_active_thread_percentage\n").stdout == "100.0\n"
    set_ = control(env, commands="set_default_active_thread_percentage 50\nset_default_device_pinned_mem_limit 0 2G\n")
    assert set_.returncode == 0
    asked = control(env, commands="get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n")
    assert asked.stdout.splitlines() == ["50.0", "2G"]
    assert control(env, commands="get_server_list\n").stdout == ""
    log = (tmp_path / "log" / "control.log").read_text()
    assert "] Cmd:set_default_device_pinned_mem_limit 0 2G\n" in log


def test_a_device_the_daemon_does_not_see_and_a_bad_percentage_are_refused(env):
    assert control(env, "-d").returncode == 0
    commands = "set_default_device_pinned_mem_limit 1 2G\nset_default_active_thread_percentage 0\n"
    refused = control(env, commands=commands)
    assert refused.stdout.splitlines() == ["Invalid device or memory limit", "Invalid thread percentage"]
    assert control(env, commands="get_default_active_thread_percentage\n").stdout == "100.0\n"


def test_quit_stops_the_daemon_and_its_settings_go_with_it(env, tmp_path):
    assert control(env, "-d").returncode == 0
    control(env, commands="set_default_active_thread_percentage 50\n")
    assert control(env, commands="quit\n").returncode == 0
    for _attempt in range(50):
        if not (tmp_path / "pipe" / "control").exists():
            break
        subprocess.run(["sleep", "0.1"], check=True)
    gone = control(env, commands="get_server_list\n")
    assert gone.returncode == 1
    assert "Cannot find MPS control daemon process" in gone.stderr
    assert (tmp_path / "log" / "control.log").read_text().rstrip().endswith("Exit")
    assert control(env, "-d").returncode == 0
    assert control(env, commands="get_default_active_thread_percentage\n").stdout == "100.0\n"
