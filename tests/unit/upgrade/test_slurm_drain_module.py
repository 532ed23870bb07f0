"""slurm_drain through its argument spec, against a fake Slurm controller and a fake clock (no real waiting)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import slurm_drain

from tests.unit.module_harness import AnsibleFailJson, FakeCommands, ModuleHarness, unbounded

RUN = "r20261202-1"


class FakeSlurm:
    """A Slurm controller as sinfo and scontrol see it; jobs end after a number of reads."""

    def __init__(self):
        self.nodes = {
            "n1": {"state": "idle", "flags": [], "reason": ""},
            "n2": {"state": "mixed", "flags": [], "reason": ""},
            "n3": {"state": "idle", "flags": ["DRAIN"], "reason": "bad DIMM, ticket HW-4411", "user": "alice"},
        }
        self.job_reads_left = {"n2": 2}
        self.calls: list[list[str]] = []
        self.json_works = True
        self.scontrol_rc = 0
        self.clock = 0.0

    def answer(self, args):
        """The harness's answer to every command (it has checked the argv list and the C locale), by the command
        inside its ``timeout``."""
        args = unbounded(args)
        self.calls.append(list(args))
        tool = args[0].rsplit("/", 1)[-1]
        if tool == "sinfo":
            self._jobs_progress()
            return self._sinfo(args)
        if tool == "scontrol":
            return self._scontrol(args)
        raise AssertionError(args)

    def _jobs_progress(self):
        for name, left in list(self.job_reads_left.items()):
            if left == 0:
                self.nodes[name]["state"] = "idle"
                del self.job_reads_left[name]
            else:
                self.job_reads_left[name] = left - 1

    def _sinfo(self, args):
        if "--json" in args:
            if not self.json_works:
                return 1, "", "sinfo: unrecognized option '--json'"
            nodes = [
                {
                    "name": n,
                    "state": v["state"],
                    "state_flags": v["flags"],
                    "reason": v["reason"],
                    "reason_set_by_user": v.get("user", ""),
                    "boot_time": 1,
                }
                for n, v in self.nodes.items()
            ]
            return 0, json.dumps({"nodes": nodes}), ""
        name = args[args.index("-n") + 1]
        v = self.nodes[name]
        state = "+".join([v["state"]] + [f.lower() for f in v["flags"]])
        return 0, name.ljust(20) + state.ljust(30) + (v["reason"] or "none")[:60].ljust(60) + "\n", ""

    def _scontrol(self, args):
        if self.scontrol_rc:
            return self.scontrol_rc, "", "scontrol: error: Invalid user for SlurmUser"
        fields = dict(arg.split("=", 1) for arg in args[2:])
        node = self.nodes[fields["nodename"]]
        if fields["state"] == "drain":
            node["flags"] = ["DRAIN"]
            node["reason"] = fields["reason"]
        elif fields["state"] == "resume":
            node["flags"] = []
            node["reason"] = ""
            if node["state"] == "down":
                node["state"] = "idle"
        return 0, "", ""

    def scontrol_calls(self):
        return [c for c in self.calls if c[0].endswith("scontrol")]


@pytest.fixture
def harness(monkeypatch):
    return ModuleHarness(monkeypatch)


@pytest.fixture
def slurm(harness, monkeypatch):
    fake = FakeSlurm()
    harness.commands = FakeCommands(fallback=fake.answer)
    monkeypatch.setattr(slurm_drain.time, "monotonic", lambda: fake.clock)

    def sleep(seconds):
        fake.clock += seconds

    monkeypatch.setattr(slurm_drain.time, "sleep", sleep)
    return fake


@pytest.fixture
def run(harness):
    def run(args, check=False, diff=False):
        return harness.run(slurm_drain, args, check_mode=check, diff=diff)

    return run


def test_drain_an_idle_node(slurm, run):
    result = run({"node": "n1", "state": "drained", "run_id": RUN}, diff=True)
    assert result["changed"] is True
    assert result["action"] == "drain"
    assert result["ours"] is True
    assert result["pre_existing"] is False
    assert result["drained"] is True
    assert slurm.scontrol_calls() == [
        [
            "/usr/bin/scontrol",
            "update",
            "nodename=n1",
            "state=drain",
            "reason=gpuops-upgrade[%s]: upgrading the NVIDIA stack" % RUN,
        ]
    ]
    assert result["diff"] == {
        "before": {"state": "idle", "reason": None},
        "after": {"state": "idle+drain", "reason": "gpuops-upgrade[%s]: upgrading the NVIDIA stack" % RUN},
    }
    # idempotent
    again = run({"node": "n1", "state": "drained", "run_id": RUN})
    assert again["changed"] is False
    assert again["ours"] is True
    assert len(slurm.scontrol_calls()) == 1


def test_drain_waits_for_the_running_job(slurm, run):
    slurm.job_reads_left["n2"] = 3  # running at the first read, the drain, and one poll; idle at the next
    result = run({"node": "n2", "state": "drained", "run_id": RUN, "poll_interval": 5, "wait_timeout": 60})
    assert result["drained"] is True
    assert result["timed_out"] is False
    assert result["waited"] == 10.0
    assert result["node"]["state"] == "idle"


def test_drain_times_out_and_leaves_the_node_drained(slurm, run):
    slurm.job_reads_left["n2"] = 100
    result = run({"node": "n2", "state": "drained", "run_id": RUN, "poll_interval": 7, "wait_timeout": 20})
    assert result["timed_out"] is True
    assert result["drained"] is False
    assert result["waited"] == 20.0
    assert result["node"]["drain"] is True
    # the playbook then says why in the reason: an update of our own drain
    updated = run(
        {"node": "n2", "state": "drained", "run_id": RUN, "reason": "jobs still running after 20s", "wait": False}
    )
    assert updated["action"] == "update_reason"
    assert slurm.nodes["n2"]["reason"] == "gpuops-upgrade[%s]: jobs still running after 20s" % RUN


def test_someone_elses_drain_is_kept_and_never_resumed(slurm, run):
    drained = run({"node": "n3", "state": "drained", "run_id": RUN})
    assert drained["changed"] is False
    assert drained["pre_existing"] is True
    assert drained["ours"] is False
    assert drained["drained"] is True
    resumed = run({"node": "n3", "state": "resumed"})
    assert resumed["changed"] is False
    assert resumed["pre_existing"] is True
    assert slurm.scontrol_calls() == []
    assert slurm.nodes["n3"]["reason"] == "bad DIMM, ticket HW-4411"


def test_resume_our_drain_after_a_reboot(slurm, run):
    slurm.nodes["n1"] = {"state": "down", "flags": ["DRAIN"], "reason": "gpuops-upgrade[older-run]: upgrading"}
    result = run({"node": "n1", "state": "resumed"})
    assert result["action"] == "resume"
    assert result["node"]["state"] == "idle"
    assert result["node"]["drain"] is False
    assert run({"node": "n1", "state": "resumed"})["changed"] is False


def test_check_mode_runs_no_scontrol_and_predicts(slurm, run):
    result = run({"node": "n2", "state": "drained", "run_id": RUN}, check=True)
    assert result["changed"] is True
    assert result["node"]["drain"] is True
    assert result["drained"] is False
    assert slurm.scontrol_calls() == []
    assert slurm.clock == 0.0


def test_status_reports_ownership(slurm, run):
    assert run({"node": "n3"})["pre_existing"] is True
    assert run({"node": "n1"})["ours"] is False


def test_text_fallback_when_json_is_missing(slurm, run):
    slurm.json_works = False
    result = run({"node": "n1", "state": "drained", "run_id": RUN})
    assert result["ours"] is True
    assert result["node"]["reason"].startswith("gpuops-upgrade[%s]: " % RUN)
    assert ["/usr/bin/sinfo", "-N", "-h", "-n", "n1", "-O", "NodeList:20,StateComplete:30,Reason:60"] in slurm.calls


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"node": "zz"}, "node zz is not known to Slurm"),
        ({"node": "n1", "state": "drained"}, "run_id"),
        ({"node": "n1", "state": "drained", "run_id": "bad id"}, "cannot build the drain reason"),
        ({"node": "n1", "poll_interval": 0}, "poll_interval"),
    ],
)
def test_failures_say_what_to_do(slurm, run, args, message):
    with pytest.raises(AnsibleFailJson, match=message):
        run(args)


def test_scontrol_failure_is_reported_with_its_output(slurm, run):
    slurm.scontrol_rc = 1
    with pytest.raises(AnsibleFailJson) as failed:
        run({"node": "n1", "state": "drained", "run_id": RUN})
    assert failed.value.result["stderr"] == "scontrol: error: Invalid user for SlurmUser"
    assert "Slurm operator" in failed.value.result["msg"]


def test_a_resumed_node_downed_for_its_reboot_is_resumed_again(slurm, run):
    """Resumed before its slurmd registered: Slurm downs it as rebooted unexpectedly; the module resumes it again."""
    slurm.nodes["n1"] = {"state": "idle", "flags": ["DRAIN"], "reason": "gpuops-upgrade[older-run]: upgrading"}
    original = slurm._scontrol
    registered = []

    def scontrol(args):
        answer = original(args)
        if not registered:  # the node registers after the first resume: down, reason Slurm's
            registered.append(True)
            slurm.nodes["n1"] = {"state": "down", "flags": [], "reason": "Node unexpectedly rebooted"}
        return answer

    slurm._scontrol = scontrol
    result = run({"node": "n1", "state": "resumed"})
    assert result["resumed_again"] == 1
    assert result["timed_out"] is False
    assert result["node"]["state"] == "idle"
    assert len(slurm.scontrol_calls()) == 2


def test_a_resumed_node_not_responding_is_waited_for_within_the_bound(slurm, run):
    slurm.nodes["n1"] = {"state": "idle", "flags": ["DRAIN"], "reason": "gpuops-upgrade[older-run]: upgrading"}
    original = slurm._scontrol

    def scontrol(args):
        answer = original(args)
        slurm.nodes["n1"]["flags"] = ["NOT_RESPONDING"]
        return answer

    slurm._scontrol = scontrol
    result = run({"node": "n1", "state": "resumed", "resume_wait": 10})
    assert result["timed_out"] is True
    assert result["waited"] >= 10
    assert result["resumed_again"] == 0
    slurm.nodes["n1"]["flags"] = []
    assert run({"node": "n1", "state": "resumed"})["changed"] is False


def test_someone_elses_down_is_never_resumed_again(slurm, run):
    slurm.nodes["n1"] = {"state": "down", "flags": [], "reason": "Node unexpectedly rebooted"}
    result = run({"node": "n1", "state": "resumed"})
    assert result["changed"] is False
    assert slurm.scontrol_calls() == []


def test_every_slurm_command_is_bounded_and_a_hung_one_fails(slurm, run, harness):
    run({"node": "n1", "state": "drained", "run_id": RUN, "command_timeout": 30})
    assert harness.commands.calls
    assert all(call[:4] == ["/usr/bin/timeout", "-k", "5", "30"] for call in harness.commands.calls)
    harness.commands.add("timeout -k 5 60 /usr/bin/sinfo", (124, "", ""))
    failure = harness.fail(slurm_drain, {"node": "n1", "state": "status"})
    assert failure["msg"] == (
        "could not read the node with sinfo: /usr/bin/sinfo did not finish in 60 s and was stopped. "
        "check slurmctld (scontrol ping) from this host, or raise command_timeout"
    )
    assert "at least 1 second" in harness.fail(slurm_drain, {"node": "n1", "command_timeout": 0})["msg"]
