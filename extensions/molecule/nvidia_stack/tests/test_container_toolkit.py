"""The NVIDIA Container Toolkit on ns-h200 after converge and side_effect.yml.

ns-h200 requests ``container_toolkit: auto`` and has real containerd (1.6.20, running) and Docker (20.10, whose
daemon cannot run in a lab container) from Debian (prepare.yml). The role installed the four toolkit packages at
one release, pinned and held them, configured both runtimes with the stand-in nvidia-ctk (containerd restarted and
running with it), enabled the CDI refresh units, and the CDI specification followed the driver upgrade of
side_effect.yml (550.127.05 -> 550.127.08, with a reboot: the refresh unit wrote it at boot).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".collections"))
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_config as rc

testinfra_hosts = ["podman://ns-h200"]

TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1"]  # fmt: skip
VERSION = "1.20.0-1"
DRIVER = "550.127.08"  # ns-h200's lab_upgrade_stack


@pytest.fixture(name="report")
def fixture_report(host):
    return json.loads(host.file("/var/lib/gpuops-test/upgrade-report.json").content_string)


def test_toolkit_packages_at_one_release_held_pinned_and_blacklisted(host, report):
    held = set(host.check_output("apt-mark showhold").split())
    preferences = host.file("/etc/apt/preferences.d/gpuops-nvidia.pref").content_string
    blacklist = host.file("/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist").content_string
    assert report["resolved"]["container_toolkit"] == {"version": "1.20.0", "mode": "auto"}
    for name in TOOLKIT:
        assert host.package(name).is_installed, name
        assert host.package(name).version == VERSION, name
        assert name in held, name
        assert report["report"]["packages"][name] == VERSION
        assert '"%s$";' % name in blacklist, name
    assert "Package: %s\nPin: version %s\n" % (" ".join(sorted(TOOLKIT)), VERSION) in preferences


def test_containerd_reads_the_nvidia_runtime_and_keeps_debians_settings(host):
    drop_in = host.file(rc.CONTAINERD_DROP_IN)
    assert (drop_in.mode, drop_in.user) == (0o644, "root")
    assert rc.containerd_problems(drop_in.content_string, 2) == []
    main = host.file(rc.CONTAINERD_CONFIG).content_string
    assert rc.containerd_imports(main) == ["/etc/containerd/conf.d/*.toml"]
    assert 'bin_dir = "/usr/lib/cni"' in main  # Debian's own settings stay in the main file
    # containerd itself merges the import: the nvidia runtime, and the CRI settings the drop-in copied
    dump = host.run("containerd config dump")
    assert dump.rc == 0, dump.stderr
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in dump.stdout
    assert 'BinaryName = "nvidia-container-runtime"' in dump.stdout
    assert 'bin_dir = "/usr/lib/cni"' in dump.stdout
    assert host.service("containerd").is_running


def test_docker_daemon_json_has_the_nvidia_runtime_and_cdi(host):
    daemon = host.file(rc.DOCKER_CONFIG)
    assert rc.docker_problems(daemon.content_string) == []
    assert json.loads(daemon.content_string)["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}


def test_cdi_specification_follows_the_driver_and_lists_every_gpu(host):
    text = host.file("/var/run/cdi/nvidia.yaml").content_string
    spec = cdi_spec.parse(text)
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["driver_versions"] == [DRIVER]
    assert host.file("/run/gpuops-lab/nvidia-version").contains(f"  {DRIVER}  ")
    assert {"0", "1", "2", "3", "all"} <= set(spec["devices"])


def test_cdi_refresh_units_are_enabled(host):
    enabled = host.run("systemctl is-enabled nvidia-cdi-refresh.service nvidia-cdi-refresh.path")
    assert enabled.stdout.split() == ["enabled", "enabled"], enabled.stdout


@pytest.mark.parametrize("name", ["ns-l40s", "ns-h100"])
def test_no_toolkit_where_the_stack_does_not_ask_for_it(host, name):
    other = host.get_host(f"podman://{name}")
    assert not other.package("nvidia-container-toolkit").is_installed
    assert not other.file(rc.CONTAINERD_DROP_IN).exists
