"""The lab's stand-in nvidia-ctk: its CDI specification is what the cdi_spec check wants, and follows the driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec, nvidia_smi_xml

LAB = Path(__file__).resolve().parents[3] / "extensions" / "molecule" / "lab"
STAND_IN = LAB / "nvidia-ctk" / "nvidia_ctk_sim.py"
SIMULATOR = LAB / "nvidia-smi" / "nvidia_smi_sim.py"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A lab node root with driver 550.127.05 and 4 L40S; nvidia-smi is the lab's simulator."""
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    (tmp_path / "usr/share/gpuops-lab").mkdir(parents=True)
    (tmp_path / "etc/gpuops-lab").mkdir(parents=True)
    (tmp_path / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
    (tmp_path / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "L40S", "count": 4, "nvswitch": False}))
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, SIMULATOR))
    smi.chmod(0o755)
    monkeypatch.setenv("GPUOPS_LAB_NVIDIA_SMI", str(smi))
    return tmp_path


def ctk(*argv, env=None):
    return subprocess.run(
        [sys.executable, str(STAND_IN), *argv], capture_output=True, text=True, check=False, timeout=60, env=env
    )


def smi_reading(node):
    done = subprocess.run([str(node / "nvidia-smi"), "-q", "-x"], capture_output=True, text=True, check=True)
    return nvidia_smi_xml.parse(done.stdout)


def test_generated_spec_passes_the_check_and_goes_stale_with_the_driver(node):
    output = node / "var/run/cdi/nvidia.yaml"
    done = ctk("cdi", "generate", "--output=%s" % output)
    assert done.returncode == 0, done.stderr
    text = output.read_text()
    parsed = cdi_spec.parse(text)
    assert parsed["kind"] == "nvidia.com/gpu"
    assert parsed["driver_versions"] == ["550.127.05"]
    assert parsed["devices"][:2] == ["0", smi_reading(node)["gpus"][0]["uuid"]]
    reading = {"toolkit": True, "refresh_unit": True, "specs": {"/var/run/cdi/nvidia.yaml": text}}
    assert cdi_spec.findings(reading, smi_reading(node)) == [
        ("pass", "/var/run/cdi/nvidia.yaml is for driver 550.127.05 and lists every GPU")
    ]
    # A new driver, loaded after a reboot (/run is fresh): the old specification is stale.
    (node / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.08", "cuda": "12.4"}))
    (node / "run/gpuops-lab/nvidia-version").unlink()
    [(status, detail)] = cdi_spec.findings(reading, smi_reading(node))
    assert status == "fail"
    assert "it is for driver 550.127.05, the loaded driver is 550.127.08" in detail
    ctk("cdi", "generate", "--output=%s" % output)
    assert cdi_spec.parse(output.read_text())["driver_versions"] == ["550.127.08"]


def test_generate_writes_the_refresh_units_path_and_is_the_same_twice(node):
    env = dict(os.environ, NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=str(node / "spec.yaml"))
    assert ctk("cdi", "generate", env=env).returncode == 0
    first = (node / "spec.yaml").read_text()
    assert ctk("cdi", "generate", env=env).returncode == 0
    assert (node / "spec.yaml").read_text() == first


def test_generate_fails_like_nvml_on_a_driver_mismatch(node):
    ctk("cdi", "generate", "--output=%s" % (node / "a.yaml"))  # loads 550.127.05
    (node / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.08", "cuda": "12.4"}))
    done = ctk("cdi", "generate", "--output=%s" % (node / "b.yaml"))
    assert done.returncode == 1
    assert "failed to initialize NVML" in done.stderr
    assert not (node / "b.yaml").exists()


def test_unknown_subcommand_is_refused():
    assert ctk("system", "create-device-nodes").returncode == 2
