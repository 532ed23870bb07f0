"""nvidia_container_runtime on a fake node, with the lab's stand-in nvidia-ctk as the tool (run for real).

The containerd configuration is the one Debian 12's containerd (1.6.20~ds1-1+deb12u3) ships as
/etc/containerd/config.toml, read in a lab container after ``apt-get install containerd``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_config as rc
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit, enroot_hook
from ansible_collections.gpuops.cluster.plugins.modules import nvidia_container_runtime

from tests.unit.module_harness import FakeCommands, ModuleHarness, unbounded

STAND_IN = Path(__file__).resolve().parents[3] / "extensions" / "molecule" / "lab" / "nvidia-ctk" / "nvidia_ctk_sim.py"
DEBIAN_CONTAINERD = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


def really(argv):
    done = subprocess.run(unbounded(argv), capture_output=True, text=True, check=False, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def node(tmp_path, monkeypatch):
    """containerd and dockerd present, Debian's config.toml, no daemon.json; the stand-in as nvidia-ctk."""
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in ("containerd", "dockerd"):
        (bins / name).write_text("")
    monkeypatch.setattr(
        container_toolkit,
        "RUNTIME_BINARIES",
        {"containerd": (str(bins / "containerd"),), "docker": (str(bins / "dockerd"),), "crio": (str(bins / "crio"),)},
    )
    monkeypatch.setattr(cdi_spec, "REFRESH_UNITS", (str(tmp_path / "nvidia-cdi-refresh.service"),))
    ctk = bins / "nvidia-ctk"
    ctk.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, STAND_IN))
    ctk.chmod(0o755)
    (tmp_path / "etc/containerd").mkdir(parents=True)
    (tmp_path / "etc/containerd/config.toml").write_text(DEBIAN_CONTAINERD)
    return tmp_path


def args(node, **extra):
    return {
        "nvidia_ctk": str(node / "bin/nvidia-ctk"),
        "containerd_config": str(node / "etc/containerd/config.toml"),
        "containerd_drop_in": str(node / "etc/containerd/conf.d/99-nvidia.toml"),
        "docker_config": str(node / "etc/docker/daemon.json"),
        "crio_drop_in": str(node / "etc/crio/crio.conf.d/99-nvidia.toml"),
        "cdi_output": "",
        **extra,
    }


@pytest.fixture
def harness(monkeypatch):
    commands = FakeCommands(fallback=really, inside_timeout=True)
    return ModuleHarness(monkeypatch, commands=commands, bins={"timeout": "/usr/bin/timeout", "systemctl": None})


