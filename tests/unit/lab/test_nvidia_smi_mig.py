"""The lab simulator's MIG: modes pending until a reset, instances lost at reboot, real listings and profiles."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout, mig_plan, mig_profiles, mig_state
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix

REPO = Path(__file__).resolve().parents[3]
SIM_DIR = REPO / "extensions" / "molecule" / "lab" / "nvidia-smi"
_spec = importlib.util.spec_from_file_location("nvidia_smi_sim_mig", SIM_DIR / "nvidia_smi_sim.py")
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)
mig = sys.modules["nvidia_smi_mig"]
FIXTURES = REPO / "tests" / "fixtures" / "mig"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A lab node with driver 550.127.05 and 2 H100 SXM."""
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    (tmp_path / "usr/share/gpuops-lab").mkdir(parents=True)
    (tmp_path / "etc/gpuops-lab").mkdir(parents=True)
    (tmp_path / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
    (tmp_path / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H100-SXM", "count": 2, "nvswitch": True}))
    return tmp_path


def smi(capsys, *argv):
    code = sim.main(list(argv), prog="nvidia-smi")
    return code, capsys.readouterr().out


def ok(capsys, *argv):
    code, out = smi(capsys, *argv)
    assert code == 0, out
    return out


def modes(capsys):
    root = ET.fromstring(ok(capsys, "-q", "-x").split("\n", 2)[2])
    return [(g.findtext("mig_mode/current_mig"), g.findtext("mig_mode/pending_mig")) for g in root.findall("gpu")]


def reboot(node):
    """What the lab's reboot does to the node: /run is a fresh tmpfs."""
    shutil.rmtree(node / "run")


def enable(capsys, node, index="0"):
    ok(capsys, "-i", index, "-mig", "1")
    ok(capsys, "-i", index, "-r")


def test_mode_is_pending_until_a_gpu_reset(node, capsys):
    assert modes(capsys) == [("Disabled", "Disabled")] * 2
    out = ok(capsys, "-i", "0", "-mig", "1")
    assert out.startswith("Warning: MIG mode is in pending enable state for GPU 00000000:18:00.0:Not Supported\n")
    assert out.endswith("All done.\n")
    assert modes(capsys) == [("Disabled", "Enabled"), ("Disabled", "Disabled")]
    assert smi(capsys, "mig", "-lgi") == (mig.EXIT_NO_DEVICE, "No MIG-enabled devices found.\n")
    assert ok(capsys, "-i", "0", "-r") == "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n"
    assert modes(capsys) == [("Enabled", "Enabled"), ("Disabled", "Disabled")]
    fields = ok(capsys, "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert fields == "Enabled, Enabled\nDisabled, Disabled\n"


def test_the_mode_survives_a_reboot_the_instances_do_not(node, capsys):
    enable(capsys, node)
    ok(capsys, "mig", "-i", "0", "-cgi", "19,19", "-C")
    ok(capsys, "-i", "1", "-mig", "1")  # pending at the reboot: takes effect then
    reboot(node)
    assert modes(capsys) == [("Enabled", "Enabled"), ("Enabled", "Enabled")]
    assert smi(capsys, "mig", "-lgi") == (mig.EXIT_NO_DEVICE, "No GPU instances found: Not Found\n")


def test_a_driver_reload_loses_the_instances(node, capsys):
    enable(capsys, node)
    ok(capsys, "mig", "-cgi", "7g.80gb", "-C", "-i", "0")
    (node / "run/gpuops-lab/nvidia-version").unlink()  # the module unloads; the next call loads it
    assert smi(capsys, "mig", "-lgi")[0] == mig.EXIT_NO_DEVICE


def test_the_guides_3_2_1_1_example_and_the_collection_parser(node, capsys):
    enable(capsys, node)
    out = ok(capsys, "mig", "-cgi", "9,19,14,19", "-C")
    assert out.splitlines()[0] == "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)"
    assert out.splitlines()[1] == (
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG 3g.40gb (ID  2)"
    )
    lgi = ok(capsys, "mig", "-lgi")
    # the geometry, ids and placements of the MIG user guide's listing (lgi-a100-sxm4-40gb-guide-3211.txt)
    got = [(gi["id"], gi["profile_id"], gi["start"], gi["size"]) for gi in mig_state.parse_gpu_instances(lgi)]
    guide = mig_state.parse_gpu_instances((FIXTURES / "lgi-a100-sxm4-40gb-guide-3211.txt").read_text())
    assert got == [(gi["id"], gi["profile_id"], gi["start"], gi["size"]) for gi in guide]
    state = mig_state.node_state(ok(capsys, "-q", "-x"), lgi, ok(capsys, "mig", "-lci"))
    assert [len(gi["compute_instances"]) for gi in state["gpus"][0]["gpu_instances"]] == [1, 1, 1, 1]
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}]
    profiles = mig_profiles.default_profiles()
    result = mig_plan.plan(state, layout, profiles.sets["h100-80gb"], profiles.compute_instances)
    assert result["changed"] is False


def test_listings_keep_the_real_column_layout(node, capsys):
    enable(capsys, node)
    ok(capsys, "mig", "-cgi", "3g.40gb", "-i", "0")
    ok(capsys, "mig", "-cci", "0,0,0", "-gi", "2", "-i", "0")

    def columns(line):
        return [m.start() for m in re.finditer(r"\S+", line)]

    lgip = ok(capsys, "mig", "-lgip", "-i", "0").splitlines()
    real = (FIXTURES / "lgip-h100-pcie-570.txt").read_text().splitlines()
    assert lgip[:5] == real[:5]
    assert [columns(line) for line in lgip[5:8]] == [columns(line) for line in real[5:8]]
    assert [line.split()[3:5] for line in lgip if " MIG " in line] == [
        line.split()[3:5] for line in real if " MIG " in line
    ]
    lci = ok(capsys, "mig", "-lci").splitlines()
    real_lci = (FIXTURES / "lci-a100-pcie-40gb.txt").read_text().splitlines()
    assert lci[:6] == real_lci[:6]
    assert columns(lci[6]) == columns(real_lci[8])  # a 1c.3g row in both
    assert lci[6].split()[4] == "1c.3g.40gb"


def test_destroying_needs_the_compute_instances_gone_first(node, capsys):
    enable(capsys, node)
    ok(capsys, "mig", "-cgi", "14,14", "-C")
    code, out = smi(capsys, "mig", "-dgi", "-gi", "5")
    assert code == mig.EXIT_INVALID_ARGUMENT
    assert out == "Unable to destroy GPU instance ID  5 from GPU  0: In use by another client\n"
    assert (
        ok(capsys, "mig", "-dci", "-gi", "5")
        == "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  5\n"
    )
    assert ok(capsys, "mig", "-dgi", "-gi", "5") == "Successfully destroyed GPU instance ID  5 from GPU  0\n"
    assert len(mig_state.parse_gpu_instances(ok(capsys, "mig", "-lgi"))) == 1


def test_insufficient_resources_as_the_driver_says_it(node, capsys):
    enable(capsys, node)
    ok(capsys, "mig", "-cgi", "0", "-C")
    code, out = smi(capsys, "mig", "-cgi", "19")
    assert code == mig.EXIT_INSUFFICIENT_RESOURCES
    assert out == (
        "Unable to create a GPU instance on GPU  0 using profile 19: Insufficient Resources\n"
        "Failed to create GPU instances: Insufficient Resources\n"
    )


def test_capability_files_follow_the_instances(node, capsys):
    enable(capsys, node)
    minors = (node / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors").read_text().splitlines()
    assert minors[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert minors[-1] == "gpu31/gi14/ci7/access 4322"  # the last line the MIG user guide shows
    ok(capsys, "mig", "-cgi", "19", "-C", "-i", "0")
    caps = node / "run/gpuops-lab/proc/driver/nvidia/capabilities"
    gi_minor = 3 + 7 * 9  # gpu0/gi7/access
    assert (caps / "gpu0/mig/gi7/access").read_text().startswith(f"DeviceFileMinor: {gi_minor}\n")
    assert (caps / "gpu0/mig/gi7/ci0/access").read_text().startswith(f"DeviceFileMinor: {gi_minor + 1}\n")
    assert f"gpu0/gi7/access {gi_minor}" in minors
    assert (node / f"run/gpuops-lab/dev/nvidia-caps/nvidia-cap{gi_minor}").exists()
    ok(capsys, "-i", "0", "-r")
    assert not (caps / "gpu0").exists()


def test_a_gpu_without_mig(node, capsys):
    (node / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "L40S", "count": 1}))
    assert modes(capsys) == [("N/A", "N/A")]
    code, out = smi(capsys, "-i", "0", "-mig", "1")
    assert (code, out) == (
        mig.EXIT_NOT_SUPPORTED,
        "Unable to enable MIG Mode for GPU 00000000:01:00.0: Not Supported\n",
    )


@pytest.mark.parametrize(
    ("model", "profile_set"), [("H100-SXM", "h100-80gb"), ("H200-SXM", "h200-141gb"), ("A100-SXM4-80GB", "a100-80gb")]
)
def test_simulated_profiles_are_the_matrix_ones(model, profile_set):
    recorded = mig_profiles.default_profiles().sets[profile_set]["profiles"]
    simulated = {
        p["name"]: {
            "id": p["id"],
            "compute": p["compute"],
            "memory": p["memory"],
            "max": p["max"],
            "placements": list(p["placements"]),
        }
        for p in mig.profiles(model)
    }
    assert simulated == {name: {k: v for k, v in p.items() if k != "name"} for name, p in recorded.items()}


def test_validation_and_the_simulator_agree(node, capsys):
    enable(capsys, node)

    def problems(layout):
        spec = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": layout}]}}
        return mig_layout.problems(spec, "c", "h100-sxm", default_matrix(), mig_profiles.default_profiles())

    assert problems({"1g.20gb": 1, "1g.10gb": 6}) == []
    ok(capsys, "mig", "-cgi", "15,19,19,19,19,19,19", "-C")
    assert len(mig_state.parse_gpu_instances(ok(capsys, "mig", "-lgi"))) == 7
    ok(capsys, "mig", "-dci")
    ok(capsys, "mig", "-dgi")
    refused = " / ".join(problems({"1g.20gb": 1, "1g.10gb": 7}))
    assert "8 SM slices of 7" in refused
    assert "9 memory slices of 8" in refused
    code, out = smi(capsys, "mig", "-cgi", "15,19,19,19,19,19,19,19", "-C")
    assert code == mig.EXIT_INSUFFICIENT_RESOURCES
    assert out.splitlines()[-1] == "Failed to create GPU instances: Insufficient Resources"
