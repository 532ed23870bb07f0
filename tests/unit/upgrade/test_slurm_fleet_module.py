"""slurm_fleet through its argument spec, against fake sinfo and squeue answers and a fake clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import slurm_fleet

from tests.unit.module_harness import AnsibleFailJson, FakeCommands, ModuleHarness

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SINFO_JSON = (FIXTURES / "slurm" / "sinfo-22.05-mixed-states.json").read_text()
NOW = 1796280000
# squeue --all --noheader --states=RUNNING,COMPLETING,CONFIGURING --format=%i|%e|%N, SLURM_TIME_FORMAT=%s
SQUEUE = "4101|1796283600|ru-node1\n4102|NONE|ru-node6\n4103|1796281000|ru-node[1,6]\n"
NODES = ["ru-node%d" % i for i in range(1, 8)]


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.setattr(slurm_fleet.time, "time", lambda: NOW + 0.75)
    return ModuleHarness(monkeypatch, commands=FakeCommands({"sinfo --json": SINFO_JSON, "squeue": SQUEUE}))


@pytest.fixture
def run(harness):
    def run(args, check=False):
        return harness.run(slurm_fleet, args, check_mode=check)

    return run


def test_surveys_the_fleet_in_one_sinfo_and_one_squeue(harness, run):
    result = run({"nodes": NODES})
    assert result["changed"] is False
    assert result["now"] == NOW
    assert [(n["name"], n["state"], n["job_end"]) for n in result["nodes"]] == [
        ("ru-node1", "busy", 1796283600),
        ("ru-node2", "idle", None),
        ("ru-node3", "drained_by_others", None),
        ("ru-node4", "idle", None),
        ("ru-node5", "idle", None),
        ("ru-node6", "busy", None),
        ("ru-node7", "down", None),
    ]
    assert result["nodes"][2] == {
        "name": "ru-node3",
        "partitions": ["gpu"],
        "gpus": 4,
        "state": "drained_by_others",
        "job_end": None,
        "slurm_state": "idle+drain",
        "reason": "bad DIMM, ticket HW-4411",
        "owner": "other",
    }
    commands = harness.commands
    assert commands.calls == [
        ["/usr/bin/sinfo", "--json"],
        [
            "/usr/bin/squeue",
            "--all",
            "--noheader",
            "--states=RUNNING,COMPLETING,CONFIGURING",
            "--format=%i|%e|%N",
        ],
    ]
    # epoch seconds from squeue, the C locale for both
    assert commands.environments[1]["SLURM_TIME_FORMAT"] == "%s"
    assert "SLURM_TIME_FORMAT" not in commands.environments[0]
    assert [env["LC_ALL"] for env in commands.environments] == ["C", "C"]


def test_check_mode_reads_the_same_and_changes_nothing(harness, run):
    normal = run({"nodes": ["ru-node1", "ru-node4"]})
    checked = run({"nodes": ["ru-node1", "ru-node4"]}, check=True)
    assert checked == normal
    assert checked["changed"] is False
    assert {call[0] for call in harness.commands.calls} == {"/usr/bin/sinfo", "/usr/bin/squeue"}


def test_order_given_and_each_node_once(run):
    result = run({"nodes": ["ru-node7", "ru-node2", "ru-node7"]})
    assert [(n["name"], n["state"]) for n in result["nodes"]] == [("ru-node7", "down"), ("ru-node2", "idle")]


def test_reason_prefix_decides_whose_drain_it_is(run):
    result = run({"nodes": ["ru-node2", "ru-node5"], "reason_prefix": "other-tool"})
    assert [(n["state"], n["owner"]) for n in result["nodes"]] == [("drained_by_others", "other"), ("down", "other")]


def test_binary_paths(harness, run):
    harness.commands = FakeCommands({"/opt/slurm/bin/sinfo --json": SINFO_JSON, "/opt/slurm/bin/squeue": ""})
    harness.bins.bins = {}  # nothing on PATH: the paths given are used
    result = run({"nodes": ["ru-node6"], "sinfo_path": "/opt/slurm/bin/sinfo", "squeue_path": "/opt/slurm/bin/squeue"})
    # sinfo says allocated and squeue lists no job (it ended in between, or it is suspended): busy, end unknown
    assert result["nodes"][0]["state"] == "busy"
    assert result["nodes"][0]["job_end"] is None
    assert [call[0] for call in harness.commands.calls] == ["/opt/slurm/bin/sinfo", "/opt/slurm/bin/squeue"]


def test_no_node_asked_runs_nothing(harness, run):
    assert run({"nodes": []}) == {"changed": False, "nodes": [], "now": NOW}
    assert harness.commands.calls == []


def test_unknown_nodes_are_named(harness):
    failure = harness.fail(slurm_fleet, {"nodes": ["ru-node1", "gpu-x9", "gpu-x1"]})
    assert failure["msg"].startswith("nodes gpu-x9, gpu-x1 are not known to Slurm (sinfo lists ru-node1, ru-node2,")
    assert failure["missing"] == ["gpu-x9", "gpu-x1"]
    # squeue is not run when the request is wrong
    assert harness.commands.of("squeue") == []
    one = harness.fail(slurm_fleet, {"nodes": ["gpu-x9"]})
    assert one["msg"].startswith("node gpu-x9 is not known to Slurm")


def test_a_long_list_of_known_names_is_cut(harness):
    nodes = [{"name": "gpu%03d" % i, "state": "idle"} for i in range(30)]
    harness.commands.add("sinfo --json", json.dumps({"nodes": nodes}))
    failure = harness.fail(slurm_fleet, {"nodes": ["zz"]})
    assert "gpu019 and 10 more)" in failure["msg"]
    assert "gpu020" not in failure["msg"]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            {"sinfo --json": (1, "", "sinfo: unrecognized option '--json'")},
            "could not read the nodes with sinfo --json: /usr/bin/sinfo exited 1: sinfo: unrecognized option '--json'."
            " check that Slurm's client works",
        ),
        ({"sinfo --json": "Slurm is down"}, "sinfo --json did not print JSON"),
        (
            {"squeue": (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")},
            "could not list the running jobs with squeue: /usr/bin/squeue exited 1: squeue: error: Unable to contact",
        ),
        ({"squeue": "4101|2026-12-03T10:15:00|ru-node1\n"}, "not epoch seconds: run squeue with SLURM_TIME_FORMAT=%s"),
        ({"squeue": "4101|1796283600|ru-node[1-\n"}, "unbalanced brackets"),
    ],
)
def test_slurm_failures_say_what_to_do(harness, answers, message):
    for command, answer in answers.items():
        harness.commands.add(command, answer)
    failure = harness.fail(slurm_fleet, {"nodes": NODES})
    assert message in failure["msg"]
    assert failure["failed"] is True


def test_missing_binary_fails(harness):
    harness.bins.bins = {"sinfo": "/usr/bin/sinfo"}
    with pytest.raises(AnsibleFailJson, match="Failed to find required executable squeue"):
        harness.run(slurm_fleet, {"nodes": NODES})
    assert harness.commands.calls == []


def test_empty_name_is_refused(harness):
    assert "empty name" in harness.fail(slurm_fleet, {"nodes": ["ru-node1", ""]})["msg"]
