"""gpu_mig against the lab's simulated nvidia-smi, run as a subprocess with its state in a temporary directory."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_apply, mig_profiles, mig_state
from ansible_collections.gpuops.cluster.plugins.modules import gpu_mig

from tests.unit.module_harness import unbounded

REPO = Path(__file__).resolve().parents[3]
SIM = REPO / "extensions" / "molecule" / "lab" / "nvidia-smi" / "nvidia_smi_sim.py"
# the profile set as the matrix file writes it, as a play passes it (lookup('file', ...) | from_yaml)
_spec = importlib.util.spec_from_file_location("nvidia_smi_sim_gpu_mig", SIM)
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)
H100 = yaml.safe_load(mig_profiles.DEFAULT_PROFILES_PATH.read_text())["profile_sets"]["h100-80gb"]
MIXED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def spec(**configs):
    return {"version": "v1", "mig-configs": configs}


def gpu0(devices, rest_enabled=False):
    """GPU 0 with ``devices`` (None: MIG off), GPU 1 with MIG off (or on with nothing)."""
    first = {"devices": [0], "mig-enabled": devices is not None}
    if devices is not None:
        first["mig-devices"] = devices
    second = {"devices": [1], "mig-enabled": rest_enabled}
    if rest_enabled:
        second["mig-devices"] = {}
    return [first, second]


class Lab:
    """A lab node (2 H100 SXM, driver 550.127.05) and its systemd units, as the module sees them."""

    def __init__(self, root):
        self.root = root
        self.units = {"nvidia-dcgm-exporter": "active", "nvidia-dcgm": "inactive"}
        self.systemctl = []
        self.ignored = None  # a nvidia-smi word whose commands answer success without running (a lying driver)
        self.before = {}  # a nvidia-smi word -> what happens on the node just before such a command runs
        (root / "usr/share/gpuops-lab").mkdir(parents=True)
        (root / "etc/gpuops-lab").mkdir(parents=True)
        (root / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
        (root / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H100-SXM", "count": 2}))

    def smi(self, *argv):
        """What the test itself reads, in-process (faster); the module's commands run the simulator as a process."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = sim.main(list(argv), prog="nvidia-smi")
        return code, out.getvalue(), ""

    def state(self):
        lgi, lci = self.smi("mig", "-lgi")[1], self.smi("mig", "-lci")[1]
        if lgi.startswith("No MIG"):
            lgi = lci = ""
        return mig_state.node_state(self.smi("-q", "-x")[1], lgi, lci)

    def layout(self):
        return mig_apply.current_layout_of(self.state())

    def gpu_instances(self, index=0):
        return [(gi["id"], gi["profile"], gi["start"]) for gi in self.state()["gpus"][index]["gpu_instances"]]

    def reboot(self):
        """What the lab's reboot does: /run is a fresh tmpfs (modes pending take effect, instances are gone)."""
        shutil.rmtree(self.root / "run")

    def run_node(self, argv):
        inner = unbounded(argv)
        assert inner[0] == str(SIM), argv
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    def answer(self, argv):
        inner = unbounded(argv)
        if inner[0].endswith("systemctl"):
            self.systemctl.append(inner[1:])
            if inner[1] == "is-active":
                return 0, "".join(self.units.get(unit, "inactive") + "\n" for unit in inner[2:]), ""
            self.units[inner[2]] = "active" if inner[1] == "start" else "inactive"
            return 0, "", ""
        if self.ignored in inner:
            return 0, "", ""
        for word, happening in self.before.items():
            if word in inner:
                happening()
        done = self.run_node(argv)
        return done.returncode, done.stdout, done.stderr


def args(entries, **more):
    return {"config": spec(chosen=entries), "config_name": "chosen", "nvidia_smi_path": str(SIM), **more}


def changing(result):
    """The commands that changed the node, without the binary."""
    return [call[1:] for call in result["commands"]]


