"""Whether the read finds the runtimes and the CDI specification configured (files only)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_state as state

from tests.unit.stack.test_container_runtime_config import DROP_IN_V2

SPEC = (Path(__file__).resolve().parents[2] / "fixtures" / "cdi" / "nct-generate-default.yaml").read_text()
NVML = {"driver_version": "999.88.77", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0"}]}
DOCKER = json.dumps(
    {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}, "features": {"cdi": True}}
)
CONFIGURED = {
    "/usr/bin/nvidia-ctk": "",
    "/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    "/etc/containerd/conf.d/99-nvidia.toml": DROP_IN_V2,
    "/etc/docker/daemon.json": DOCKER,
    "/var/run/cdi/nvidia.yaml": SPEC.replace("kind: example.com/device", "kind: nvidia.com/gpu"),
    "/lib/systemd/system/nvidia-cdi-refresh.service": "",
    "/etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.service": "",
    "/etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path": "",
}
ALL = ["containerd", "docker", "crio"]


def reasons(files, present=("containerd", "docker"), **kwargs):
    nvml = kwargs.pop("nvml", NVML)  # None: no driver
    return state.reasons(list(present), ALL, nvml=nvml, exists=files.__contains__, read=files.get, **kwargs)


def test_a_configured_node_has_nothing_to_do():
    assert reasons(CONFIGURED) == []


def test_each_missing_piece_is_a_reason():
    assert reasons({}) == ["nvidia-ctk is not installed"]
    files = dict(CONFIGURED)
    del files["/etc/docker/daemon.json"]
    files["/etc/containerd/config.toml"] = "version = 2\n"
    del files["/etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path"]
    files["/var/run/cdi/nvidia.yaml"] = files["/var/run/cdi/nvidia.yaml"].replace("999.88.77", "550.127.05")
    found = reasons(files)
    assert found[0] == "containerd: /etc/containerd/config.toml does not import /etc/containerd/conf.d/99-nvidia.toml"
    assert found[1] == "docker: no runtimes.nvidia"
    assert found[2].startswith("CDI: CDI specification /var/run/cdi/nvidia.yaml is stale")
    assert found[3] == "not enabled: nvidia-cdi-refresh.path"


def test_absent_runtimes_and_no_driver_ask_for_nothing():
    files = {path: text for path, text in CONFIGURED.items() if "docker" not in path and "containerd" not in path}
    del files["/var/run/cdi/nvidia.yaml"]
    assert reasons(files, present=(), nvml=None) == []
    assert reasons(files, present=()) == [
        "CDI: no CDI specification for the GPUs (nvidia.yaml in /var/run/cdi or /etc/cdi): containers asking for "
        "nvidia.com/gpu devices cannot start; run nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml"
    ]


def test_an_unreadable_configuration_is_a_reason_not_a_crash():
    files = dict(CONFIGURED, **{"/etc/docker/daemon.json": "{broken"})
    assert reasons(files)[0].startswith("docker: daemon.json is not valid JSON")


def test_enroot_needs_its_gpu_hook_and_the_cli_it_calls():
    enroot = dict(CONFIGURED, **{"/usr/bin/enroot": ""})
    modes = {"/etc/enroot/hooks.d/98-nvidia.sh": 0o755}

    def stat(path):
        if path not in modes:
            raise FileNotFoundError(path)
        return os.stat_result((0o100000 | modes[path], 0, 0, 1, 0, 0, 0, 0, 0, 0))

    def enroot_reasons(files):
        return state.reasons(
            ["enroot"], [*ALL, "enroot"], nvml=NVML, exists=files.__contains__, read=files.get, stat=stat
        )

    (missing_cli,) = enroot_reasons(enroot)
    assert missing_cli.startswith("enroot: nvidia-container-cli is not installed")
    enroot["/usr/bin/nvidia-container-cli"] = ""
    assert enroot_reasons(enroot) == []
    modes["/etc/enroot/hooks.d/98-nvidia.sh"] = 0o644
    (off,) = enroot_reasons(enroot)
    assert off.startswith("enroot: enroot's GPU hook /etc/enroot/hooks.d/98-nvidia.sh is not executable")
    assert state.reasons(["enroot"], ALL, nvml=NVML, exists=enroot.__contains__, read=enroot.get, stat=stat) == []
