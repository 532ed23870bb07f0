"""slurm_fleet through its argument spec, against real Slurm answers (tests/fixtures/slurm/README.md) and a fake clock.

Slurm 24.11 answers ``scontrol show nodes --json``; Slurm 22.05 refuses it (the captured stderr) and
answers ``sinfo --json``. Both answer ``squeue --all --json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import slurm_fleet

from tests.unit.module_harness import AnsibleFailJson, FakeCommands, ModuleHarness, unbounded

SLURM = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
SCONTROL_24_11 = (SLURM / "scontrol-nodes-24.11-lab.json").read_text()
SQUEUE_24_11 = (SLURM / "squeue-24.11-lab.json").read_text()
SINFO_22_05 = (SLURM / "sinfo-22.05-lab.json").read_text()
SQUEUE_22_05 = (SLURM / "squeue-22.05-lab.json").read_text()
NO_JSON_22_05 = (SLURM / "scontrol-nodes-22.05-lab.stderr").read_text()
HAND_MADE_22_05 = (SLURM / "sinfo-22.05-mixed-states.json").read_text()
# When the 22.05 capture was taken (the 24.11 one 78 s earlier): every job of the captures ends later.
NOW = 1796319302
NODES = ["node%d" % i for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 11)]
BOUND = ["/usr/bin/timeout", "-k", "5", "60"]
SCONTROL = [*BOUND, "/usr/bin/scontrol", "show", "nodes", "--json"]
SINFO = [*BOUND, "/usr/bin/sinfo", "--json"]
SQUEUE = [*BOUND, "/usr/bin/squeue", "--all", "--json"]


def slurm(answers):
    """A FakeCommands fallback: answers a Slurm command by its words inside ``timeout``, the longest match first."""

    def answer(argv):
        words = unbounded(argv)
        line = " ".join([os.path.basename(words[0]), *words[1:]])
        for command in sorted(answers, key=len, reverse=True):
            if line == command or line.startswith(command + " "):
                return answers[command]
        raise AssertionError("unexpected command %s" % argv)

    return answer


SLURM_24_11 = {"scontrol show nodes --json": SCONTROL_24_11, "squeue --all --json": SQUEUE_24_11}
SLURM_22_05 = {
    "scontrol show nodes --json": (1, "", NO_JSON_22_05 + 'Try "scontrol --help" for more information\n'),
    "sinfo --json": SINFO_22_05,
    "squeue --all --json": SQUEUE_22_05,
}


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.setattr(slurm_fleet.time, "time", lambda: NOW + 0.75)
    return ModuleHarness(monkeypatch, commands=FakeCommands(fallback=slurm(SLURM_24_11)))


def use(harness, answers):
    harness.commands.fallback = slurm(answers)


@pytest.mark.parametrize(
    ("answers", "calls", "slurm_seen", "ten_minutes", "thirty_minutes"),
    [
        (
            SLURM_24_11,
            [SCONTROL, SQUEUE],
            {"release": "24.11.5", "data_parser": "v0.0.42", "nodes_command": "scontrol show nodes --json"},
            1796319768,
            1796320968,
        ),
        (
            SLURM_22_05,
            [SCONTROL, SINFO, SQUEUE],
            {"release": "22.05.8", "data_parser": "v0.0.38", "nodes_command": "sinfo --json"},
            1796319846,
            1796321046,
        ),
    ],
    ids=["24.11", "22.05"],
)
def test_surveys_the_fleet_in_one_node_and_one_job_query(
    harness, answers, calls, slurm_seen, ten_minutes, thirty_minutes
):
    use(harness, answers)
    result = harness.run(slurm_fleet, {"nodes": NODES})
    assert result["changed"] is False
    assert result["now"] == NOW
    assert result["slurm"] == slurm_seen
    assert [(n["name"], n["state"], n["job_end"], n["slurm_state"], n["owner"]) for n in result["nodes"]] == [
        ("node1", "busy", thirty_minutes, "mixed+maintenance+reserved", "none"),
        ("node2", "busy", ten_minutes, "allocated", "none"),
        ("node3", "busy", None, "mixed", "none"),  # a job without a time limit
        ("node4", "busy", ten_minutes, "mixed+drain", "ours"),  # draining: our drain, its job running
        ("node5", "drained_by_others", None, "idle+drain", "other"),
        ("node6", "idle", None, "idle+drain", "ours"),  # drained by us, no job
        ("node7", "down", None, "down", "other"),
        ("node8", "busy", None, "mixed", "none"),
        ("node9", "idle", None, "idle", "none"),
        ("node11", "down", None, "down+not_responding", "other"),
    ]
    assert result["nodes"][4] == {
        "name": "node5",
        "partitions": ["gpu"],
        "gpus": 4,
        "gres": "gpu:4",  # as Slurm has it (the captured output), for slurm_gres_differs
        "state": "drained_by_others",
        "job_end": None,
        "slurm_state": "idle+drain",
        "reason": "HW-1234 ECC errors on GPU 2, ticket open",
        "owner": "other",
        "reservation": None,
    }
    # scontrol show nodes --json (23.02+) names the reservation; 22.05's sinfo --json has only the flag
    assert result["nodes"][0]["reservation"] in ("maint-node1", None)
    assert (result["nodes"][0]["reservation"] is None) == (result["slurm"]["release"].startswith("22.05"))
    assert harness.commands.calls == calls
    assert all(env["LC_ALL"] == "C" for env in harness.commands.environments)


def test_check_mode_reads_the_same_and_changes_nothing(harness):
    normal = harness.run(slurm_fleet, {"nodes": ["node4", "node9"]})
    checked = harness.run(slurm_fleet, {"nodes": ["node4", "node9"]}, check_mode=True)
    assert checked == normal
    assert checked["changed"] is False
    assert {call[4] for call in harness.commands.calls} == {"/usr/bin/scontrol", "/usr/bin/squeue"}


def test_order_given_and_each_node_once(harness):
    result = harness.run(slurm_fleet, {"nodes": ["node7", "node9", "node7"]})
    assert [(n["name"], n["state"]) for n in result["nodes"]] == [("node7", "down"), ("node9", "idle")]


def test_reason_prefix_decides_whose_drain_it_is(harness):
    result = harness.run(slurm_fleet, {"nodes": ["node6", "node4"], "reason_prefix": "other-tool"})
    assert [(n["state"], n["owner"]) for n in result["nodes"]] == [("drained_by_others", "other")] * 2


def test_the_hand_made_22_05_fixture_still_reads(harness):
    use(harness, dict(SLURM_22_05, **{"sinfo --json": HAND_MADE_22_05}))
    result = harness.run(slurm_fleet, {"nodes": ["ru-node3", "ru-node6"]})
    assert [(n["state"], n["owner"], n["reason"]) for n in result["nodes"]] == [
        ("drained_by_others", "other", "bad DIMM, ticket HW-4411"),
        ("busy", "none", None),  # allocated, and the 22.05 capture lists no job on it: end unknown
    ]


def test_binary_paths_and_no_timeout_binary(harness):
    harness.bins.bins = {"timeout": "/usr/bin/timeout"}  # no Slurm client on PATH: the paths given are used
    use(harness, SLURM_22_05)
    args = {
        "nodes": ["node2"],
        "scontrol_path": "/opt/slurm/bin/scontrol",
        "sinfo_path": "/opt/slurm/bin/sinfo",
        "squeue_path": "/opt/slurm/bin/squeue",
    }
    result = harness.run(slurm_fleet, args)
    assert result["nodes"][0]["job_end"] == 1796319846
    assert harness.commands.calls == [
        [*BOUND, "/opt/slurm/bin/scontrol", "show", "nodes", "--json"],
        [*BOUND, "/opt/slurm/bin/sinfo", "--json"],
        [*BOUND, "/opt/slurm/bin/squeue", "--all", "--json"],
    ]
    harness.bins.bins = {}  # not even timeout: no command runs without a time limit
    harness.commands.calls.clear()
    failure = harness.fail(slurm_fleet, args)
    assert failure["msg"].startswith("coreutils timeout was not found on the node")
    assert harness.commands.calls == []


def test_command_timeout(harness):
    harness.run(slurm_fleet, {"nodes": ["node1"], "command_timeout": 15})
    assert [call[:4] for call in harness.commands.calls] == [["/usr/bin/timeout", "-k", "5", "15"]] * 2
    use(harness, {"scontrol show nodes --json": (124, "", "")})
    failure = harness.fail(slurm_fleet, {"nodes": ["node1"], "command_timeout": 15})
    assert failure["msg"] == (
        "could not run scontrol show nodes --json: /usr/bin/scontrol did not finish in 15 s and was stopped. "
        "check slurmctld (scontrol ping), or raise command_timeout"
    )
    assert failure["timed_out"] is True
    assert "at least 1 second" in harness.fail(slurm_fleet, {"nodes": ["node1"], "command_timeout": 0})["msg"]


def test_no_node_asked_runs_nothing(harness):
    assert harness.run(slurm_fleet, {"nodes": []}) == {"changed": False, "nodes": [], "now": NOW}
    assert harness.commands.calls == []


def test_unknown_nodes_are_named(harness):
    failure = harness.fail(slurm_fleet, {"nodes": ["node1", "gpu-x9", "gpu-x1"]})
    assert failure["msg"].startswith("nodes gpu-x9, gpu-x1 are not known to Slurm (Slurm lists node1, node11, node2,")
    assert failure["missing"] == ["gpu-x9", "gpu-x1"]
    assert failure["slurm"]["release"] == "24.11.5"
    # squeue is not run when the request is wrong
    assert [call[4] for call in harness.commands.calls] == ["/usr/bin/scontrol"]
    one = harness.fail(slurm_fleet, {"nodes": ["gpu-x9"]})
    assert one["msg"].startswith("node gpu-x9 is not known to Slurm")


def test_a_long_list_of_known_names_is_cut(harness):
    nodes = [{"name": "gpu%03d" % i, "state": ["IDLE"]} for i in range(30)]
    use(harness, dict(SLURM_24_11, **{"scontrol show nodes --json": json.dumps({"nodes": nodes})}))
    failure = harness.fail(slurm_fleet, {"nodes": ["zz"]})
    assert "gpu019 and 10 more)" in failure["msg"]
    assert "gpu020" not in failure["msg"]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            {"scontrol show nodes --json": (1, "", "scontrol: error: Unable to contact slurm controller")},
            "could not read the nodes with scontrol show nodes --json: /usr/bin/scontrol exited 1: scontrol: error:"
            " Unable to contact slurm controller. check that Slurm's client works",
        ),
        (
            dict(SLURM_22_05, **{"sinfo --json": (1, "", "sinfo: error: Invalid user for SlurmUser slurm")}),
            "could not read the nodes with sinfo --json (scontrol has no --json): /usr/bin/sinfo exited 1",
        ),
        ({"scontrol show nodes --json": "Slurm is down"}, "scontrol show nodes --json did not print JSON"),
        (
            # a scontrol that prints sinfo's 23.02+ grouped records would hide whose drain each node has
            {"scontrol show nodes --json": (SLURM / "sinfo-24.11-lab.json").read_text()},
            "output of Slurm 24.11.5 (data_parser v0.0.42): its records are grouped",
        ),
        (
            {"squeue --all --json": (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")},
            "could not list the jobs with squeue --json: /usr/bin/squeue exited 1: squeue: error: Unable to contact",
        ),
        (
            {"squeue --all --json": SINFO_22_05},
            "cannot read squeue --json output of Slurm 22.05.8 (data_parser v0.0.38): no 'jobs'",
        ),
    ],
    ids=["scontrol-down", "sinfo-fails", "not-json", "grouped", "squeue-down", "squeue-not-jobs"],
)
def test_slurm_failures_say_what_to_do(harness, answers, message):
    use(harness, dict(SLURM_24_11, **answers))
    failure = harness.fail(slurm_fleet, {"nodes": NODES})
    assert message in failure["msg"]
    assert failure["failed"] is True


def test_a_scontrol_failure_is_not_taken_for_22_05(harness):
    use(harness, dict(SLURM_22_05, **{"scontrol show nodes --json": (1, "", "scontrol: error: Invalid user")}))
    harness.fail(slurm_fleet, {"nodes": NODES})
    assert [call[4] for call in harness.commands.calls] == ["/usr/bin/scontrol"]


def test_missing_binary_fails(harness):
    harness.bins.bins = {"scontrol": "/usr/bin/scontrol", "sinfo": "/usr/bin/sinfo"}
    with pytest.raises(AnsibleFailJson, match="Failed to find required executable squeue"):
        harness.run(slurm_fleet, {"nodes": NODES})
    assert harness.commands.calls == []
    harness.bins.bins = {"squeue": "/usr/bin/squeue"}
    with pytest.raises(AnsibleFailJson, match="Failed to find required executable scontrol"):
        harness.run(slurm_fleet, {"nodes": NODES})


def test_sinfo_is_only_needed_on_22_05(harness):
    harness.bins.bins = {"scontrol": "/usr/bin/scontrol", "squeue": "/usr/bin/squeue", "timeout": "/usr/bin/timeout"}
    assert harness.run(slurm_fleet, {"nodes": ["node9"]})["nodes"][0]["state"] == "idle"
    use(harness, SLURM_22_05)
    with pytest.raises(AnsibleFailJson, match="Failed to find required executable sinfo"):
        harness.run(slurm_fleet, {"nodes": ["node9"]})


def test_empty_name_is_refused(harness):
    assert "empty name" in harness.fail(slurm_fleet, {"nodes": ["node1", ""]})["msg"]
