"""gpuops-gpu-health judges the installed kernels' NVIDIA modules through NodeReader and evaluate, unchanged."""

from __future__ import annotations

import json
import os
import subprocess

from ansible_collections.gpuops.cluster.plugins.module_utils.health import node_verdict

from . import test_node_command
from .test_kernel_modules import DKMS_KO, NEW, RUNNING, make_node
from .test_node_command import Tools, run

node = test_node_command.node  # the node command tests' fixture, under its name here


class KernelTools(Tools):
    """The node's tools, and grubby (on a RHEL-family node) where the test machine has one."""

    def __call__(self, argv, **kwargs):
        if os.path.basename(argv[4]) == "grubby":
            self.calls.append(list(argv))
            return subprocess.CompletedProcess(argv, 0, ("/boot/vmlinuz-%s\n" % NEW).encode(), b"")
        return super().__call__(argv, **kwargs)


def test_the_node_command_fails_a_node_whose_next_kernel_has_no_module(node):
    make_node(node["tmp"] / "root", [RUNNING, NEW], {RUNNING: [DKMS_KO]}, dkms=["nvidia"], running=RUNNING,
              loaded=True)  # fmt: skip
    tools = KernelTools()
    code, out, _err = run(node, tools, "--json")
    payload = json.loads(out)
    assert code == node_verdict.EXIT_UNHEALTHY
    assert payload["reason"].startswith("kernel_module: kernel 6.1.0-28-amd64, which the node boots next (")
    assert payload["reason"].endswith("; action: check the node")
    # level quick: the files decide, dkms status is not run
    assert [os.path.basename(c[4]) for c in tools.calls if os.path.basename(c[4]) != "grubby"] == [
        "nvidia-smi", "journalctl", "nvidia-smi", "systemctl",
    ]  # fmt: skip
    assert 'check="kernel_module"' in (node["tmp"] / "gpuops_gpu_health.prom").read_text()


def test_the_node_command_passes_when_every_kernel_has_its_module(node):
    make_node(node["tmp"] / "root", [RUNNING, NEW], {RUNNING: [DKMS_KO], NEW: [DKMS_KO]}, dkms=["nvidia"],
              running=RUNNING, loaded=True)  # fmt: skip
    code, out, _err = run(node, KernelTools(), "--json")
    checks = [check for check in json.loads(out)["checks"] if check["name"] == "kernel_module"]
    assert code == 0
    assert [check["status"] for check in checks] == ["pass"]
