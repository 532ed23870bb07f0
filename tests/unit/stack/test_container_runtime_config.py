"""What a runtime's configuration must hold for the NVIDIA runtime, and containerd's version and imports."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_config as rc

# The drop-in nvidia-ctk v1.20.0 writes for a version 2 config.toml (layout of pkg/config/engine/containerd: the
# version, the copied CRI plugin section, runtimes.nvidia with the runc options and BinaryName, enable_cdi).
DROP_IN_V2 = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = true
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "nvidia-container-runtime"
            SystemdCgroup = true
"""


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (None, 2),  # no file: nvidia-ctk's default
        ("", 2),
        ("# only comments\n\n", 2),
        ("version = 2\n[plugins]\n", 2),
        ("version = 3 # containerd 2.x\n", 3),
        ('root = "/var/lib/containerd"\n[plugins.cri]\n', 1),  # keys without version: v1, main file edited
        ("[plugins]\nversion = 2\n", 1),  # a version inside a table is not the file's
    ],
)
def test_containerd_version_as_nvidia_ctk_reads_it(text, version):
    assert rc.containerd_version(text) == version


@pytest.mark.parametrize("text", ["version = 4\n", 'version = "2"\n'])
def test_containerd_version_refuses_what_nvidia_ctk_cannot_take(text):
    with pytest.raises(rc.ConfigError):
        rc.containerd_version(text)


def test_with_import_keeps_the_operators_imports_and_every_other_line():
    text = 'version = 2\nimports = ["/etc/containerd/site.d/*.toml",\n  "/opt/x.toml"]\n# keep me\n[plugins]\n  x = 1\n'
    out = rc.with_import(text, "/etc/containerd/conf.d/*.toml")
    assert rc.containerd_imports(out) == [
        "/etc/containerd/site.d/*.toml",
        "/opt/x.toml",
        "/etc/containerd/conf.d/*.toml",
    ]
    assert "# keep me\n[plugins]\n  x = 1\n" in out
    assert rc.with_import(out, "/etc/containerd/conf.d/*.toml") == out  # idempotent


def test_with_import_adds_the_statement_after_the_version():
    out = rc.with_import('version = 2\n\n[grpc]\n  address = "/run/containerd/containerd.sock"\n', "/etc/c/*.toml")
    assert out.splitlines()[:2] == ["version = 2", 'imports = ["/etc/c/*.toml"]']
    assert rc.containerd_version(out) == 2


def test_with_import_on_a_missing_file_writes_what_nvidia_ctk_writes():
    assert rc.with_import(None, "/etc/containerd/conf.d/*.toml") == (
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    )


def test_drop_in_pattern():
    assert rc.drop_in_pattern(rc.CONTAINERD_DROP_IN) == "/etc/containerd/conf.d/*.toml"


def test_containerd_drop_in_is_checked():
    assert rc.containerd_problems(DROP_IN_V2, 2) == []
    assert rc.containerd_problems(DROP_IN_V2, 3) == [
        'no plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia'
    ]
    no_cdi = DROP_IN_V2.replace("    enable_cdi = true\n", "")
    assert rc.containerd_problems(no_cdi, 2) == ['plugins."io.containerd.grpc.v1.cri".enable_cdi is not true']
    assert rc.containerd_problems(no_cdi, 2, cdi=False) == []
    wrong = DROP_IN_V2.replace('"nvidia-container-runtime"', '"runc"')
    assert "BinaryName is 'runc'" in rc.containerd_problems(wrong, 2)[0]
    assert rc.containerd_problems(DROP_IN_V2, 2, default=True) == [
        'plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name is not nvidia'
    ]
    with pytest.raises(rc.ConfigError):
        rc.containerd_problems("[plugins\n", 2)


def test_docker_daemon_json_is_checked():
    good = json.dumps(
        {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}, "features": {"cdi": True}}
    )
    assert rc.docker_problems(good) == []
    assert rc.docker_problems(good, default=True) == ["default-runtime is not nvidia"]
    assert rc.docker_problems('{"features": {"cdi": true}}') == ["no runtimes.nvidia"]
    assert rc.docker_problems(json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})) == [
        "features.cdi is not true"
    ]
    with pytest.raises(rc.ConfigError):
        rc.docker_problems("[1, 2]")


def test_docker_same_reads_json_not_layout():
    assert rc.docker_same('{"a": 1, "b": [1]}', '{\n    "b": [1],\n    "a": 1\n}\n')
    assert not rc.docker_same('{"a": 1}', '{"a": 2}')
    assert not rc.docker_same("not json", "{}")
    assert rc.docker_same(None, "{}")


def test_crio_drop_in_is_checked():
    text = (
        "[crio]\n  [crio.runtime]\n    [crio.runtime.runtimes]\n      [crio.runtime.runtimes.nvidia]\n"
        '        runtime_path = "/usr/bin/nvidia-container-runtime"\n        runtime_type = "oci"\n'
    )
    assert rc.crio_problems(text) == []
    assert rc.crio_problems(text, default=True) == ["crio.runtime.default_runtime is not nvidia"]
    assert rc.crio_problems("[crio]\n") == ["no crio.runtime.runtimes.nvidia"]