def test_apply_then_nothing_to_do(harness, lab):
    result = harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100), diff=True)
    assert result["changed"] is True
    assert result["converged"] is True
    assert result["reboot_required"] is False
    assert changing(result) == [
        ["-i", "0", "-mig", "1"],
        ["-i", "0", "-r"],
        ["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"],
    ]
    gpu0_key, gpu1_key = sorted(result["layout"])
    assert result["layout"][gpu0_key] == {
        "mig_enabled": True,
        "pending_mig": True,
        "mig_devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    }
    assert result["layout"][gpu1_key]["mig_enabled"] is False
    assert result["diff"]["after"] == result["layout"] == lab.layout()
    # only the active unit was stopped, and it was started again after the changes
    assert lab.systemctl == [
        ["is-active", "nvidia-dcgm-exporter", "nvidia-dcgm"],
        ["stop", "nvidia-dcgm-exporter"],
        ["start", "nvidia-dcgm-exporter"],
    ]
    assert result["stopped_services"] == ["nvidia-dcgm-exporter"]
    assert lab.units["nvidia-dcgm-exporter"] == "active"

    lab.systemctl.clear()
    again = harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100), diff=True)
    assert again["changed"] is False
    assert again["commands"] == []
    assert again["actions"] == {}
    assert again["diff"]["before"] == again["diff"]["after"]
    assert lab.systemctl == []  # nothing to change: no GPU client stopped
    # one -q -x and the two listings, nothing else
    reads = [unbounded(call)[1:] for call in harness.commands.calls[-3:]]
    assert reads == [["-q", "-x"], ["mig", "-lgi"], ["mig", "-lci"]]


def test_check_mode_predicts_the_run(harness, lab):
    wanted = args(gpu0({"1g.10gb": 1, "1c.3g.40gb": 3, "2g.20gb": 1}, rest_enabled=True), profile_set=H100)
    predicted = harness.run(gpu_mig, wanted, check_mode=True, diff=True)
    assert predicted["changed"] is True
    assert predicted["commands"] == []
    assert lab.systemctl == []
    assert lab.layout() == predicted["diff"]["before"]  # nothing changed
    gpu0_key, gpu1_key = sorted(predicted["actions"])
    assert predicted["actions"][gpu0_key] == [
        "set MIG mode on",
        "reset the GPU",
        "create 3g.40gb (compute instances 1c+1c+1c)",
        "create 2g.20gb (compute instances 2c)",
        "create 1g.10gb (compute instances 1c)",
    ]
    assert predicted["actions"][gpu1_key] == ["set MIG mode on", "reset the GPU"]

    done = harness.run(gpu_mig, wanted, diff=True)
    assert done["plan"] == predicted["plan"]
    assert done["actions"] == predicted["actions"]
    assert done["layout"] == predicted["diff"]["after"]
    assert done["layout"][gpu0_key]["mig_devices"] == {"1c.3g.40gb": 3, "1g.10gb": 1, "2g.20gb": 1}
    # the 3g.40gb instance gets its three 1-slice compute instances in the GPU instance the driver created
    three = [call for call in changing(done) if "-cgi" in call and "-C" not in call]
    assert three == [["mig", "-i", "0", "-cgi", "9"]]
    assert ["mig", "-i", "0", "-cci", "0,0,0", "-gi", "2"] in changing(done)
    assert harness.run(gpu_mig, wanted)["changed"] is False


def test_a_new_layout_destroys_and_creates_only_the_difference(harness, lab):
    harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    kept = [gi for gi in lab.gpu_instances() if gi[1] != "2g.20gb"]
    two_g = [gi for gi in lab.gpu_instances() if gi[1] == "2g.20gb"]
    assert len(kept) == 3
    assert len(two_g) == 1

    result = harness.run(gpu_mig, args(gpu0({"1g.10gb": 4, "3g.40gb": 1}), profile_set=H100), diff=True)
    assert changing(result) == [
        ["mig", "-i", "0", "-dci", "-gi", str(two_g[0][0])],
        ["mig", "-i", "0", "-dgi", "-gi", str(two_g[0][0])],
        ["mig", "-i", "0", "-cgi", "19,19", "-C"],
    ]
    after = lab.gpu_instances()
    assert all(gi in after for gi in kept)  # same ids, same places
    assert sorted(gi[1] for gi in after) == ["1g.10gb"] * 4 + ["3g.40gb"]
    assert result["converged"] is True


