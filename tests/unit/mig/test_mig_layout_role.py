"""roles/mig_layout: the boot unit's ordering, and the node command as the role installs it (the launcher in
isolated mode over the module_utils the role copies), run against the lab's simulated nvidia-smi."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.unit.mig.test_gpu_mig_module import H100, MIXED, SIM, Lab, gpu0, spec

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "mig_layout"
VARIABLES = {
    **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
    **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()),
    "ansible_managed": "Ansible managed",
}


def render(template, **more):
    text = (ROLE / "templates" / template).read_text()
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(**{**VARIABLES, **more})


def unit(**more):
    parser = configparser.ConfigParser(strict=True, interpolation=None)
    parser.optionxform = str
    parser.read_string(render("gpuops-mig-layout.service.j2", **more))
    return parser


def test_the_unit_runs_after_the_driver_and_before_the_gpu_clients():
    parsed = unit()
    after = parsed["Unit"]["After"].split()
    before = parsed["Unit"]["Before"].split()
    # NVIDIA's mig-manager unit: After=nvidia-persistenced.service nvidia-fabricmanager.service
    assert after == ["systemd-modules-load.service", "nvidia-persistenced.service", "nvidia-fabricmanager.service"]
    for client in (
        "slurmd.service",
        "kubelet.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "nvidia-dcgm-exporter.service",
        "nvidia-cdi-refresh.service",
        "nvidia-gpu-reset.target",  # NVIDIA's DCGM units are After= it, mig-parted's unit Before= it
    ):
        assert client in before
    assert not set(after) & set(before)
    # ordering only: a failed layout leaves slurmd to start, and the health check to drain the node
    assert "Requires" not in parsed["Unit"]
    assert "RequiredBy" not in parsed["Install"]


def test_the_unit_is_a_oneshot_that_fails_when_the_layout_file_is_missing():
    parsed = unit()
    assert dict(parsed["Service"]) == {
        "Type": "oneshot",
        "RemainAfterExit": "yes",
        "ExecStart": "/usr/local/sbin/gpuops-mig-apply --layout /etc/gpuops/mig-layout.json",
        "TimeoutStartSec": "480",
    }
    assert dict(parsed["Install"]) == {"WantedBy": "multi-user.target"}
    # no ConditionPathExists: a unit skipped for a missing file would read as done
    assert not [key for key in parsed["Unit"] if key.startswith("Condition")]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_reads_the_unit(tmp_path):
    command = tmp_path / "gpuops-mig-apply"
    command.write_text("#!/bin/sh\n")
    command.chmod(0o755)
    path = tmp_path / "gpuops-mig-layout.service"
    path.write_text(render("gpuops-mig-layout.service.j2", mig_layout_bin_dir=str(tmp_path)))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    mine = [line for line in done.stderr.splitlines() if "gpuops-mig-layout" in line]
    assert mine == [], done.stderr


@pytest.fixture
def installed(tmp_path):
    """The command as the role lays it out: the listed module_utils under the lib dir, the launcher beside them."""
    lib = tmp_path / "lib"
    package = lib / VARIABLES["mig_layout_package"]
    for name in VARIABLES["mig_layout_module_files"]:
        target = package / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "plugins" / "module_utils" / name, target)
    launcher = tmp_path / "gpuops-mig-apply"
    launcher.write_text(render("gpuops-mig-apply.j2", mig_layout_lib_dir=str(lib), mig_layout_python=sys.executable))
    launcher.chmod(0o755)
    return launcher


def test_the_installed_command_runs_in_isolated_mode_on_the_copied_files_only(installed, tmp_path):
    """Every module_utils file the command imports is in mig_layout_module_files: -I -S finds nothing else."""
    done = subprocess.run(
        [str(installed), "--layout", str(tmp_path / "absent.json")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "gpuops-mig-apply: %s: no such file; the role gpuops.cluster.mig_layout writes it\n" % (
        tmp_path / "absent.json"
    )


def test_the_installed_command_applies_the_layout_file_the_role_writes(installed, tmp_path, monkeypatch):
    node = tmp_path / "node"
    node.mkdir()
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(node))  # the test's own reads (Lab.layout)
    lab = Lab(node)
    layout = {
        "config": spec(chosen=gpu0(MIXED)),
        "config_name": "chosen",
        "profile_set": H100,
        "stop_services": VARIABLES["mig_layout_stop_services"],
        "command_timeout": VARIABLES["mig_layout_command_timeout"],
        "nvidia_smi_path": str(SIM),
        "nvidia_ctk": str(tmp_path / "no-nvidia-ctk"),
        # on a node that runs slurmd: the gres.conf block, written by the copied gres_sync at boot
        "slurm_gres": {
            "path": str(tmp_path / "slurm" / "gres.conf"),
            "nvml": "never",
            "node_names": ["gpu07"],
            "mig_minors_path": str(node / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors"),
        },
    }
    # the role's mig_layout_content names the same keys (and the command knows them all)
    assert set(VARIABLES["mig_layout_content"]) <= set(layout)
    path = tmp_path / "mig-layout.json"
    path.write_text(json.dumps(layout, indent=2, sort_keys=True) + "\n")
    # systemctl as at boot: the GPU clients have not started yet
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text('#!/bin/sh\nshift\nfor unit in "$@"; do echo inactive; done\n')
    (bin_dir / "systemctl").chmod(0o755)
    environ = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "GPUOPS_LAB_ROOT": str(node)}
    done = subprocess.run(
        [str(installed), "--layout", str(path)], check=False, capture_output=True, text=True, timeout=120, env=environ
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpuops-mig-apply: MIG layout chosen applied: GPU 0 (")
    lab.reboot()
    check = subprocess.run(
        [str(installed), "--layout", str(path), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )
    assert check.returncode == 1
    assert "MIG layout chosen is not the node's" in check.stderr
    again = subprocess.run(
        [str(installed), "--layout", str(path)], check=False, capture_output=True, text=True, timeout=120, env=environ
    )
    assert again.returncode == 0, again.stderr
    assert lab.layout()[sorted(lab.layout())[0]]["mig_devices"] == MIXED
    assert "gres.conf %s holds this node's GPUs (Gres=gpu:1g.10gb:2," % layout["slurm_gres"]["path"] in again.stdout
    assert (tmp_path / "slurm" / "gres.conf").read_text().count("MultipleFiles=/dev/nvidia0,") == 4