def test_configures_containerd_and_docker_then_changes_nothing(node, harness):
    first = harness.run(nvidia_container_runtime, args(node), diff=True)
    assert first["changed"] is True
    assert first["present"] == ["containerd", "docker"]
    assert first["restart"] == ["containerd", "docker"]
    assert first["containerd_version"] == 2
    drop_in = (node / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert rc.containerd_problems(drop_in, 2) == []
    assert 'bin_dir = "/usr/lib/cni"' in drop_in  # the CRI section is copied, containerd < 2.1 does not merge it
    main = (node / "etc/containerd/config.toml").read_text()
    assert rc.containerd_imports(main) == [str(node / "etc/containerd/conf.d") + "/*.toml"]
    assert main.replace('imports = ["%s/*.toml"]\n' % (node / "etc/containerd/conf.d"), "") == DEBIAN_CONTAINERD
    daemon = json.loads((node / "etc/docker/daemon.json").read_text())
    assert daemon == {
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        "features": {"cdi": True},
    }
    assert {entry["after_header"] for entry in first["diff"]} == {
        str(node / "etc/containerd/conf.d/99-nvidia.toml"),
        str(node / "etc/containerd/config.toml"),
        str(node / "etc/docker/daemon.json"),
    }
    again = harness.run(nvidia_container_runtime, args(node))
    assert again["changed"] is False
    assert again["restart"] == []


def test_check_mode_predicts_and_writes_nothing(node, harness):
    result = harness.run(nvidia_container_runtime, args(node), check_mode=True)
    assert result["changed"] is True
    assert result["restart"] == ["containerd", "docker"]
    assert not (node / "etc/containerd/conf.d").exists()
    assert not (node / "etc/docker/daemon.json").exists()
    assert (node / "etc/containerd/config.toml").read_text() == DEBIAN_CONTAINERD


def test_keeps_the_operators_imports_and_docker_settings(node, harness):
    config = node / "etc/containerd/config.toml"
    config.write_text(
        DEBIAN_CONTAINERD.replace("version = 2\n", 'version = 2\nimports = ["/etc/containerd/site/*.toml"]\n')
    )
    (node / "etc/docker").mkdir(parents=True)
    (node / "etc/docker/daemon.json").write_text('{"log-driver": "journald", "features": {"buildkit": true}}\n')
    harness.run(nvidia_container_runtime, args(node, runtimes=["containerd", "docker"]))
    assert rc.containerd_imports(config.read_text())[0] == "/etc/containerd/site/*.toml"
    daemon = json.loads((node / "etc/docker/daemon.json").read_text())
    assert daemon["log-driver"] == "journald"
    assert daemon["features"] == {"buildkit": True, "cdi": True}


def test_a_runtime_not_asked_for_or_absent_is_left_alone(node, harness):
    result = harness.run(nvidia_container_runtime, args(node, runtimes=["docker", "crio"]))
    assert result["present"] == ["docker"]
    assert result["restart"] == ["docker"]
    assert not (node / "etc/containerd/conf.d").exists()
    assert not (node / "etc/crio").exists()


def test_version_1_config_edits_the_main_file(node, harness):
    config = node / "etc/containerd/config.toml"
    config.write_text('root = "/var/lib/containerd"\n')
    result = harness.run(nvidia_container_runtime, args(node, runtimes=["containerd"]))
    assert result["containerd_version"] == 1
    assert rc.containerd_problems(config.read_text(), 1) == []
    assert 'root = "/var/lib/containerd"' in config.read_text()
    assert not (node / "etc/containerd/conf.d").exists()


def test_what_the_tool_wrote_is_checked_before_anything_is_written(node, harness):
    broken = node / "bin/nvidia-ctk"
    broken.write_text("#!/bin/sh\nexit 0\n")  # writes nothing
    failure = harness.fail(nvidia_container_runtime, args(node, runtimes=["docker"]))
    assert "without the NVIDIA runtime: no runtimes.nvidia" in failure["msg"]
    assert not (node / "etc/docker/daemon.json").exists()


def test_without_nvidia_ctk_check_mode_predicts_and_a_run_fails(node, harness):
    missing = args(node, nvidia_ctk=str(node / "nope"))
    predicted = harness.run(nvidia_container_runtime, missing, check_mode=True)
    assert predicted["changed"] is True
    assert predicted["restart"] == ["containerd", "docker"]
    assert "install nvidia-container-toolkit-base first" in harness.fail(nvidia_container_runtime, missing)["msg"]


@pytest.fixture
def enroot_node(node, monkeypatch):
    """The node with enroot (its GPU hook as its deb installs it, 0755) and nvidia-container-cli."""
    (node / "bin/enroot").write_text("")
    (node / "bin/nvidia-container-cli").write_text("")
    binaries = dict(container_toolkit.RUNTIME_BINARIES, enroot=(str(node / "bin/enroot"),))
    monkeypatch.setattr(container_toolkit, "RUNTIME_BINARIES", binaries)
    monkeypatch.setattr(enroot_hook, "CLI_PATHS", (str(node / "bin/nvidia-container-cli"),))
    hook = node / "etc/enroot/hooks.d/98-nvidia.sh"
    hook.parent.mkdir(parents=True)
    hook.write_text("#! /usr/bin/env bash\n")
    hook.chmod(0o755)
    return node


def enroot_args(node, **extra):
    return args(node, runtimes=["enroot"], enroot_sysconf=str(node / "etc/enroot"), **extra)


def test_enroot_with_its_hook_and_cli_needs_nothing_and_is_never_restarted(enroot_node, harness):
    result = harness.run(nvidia_container_runtime, enroot_args(enroot_node))
    assert result["present"] == ["enroot"]
    assert result["changed"] is False
    assert result["restart"] == []
    assert result["files"] == {}
    assert result["enroot"]["hook_mode"] == "0755"
    predicted = harness.run(
        nvidia_container_runtime, enroot_args(enroot_node, nvidia_ctk=str(enroot_node / "no")), check_mode=True
    )
    assert predicted["restart"] == []  # a first install: enroot has no service to restart


def test_a_disabled_enroot_hook_is_enabled_again_as_check_mode_predicts(enroot_node, harness):
    hook = enroot_node / "etc/enroot/hooks.d/98-nvidia.sh"
    hook.chmod(0o644)
    predicted = harness.run(nvidia_container_runtime, enroot_args(enroot_node), check_mode=True, diff=True)
    assert predicted["changed"] is True
    assert hook.stat().st_mode & 0o777 == 0o644
    assert predicted["diff"][0]["before"] == "0644\n"
    assert predicted["diff"][0]["after"] == "0755\n"
    assert harness.run(nvidia_container_runtime, enroot_args(enroot_node))["changed"] is True
    assert hook.stat().st_mode & 0o777 == 0o755
    assert harness.run(nvidia_container_runtime, enroot_args(enroot_node))["changed"] is False


def test_enroot_without_its_hook_or_the_cli_fails_and_changes_nothing(enroot_node, harness):
    (enroot_node / "bin/nvidia-container-cli").unlink()
    both = args(enroot_node, runtimes=["docker", "enroot"], enroot_sysconf=str(enroot_node / "etc/enroot"))
    failure = harness.fail(nvidia_container_runtime, both)
    assert "nvidia-container-cli is not installed" in failure["msg"]
    assert "nothing was changed" in failure["msg"]
    assert not (enroot_node / "etc/docker/daemon.json").exists()
    (enroot_node / "bin/nvidia-container-cli").write_text("")
    (enroot_node / "etc/enroot/hooks.d/98-nvidia.sh").unlink()
    assert "reinstall enroot" in harness.fail(nvidia_container_runtime, enroot_args(enroot_node))["msg"]