def test_without_the_profile_set_a_gpu_needing_new_instances_is_rebuilt(harness, lab):
    harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    result = harness.run(gpu_mig, args(gpu0({"1g.10gb": 4, "3g.40gb": 1})))
    destroyed = [call for call in changing(result) if "-dgi" in call]
    assert len(destroyed) == 4  # no placements known: everything is destroyed and created again
    assert ["mig", "-i", "0", "-cgi", "3g.40gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", "-C"] in changing(result)
    assert lab.layout() == result["layout"]
    assert result["layout"][sorted(result["layout"])[0]]["mig_devices"] == {"1g.10gb": 4, "3g.40gb": 1}


def test_a_gpu_with_a_process_is_refused_and_nothing_changes(harness, lab):
    harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    two_g = next(gi for gi in lab.gpu_instances() if gi[1] == "2g.20gb")
    processes = {"0": [{"pid": 4242, "name": "vllm", "gpu_instance_id": two_g[0], "compute_instance_id": 0}]}
    (lab.root / "run/gpuops-lab/processes.json").write_text(json.dumps(processes))
    before = lab.gpu_instances()
    lab.systemctl.clear()

    failure = harness.outcome(gpu_mig, args(gpu0({"1g.10gb": 4, "3g.40gb": 1}), profile_set=H100))
    assert failure.failed
    assert "vllm (pid 4242)" in failure.result["msg"]
    assert "GPU 0" in failure.result["msg"]
    assert "nothing was changed" in failure.result["msg"]
    assert failure.result["commands"] == []
    assert lab.systemctl == []
    assert lab.gpu_instances() == before

    # a change that leaves its GPU instance alone goes ahead
    harness.run(gpu_mig, args(gpu0({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, rest_enabled=False)))
    # turning MIG off needs a reset: refused while a process runs, whichever instance it is in
    refused = harness.outcome(gpu_mig, args(gpu0(None), profile_set=H100), check_mode=True)
    assert refused.failed
    assert "needs a reset" in refused.result["msg"]
    assert "vllm (pid 4242)" in refused.result["msg"]


def test_a_gpu_that_cannot_be_reset_waits_for_the_reboot(harness, lab):
    (lab.root / "etc/gpuops-lab/faults.json").write_text(json.dumps({"reset_unsupported": [0]}))
    result = harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    assert result["changed"] is True
    assert result["reboot_required"] is True
    assert result["converged"] is False
    key = sorted(result["layout"])[0]
    assert result["pending_reboot"][key] == "nvidia-smi -r exited 3: Resetting GPU 00000000:18:00.0 is not supported."
    assert result["layout"][key] == {"mig_enabled": False, "pending_mig": True, "mig_devices": {}}
    assert not any("-cgi" in call for call in changing(result))  # nothing created on a GPU still without MIG
    assert lab.units["nvidia-dcgm-exporter"] == "active"

    lab.reboot()
    after = harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    assert changing(after) == [["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"]]  # no mode change left, no reset
    assert after["converged"] is True
    assert after["reboot_required"] is False


def test_reset_reboot_never_resets(harness, lab):
    result = harness.run(gpu_mig, args(gpu0(MIXED), reset="reboot"))
    assert changing(result) == [["-i", "0", "-mig", "1"]]
    assert result["reboot_required"] is True
    assert "next boot" in next(iter(result["pending_reboot"].values()))


def test_turning_mig_off_destroys_first(harness, lab):
    harness.run(gpu_mig, args(gpu0({"2g.20gb": 1, "1c.2g.20gb": 0, "1g.10gb": 1}), profile_set=H100))
    ids = sorted(gi[0] for gi in lab.gpu_instances())
    result = harness.run(gpu_mig, args(gpu0(None)), diff=True)
    destroys = [call for call in changing(result) if "-dci" in call or "-dgi" in call]
    assert len(destroys) == 2 * len(ids)
    assert changing(result)[len(destroys) :] == [["-i", "0", "-mig", "0"], ["-i", "0", "-r"]]
    assert result["diff"]["after"] == lab.layout()
    assert all(not layout["mig_enabled"] for layout in lab.layout().values())


def test_a_failed_step_restarts_what_it_stopped(harness, lab):
    # no placement check without the profile set: the driver refuses 7g.80gb beside 1g.10gb
    failure = harness.outcome(gpu_mig, args(gpu0({"7g.80gb": 1, "1g.10gb": 1})))
    assert failure.failed
    assert "half applied" in failure.result["msg"]
    assert "Insufficient Resources" in failure.result["msg"]
    assert failure.result["rc"] == 15
    assert lab.systemctl[-1] == ["start", "nvidia-dcgm-exporter"]
    assert lab.units["nvidia-dcgm-exporter"] == "active"


@pytest.mark.parametrize(
    ("config", "name", "message"),
    [
        (spec(a=[{"devices": "all", "mig-enabled": True}]), "a", "enables MIG without mig-devices"),
        (spec(a=[{"devices": "all", "mig-enabled": False}]), "b", "config_name is 'b', which config does not hold"),
        ({"mig-configs": {}}, "a", "config has version None"),
    ],
)
def test_a_bad_config_fails_before_reading_the_node(harness, lab, config, name, message):
    failure = harness.outcome(gpu_mig, {"config": config, "config_name": name, "nvidia_smi_path": str(SIM)})
    assert failure.failed
    assert message in failure.result["msg"]
    assert harness.commands.calls == []


def test_a_layout_that_did_not_come_out_as_declared_fails_naming_the_difference(harness, lab):
    lab.ignored = "-cgi"
    failure = harness.outcome(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    assert failure.failed
    assert failure.result["msg"] == (
        "MIG layout chosen: GPU 0 (%s): declared MIG on: 1g.10gb x2, 2g.20gb x1, 3g.40gb x1, found MIG on: no instance"
        % lab.state()["gpus"][0]["uuid"]
    )
    assert lab.units["nvidia-dcgm-exporter"] == "active"


def test_a_bad_profile_set_fails_before_reading_the_node(harness, lab):
    failure = harness.outcome(gpu_mig, args(gpu0(MIXED), profile_set={"profiles": [{"name": "1g.10gb"}]}))
    assert failure.failed
    assert "profile_set profile" in failure.result["msg"]
    assert harness.commands.calls == []


def test_a_job_that_starts_before_the_reset_fails_the_run_and_asks_for_no_reboot(harness, lab):
    def job_starts():
        (lab.root / "run/gpuops-lab/processes.json").write_text(json.dumps({"0": [{"pid": 77, "name": "train.py"}]}))

    lab.before["-r"] = job_starts
    failure = harness.outcome(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    assert failure.failed
    assert "is currently in use by another process" in failure.result["msg"]
    assert failure.result["reboot_required"] is False
    assert failure.result["cmd"][-2:] == ["0", "-r"]
    assert lab.units["nvidia-dcgm-exporter"] == "active"


def test_no_reset_where_the_driver_applied_the_mode_itself(harness, lab):
    def immediate(argv):
        """A driver that resets an idle GPU at -mig 1 and says so (the MIG user guide's output)."""
        inner = unbounded(argv)
        code, out, err = lab.answer(argv)
        assert (code, err) == (0, ""), out
        lab.smi("-i", inner[2], "-r")
        return 0, "Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n", ""

    harness.commands.add([str(SIM), "-i", "0", "-mig"], immediate)
    harness.commands.inside_timeout = True
    result = harness.run(gpu_mig, args(gpu0(MIXED), profile_set=H100))
    assert changing(result) == [["-i", "0", "-mig", "1"], ["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"]]
    assert result["converged"] is True
