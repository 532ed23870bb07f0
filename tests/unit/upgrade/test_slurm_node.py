"""Slurm node state from scontrol/sinfo (JSON and text), jobs from squeue, drain ownership and scontrol argv.

The ``*-lab*`` fixtures are real output of Slurm 22.05.8 and 24.11.5 (tests/fixtures/slurm/README.md);
``sinfo-22.05-mixed-states.json`` and ``sinfo-N-O-mixed-states.txt`` are the older hand-made ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import slurm_node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

PREFIX = "gpuops-upgrade"
RUN = "20261202T101500-ab12"


@pytest.fixture(scope="module")
def json_nodes():
    return slurm_node.parse_sinfo_json((FIXTURES / "slurm" / "sinfo-22.05-mixed-states.json").read_text())


@pytest.fixture(scope="module")
def text_nodes():
    return slurm_node.parse_sinfo_text((FIXTURES / "slurm" / "sinfo-N-O-mixed-states.txt").read_text())


def test_json_states(json_nodes):
    assert sorted(json_nodes) == ["ru-node%d" % i for i in range(1, 8)]
    draining = json_nodes["ru-node1"]
    assert draining["state"] == "mixed"
    assert draining["drain"]
    assert draining["jobs_running"]
    assert not draining["drained"]
    assert json_nodes["ru-node2"]["drained"]
    assert not json_nodes["ru-node2"]["jobs_running"]
    other = json_nodes["ru-node3"]
    assert other["reason"] == "bad DIMM, ticket HW-4411"
    assert other["reason_set_by_user"] == "alice"
    assert json_nodes["ru-node4"] == {
        "name": "ru-node4",
        "state": "idle",
        "state_flags": [],
        "drain": False,
        "jobs_running": False,
        "drained": False,
        "reason": None,
        "reason_set_by_user": None,
        "boot_time": 1764670000,
        "partitions": ["gpu"],
        "gres": "gpu:4",
        "gpus": 4,
        "reservation": None,
    }
    assert json_nodes["ru-node5"]["state"] == "down"
    assert json_nodes["ru-node5"]["drained"]
    assert json_nodes["ru-node5"]["boot_time"] == 1764671400
    assert json_nodes["ru-node6"]["jobs_running"]
    assert not json_nodes["ru-node6"]["drain"]
    assert json_nodes["ru-node7"]["state_flags"] == ["not_responding"]


def test_text_agrees_with_json_on_state_and_ownership(json_nodes, text_nodes):
    assert sorted(text_nodes) == sorted(json_nodes)
    for name, node in text_nodes.items():
        for key in ("state", "drain", "drained", "jobs_running"):
            assert node[key] == json_nodes[name][key], (name, key)
        assert slurm_node.ownership(node, PREFIX) == slurm_node.ownership(json_nodes[name], PREFIX), name
    # the text cuts reasons at 60 characters; the prefix survives
    assert text_nodes["ru-node2"]["reason"] == json_nodes["ru-node2"]["reason"][:60]
    # and carries neither partitions nor gres
    assert {key: text_nodes["ru-node4"][key] for key in ("partitions", "gres", "gpus")} == {
        "partitions": None,
        "gres": None,
        "gpus": None,
    }


def test_slurm_23_list_states_are_read():
    text = json.dumps(
        {"nodes": [{"name": "x", "state": ["IDLE", "DRAIN"], "reason": "r", "boot_time": {"set": True, "number": 5}}]}
    )
    node = slurm_node.parse_sinfo_json(text)["x"]
    assert node["state"] == "idle"
    assert node["drain"]
    assert node["drained"]
    assert node["boot_time"] == 5


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"errors": []}', '{"nodes": [{"state": "idle"}]}'],
    ids=["text", "list", "no-nodes", "no-name"],
)
def test_unreadable_json_raises(text):
    with pytest.raises(slurm_node.SlurmParseError):
        slurm_node.parse_sinfo_json(text)


def test_unreadable_text_raises():
    with pytest.raises(slurm_node.SlurmParseError, match="NodeList:20"):
        slurm_node.parse_sinfo_text("ru-node1\n")


@pytest.mark.parametrize(
    ("node", "owner"),
    [
        ("ru-node1", "ours"),
        ("ru-node2", "ours"),
        ("ru-node3", "other"),
        ("ru-node4", "none"),
        ("ru-node5", "ours"),
        ("ru-node6", "none"),
        ("ru-node7", "other"),
    ],
)
def test_ownership(json_nodes, node, owner):
    assert slurm_node.ownership(json_nodes[node], PREFIX) == owner


def test_a_reason_that_only_mentions_the_prefix_is_not_ours():
    node = {"drain": True, "state": "idle", "reason": "waiting for gpuops-upgrade[x]: later"}
    assert slurm_node.ownership(node, PREFIX) == "other"
    assert slurm_node.reason_run_id("gpuops-upgrade[r9]: upgrading", PREFIX) == "r9"
    assert slurm_node.reason_run_id("gpuops-upgrade-other[r9]: x", PREFIX) is None


def test_decide_drain(json_nodes):
    reason = slurm_node.make_reason(PREFIX, RUN, "upgrading the NVIDIA stack")
    assert slurm_node.decide_drain(json_nodes["ru-node4"], PREFIX, reason) == {
        "action": "drain",
        "ours": True,
        "pre_existing": False,
    }
    assert slurm_node.decide_drain(json_nodes["ru-node2"], PREFIX, reason)["action"] == "none"
    assert slurm_node.decide_drain(json_nodes["ru-node2"], PREFIX, reason + " (again)")["action"] == "update_reason"
    assert slurm_node.decide_drain(json_nodes["ru-node3"], PREFIX, reason) == {
        "action": "none",
        "ours": False,
        "pre_existing": True,
    }
    assert slurm_node.decide_drain(json_nodes["ru-node7"], PREFIX, reason)["pre_existing"] is True


def test_decide_resume(json_nodes):
    assert slurm_node.decide_resume(json_nodes["ru-node5"], PREFIX)["action"] == "resume"
    assert slurm_node.decide_resume(json_nodes["ru-node3"], PREFIX) == {
        "action": "none",
        "ours": False,
        "pre_existing": True,
    }
    assert slurm_node.decide_resume(json_nodes["ru-node4"], PREFIX) == {
        "action": "none",
        "ours": False,
        "pre_existing": False,
    }


def test_reason_and_argv():
    reason = slurm_node.make_reason(PREFIX, RUN, "  jobs still\nrunning after 600s ")
    assert reason == "gpuops-upgrade[20261202T101500-ab12]: jobs still running after 600s"
    assert slurm_node.drain_argv("/usr/bin/scontrol", "ru-node1", reason) == [
        "/usr/bin/scontrol",
        "update",
        "nodename=ru-node1",
        "state=drain",
        "reason=" + reason,
    ]
    assert slurm_node.resume_argv("/usr/bin/scontrol", "ru-node1") == [
        "/usr/bin/scontrol",
        "update",
        "nodename=ru-node1",
        "state=resume",
    ]
    assert slurm_node.sinfo_json_argv("/usr/bin/sinfo") == ["/usr/bin/sinfo", "--json"]
    assert slurm_node.sinfo_text_argv("/usr/bin/sinfo", "n1")[-1] == "NodeList:20,StateComplete:30,Reason:60"


@pytest.mark.parametrize(
    ("prefix", "run_id", "message"),
    [("", RUN, "m"), ("a[b", RUN, "m"), (PREFIX, "", "m"), (PREFIX, "has space", "m"), (PREFIX, RUN, 'say "hi"')],
)
def test_bad_reason_parts(prefix, run_id, message):
    with pytest.raises(ValueError, match=r"prefix|run id|double quotes"):
        slurm_node.make_reason(prefix, run_id, message)


# --- the fleet survey of the sliding window: hostlists, squeue, survey ---

NOW = 1796280000


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("gpu[1-3,5]", ["gpu1", "gpu2", "gpu3", "gpu5"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
        ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
        ("a1,b2", ["a1", "b2"]),
        ("ru-node4", ["ru-node4"]),
        ("gpu[1-2],cpu[01-02]-ib,login", ["gpu1", "gpu2", "cpu01-ib", "cpu02-ib", "login"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("node1[0-2]", ["node10", "node11", "node12"]),
        ("gpu[3,1-2],gpu2", ["gpu3", "gpu1", "gpu2"]),
        (" gpu[1-2] ", ["gpu1", "gpu2"]),
        ("", []),
        ("(null)", []),
        (None, []),
    ],
)
def test_expand_hostlist(expr, names):
    assert slurm_node.expand_hostlist(expr) == names


@pytest.mark.parametrize(
    "expr",
    ["gpu[1-3", "gpu1-3]", "gpu[a-b]", "gpu[3-1]", "gpu[1-[2]]", "gpu[]", "gpu[1,,2]", "a,,b", "gpu[1-]"],
)
def test_malformed_hostlist_raises(expr):
    with pytest.raises(slurm_node.SlurmParseError, match=r"hostlist|brackets"):
        slurm_node.expand_hostlist(expr)


def test_squeue_argv_asks_for_a_separated_line_per_job():
    assert slurm_node.squeue_argv("/usr/bin/squeue") == [
        "/usr/bin/squeue",
        "--all",
        "--noheader",
        "--states=RUNNING,COMPLETING,CONFIGURING",
        "--format=%i|%e|%N",
    ]


def test_parse_squeue_takes_the_last_end_per_node():
    text = (
        "4101|1796283600|ru-node1\n"
        "4102|1796281000|ru-node[1,4]\n"
        "4103_7|1796290000|ru-node[08-09]\n"
        "\n"
        "  4104+0|1796285000|gpu-b01  \n"
    )
    assert slurm_node.parse_squeue(text, NOW) == {
        "ru-node1": 1796283600,
        "ru-node4": 1796281000,
        "ru-node08": 1796290000,
        "ru-node09": 1796290000,
        "gpu-b01": 1796285000,
    }


@pytest.mark.parametrize("end", ["N/A", "NONE", "Unknown", "", "INFINITE"])
def test_parse_squeue_a_job_without_an_end_makes_the_node_unknown(end):
    # whichever line comes first, one job without an end makes the node's end unknown
    text = "1|1796283600|n[1-2]\n2|%s|n2\n3|1796283700|n2\n" % end
    assert slurm_node.parse_squeue(text, NOW) == {"n1": 1796283600, "n2": None}
    assert slurm_node.parse_squeue("2|%s|n2\n1|1796283600|n2\n" % end, NOW) == {"n2": None}


def test_parse_squeue_a_past_end_is_now_and_nodeless_jobs_are_skipped():
    assert slurm_node.parse_squeue("1|1796279000|n1\n2|1796290000|\n", NOW) == {"n1": NOW}
    assert slurm_node.parse_squeue("", NOW) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1|2026-12-03T10:15:00|n1\n", "SLURM_TIME_FORMAT"),
        ("1 1796283600 n1\n", "expected --format"),
        ("1|1796283600|n1|extra\n", "expected --format"),
        ("1|1796283600|n[1-\n", "brackets"),
    ],
)
def test_unreadable_squeue_raises(text, message):
    with pytest.raises(slurm_node.SlurmParseError, match=message):
        slurm_node.parse_squeue(text, NOW)


@pytest.mark.parametrize(
    ("gres", "tres", "gpus"),
    [
        ("gpu:4", None, 4),
        ("gpu:l40s:4", None, 4),
        ("gpu:4(S:0-1)", None, 4),
        ("gpu:h100:8(S:0-1)", None, 8),
        ("gpu:a100:4(S:0,1),gpu:v100:2(S:1),shard:8", None, 6),
        ("gpu:tesla:no_consume:2", None, 2),
        ("shard:8", None, None),
        ("", "cpu=2,mem=1900M,billing=2,gres/gpu=4", 4),
        ("(null)", "cpu=64,gres/gpu:h100=8,gres/gpu=8", 8),
        ("", "cpu=2,mem=1900M", None),
        ("gpu:4(S:0-1", "cpu=2,gres/gpu=2", 2),  # unreadable gres: the tres says
        (None, None, None),
    ],
)
def test_gpu_count(gres, tres, gpus):
    assert slurm_node.gpu_count(gres, tres) == gpus


def _sinfo(*nodes):
    return slurm_node.parse_sinfo_json(json.dumps({"nodes": list(nodes)}))


def test_survey_of_the_fixture_cluster(json_nodes):
    squeue = "4101|1796283600|ru-node1\n4102|NONE|ru-node6\n4103|1796281000|ru-node[1,6]\n"
    fleet = slurm_node.survey(json_nodes, slurm_node.parse_squeue(squeue, NOW), sorted(json_nodes), PREFIX)
    assert [(n["name"], n["state"], n["job_end"]) for n in fleet] == [
        ("ru-node1", "busy", 1796283600),  # our drain, the job still running: taken like any busy node
        ("ru-node2", "idle", None),  # our drain, left by an aborted run: idle
        ("ru-node3", "drained_by_others", None),
        ("ru-node4", "idle", None),
        ("ru-node5", "idle", None),  # drained by us, rebooted: down+drain with our reason
        ("ru-node6", "busy", None),  # a job without a time limit
        ("ru-node7", "down", None),  # not responding
    ]
    assert fleet[0] == {
        "name": "ru-node1",
        "partitions": ["gpu"],
        "gpus": 4,
        "gres": "gpu:4",  # as Slurm has it (the captured output), for slurm_gres_differs
        "state": "busy",
        "job_end": 1796283600,
        "slurm_state": "mixed+drain",
        "reason": "gpuops-upgrade[20261202T101500-ab12]: upgrading the NVIDIA stack",
        "owner": "ours",
        "reservation": None,
    }
    assert fleet[2]["reason"] == "bad DIMM, ticket HW-4411"
    assert fleet[2]["owner"] == "other"
    assert fleet[4]["slurm_state"] == "down+drain"
    assert fleet[6]["slurm_state"] == "down+not_responding"


def test_survey_with_another_prefix_sees_our_drains_as_someone_elses(json_nodes):
    fleet = slurm_node.survey(json_nodes, {}, ["ru-node2", "ru-node5"], "other-tool")
    assert [(n["state"], n["owner"]) for n in fleet] == [("drained_by_others", "other"), ("down", "other")]


def test_survey_classifies_every_situation():
    nodes = _sinfo(
        {"name": "idle1", "state": "idle", "partitions": ["gpu", "gpu-long"], "gres": "gpu:l40s:4(S:0-1)"},
        {"name": "busy1", "state": "mixed", "partitions": ["gpu"], "gres": "gpu:h100:8(S:0-1)"},
        {"name": "race1", "state": "idle", "partitions": ["gpu"], "gres": "gpu:8"},
        {"name": "cg1", "state": "idle", "state_flags": ["COMPLETING"], "gres": "gpu:8"},
        {"name": "cpu1", "state": "idle", "partitions": ["cpu"], "gres": ""},
        {"name": "admin-down", "state": "down", "reason": "PSU swap"},
        {"name": "failed", "state": "fail", "reason": "ECC storm"},
        {
            "name": "ours-dead",
            "state": "down",
            "state_flags": ["DRAIN", "NOT_RESPONDING"],
            "reason": "%s[r0]: x" % PREFIX,
        },
        {"name": "asleep", "state": "idle", "state_flags": ["POWERED_DOWN"]},
        {"name": "booting", "state": "unknown"},
        {"name": "theirs-busy", "state": "mixed", "state_flags": ["DRAIN"], "reason": "hw ticket"},
        {"name": "ours-busy", "state": "allocated", "state_flags": ["DRAIN"], "reason": "%s[r0]: x" % PREFIX},
    )
    job_ends = {"busy1": 1796283600, "race1": 1796281200, "theirs-busy": 1796283000, "ours-busy": 1796299000}
    fleet = {n["name"]: n for n in slurm_node.survey(nodes, job_ends, list(nodes), PREFIX)}
    assert {name: (n["state"], n["job_end"]) for name, n in fleet.items()} == {
        "idle1": ("idle", None),
        "busy1": ("busy", 1796283600),
        "race1": ("busy", 1796281200),  # squeue saw a job sinfo did not yet
        "cg1": ("busy", None),  # completing, no job left in squeue
        "cpu1": ("idle", None),
        "admin-down": ("down", None),
        "failed": ("down", None),
        "ours-dead": ("down", None),  # our drain, but Slurm cannot reach it
        "asleep": ("down", None),
        "booting": ("down", None),
        "theirs-busy": ("drained_by_others", None),
        "ours-busy": ("busy", 1796299000),
    }
    assert fleet["idle1"]["partitions"] == ["gpu", "gpu-long"]
    assert fleet["idle1"]["gpus"] == 4
    assert fleet["busy1"]["gpus"] == 8
    assert fleet["cpu1"]["gpus"] == 0
    assert fleet["cpu1"]["partitions"] == ["cpu"]
    assert fleet["admin-down"]["partitions"] == []
    assert fleet["asleep"]["slurm_state"] == "idle+powered_down"


def test_a_node_busy_in_sinfo_whose_job_left_the_job_read_ends_now_not_never():
    """The window reads nodes, then jobs: a job that ends between the two leaves the node allocated or completing with
    no job holding it. Seen in the lab: the node was deferred as "no known end" the moment its job ended."""
    nodes = _sinfo(
        {"name": "ended", "state": "allocated", "gres": "gpu:8"},
        {"name": "cg1", "state": "idle", "state_flags": ["COMPLETING"], "gres": "gpu:8"},
        {"name": "unlimited", "state": "mixed", "gres": "gpu:8"},
    )
    now = 1796281000.5
    fleet = {n["name"]: n for n in slurm_node.survey(nodes, {"unlimited": None}, list(nodes), PREFIX, now)}
    assert {name: (n["state"], n["job_end"]) for name, n in fleet.items()} == {
        "ended": ("busy", now),
        "cg1": ("busy", now),
        "unlimited": ("busy", None),  # a job the read lists without a known end stays unknown
    }


def test_survey_keeps_the_order_given_and_lists_a_node_once(json_nodes):
    fleet = slurm_node.survey(json_nodes, {}, ["ru-node4", "ru-node2", "ru-node4"], PREFIX)
    assert [n["name"] for n in fleet] == ["ru-node4", "ru-node2"]


def test_survey_names_unknown_nodes(json_nodes):
    assert slurm_node.unknown_nodes(json_nodes, ["ru-node1", "zz9", "zz1", "zz9"]) == ["zz9", "zz1"]
    with pytest.raises(ValueError, match="node\\(s\\) zz9, zz1 not known to Slurm"):
        slurm_node.survey(json_nodes, {}, ["ru-node1", "zz9", "zz1"], PREFIX)


def test_survey_nodes_are_window_input_nodes(json_nodes):
    # the planner's fields, as the planner validates them
    from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input

    squeue = "4101|1796283600|ru-node1\n"
    fleet = slurm_node.survey(json_nodes, slurm_node.parse_squeue(squeue, NOW), sorted(json_nodes), PREFIX)
    planner_fields = ("name", "partitions", "gpus", "state", "job_end")
    nodes = window_input.nodes_of([{key: n[key] for key in planner_fields} for n in fleet])
    assert [(n.name, n.state, n.gpus, n.partitions) for n in nodes][:2] == [
        ("ru-node1", "busy", 4, ("gpu",)),
        ("ru-node2", "idle", 4, ("gpu",)),
    ]


# --- real captures: Slurm 22.05.8 (sinfo --json) and 24.11.5 (scontrol show nodes --json), same scenario ---

SLURM = FIXTURES / "slurm"
# When the 22.05 capture was taken (the 24.11 one 78 s earlier): every job of the captures ends later.
CAPTURED = 1796319302
OURS = "gpuops-upgrade[20261203T1730-cap1]: upgrading the NVIDIA stack"
FOREIGN = "HW-1234 ECC errors on GPU 2, ticket open"
# The node captures, with the command they come from and the Slurm they say they are.
NODE_CAPTURES = {
    "scontrol-24.11": ("scontrol-nodes-24.11-lab.json", "scontrol show nodes --json", "24.11.5", "v0.0.42"),
    "scontrol-24.11-v0.0.41": (
        "scontrol-nodes-24.11-lab-data-parser-v0.0.41.json",
        "scontrol show nodes --json",
        "24.11.5",
        "v0.0.41",
    ),
    "scontrol-24.11-v0.0.40": (
        "scontrol-nodes-24.11-lab-data-parser-v0.0.40.json",
        "scontrol show nodes --json",
        "24.11.5",
        "v0.0.40",
    ),
    "sinfo-22.05": ("sinfo-22.05-lab.json", "sinfo --json", "22.05.8", "v0.0.38"),
}
JOB_CAPTURES = {
    "squeue-24.11": ("squeue-24.11-lab.json", "v0.0.42", 1796319768, 1796320968),
    "squeue-24.11-v0.0.41": ("squeue-24.11-lab-data-parser-v0.0.41.json", "v0.0.41", 1796319768, 1796320968),
    "squeue-24.11-v0.0.40": ("squeue-24.11-lab-data-parser-v0.0.40.json", "v0.0.40", 1796319768, 1796320968),
    "squeue-22.05": ("squeue-22.05-lab.json", "v0.0.38", 1796319846, 1796321046),
}
# Each node of the scenario (capture/scenario.sh): Slurm's state, reason, and whose drain it is.
SCENARIO = {
    "node1": ("mixed+maintenance+reserved", None, "none"),  # a job, and an active maint reservation
    "node2": ("allocated", None, "none"),  # an --exclusive job with a 10 min limit
    "node3": ("mixed", None, "none"),  # one of a two-node job without a time limit
    "node4": ("mixed+drain", OURS, "ours"),  # drained by us while its job runs: draining
    "node5": ("idle+drain", FOREIGN, "other"),  # drained by someone else: drained
    "node6": ("idle+drain", OURS, "ours"),  # drained by us, no job: drained
    "node7": ("down", "PSU replaced, waiting for burn-in", "other"),  # set down by an operator
    "node8": ("mixed", None, "none"),  # the other node of the two-node job
    "node9": ("idle", None, "none"),
    "node11": ("down+not_responding", "Not responding", "other"),  # its slurmd stopped
}


def _capture(name):
    return (SLURM / name).read_text()


@pytest.fixture(scope="module", params=sorted(NODE_CAPTURES))
def captured(request):
    """``(key, parse_nodes_json's result)`` of each real node capture."""
    file, command, _release, _parser = NODE_CAPTURES[request.param]
    return request.param, slurm_node.parse_nodes_json(_capture(file), command)


def test_captured_nodes_say_their_slurm(captured):
    key, parsed = captured
    assert parsed["slurm"] == {"release": NODE_CAPTURES[key][2], "data_parser": NODE_CAPTURES[key][3]}


def test_captured_states_reasons_and_owners(captured):
    _key, parsed = captured
    nodes = parsed["nodes"]
    assert sorted(nodes) == sorted(SCENARIO)
    seen = {
        name: (slurm_node.slurm_state(node), node["reason"], slurm_node.ownership(node, PREFIX))
        for name, node in nodes.items()
    }
    assert seen == SCENARIO


def test_captured_drain_jobs_and_reason_users(captured):
    _key, parsed = captured
    nodes = parsed["nodes"]
    draining, drained, foreign, idle = nodes["node4"], nodes["node6"], nodes["node5"], nodes["node9"]
    assert (draining["drain"], draining["jobs_running"], draining["drained"]) == (True, True, False)
    assert (drained["drain"], drained["jobs_running"], drained["drained"]) == (True, False, True)
    assert foreign["drained"]
    assert foreign["reason_set_by_user"] == "root"
    assert slurm_node.decide_resume(foreign, PREFIX) == {"action": "none", "ours": False, "pre_existing": True}
    assert slurm_node.decide_resume(drained, PREFIX)["action"] == "resume"
    # 24.11 keeps "root" as the user of node9's cleared reason: no reason, no user
    assert (idle["reason"], idle["reason_set_by_user"], idle["drain"], idle["jobs_running"]) == (
        None,
        None,
        False,
        False,
    )
    assert nodes["node2"]["jobs_running"]
    assert nodes["node1"]["jobs_running"]
    assert nodes["node11"]["state_flags"] == ["not_responding"]


def test_captured_numbers_partitions_and_gres(captured):
    key, parsed = captured
    nodes = parsed["nodes"]
    for name, node in nodes.items():
        assert isinstance(node["boot_time"], int), name
        assert 1796318700 < node["boot_time"] < CAPTURED, name
        assert (node["gres"], node["gpus"]) == ("gpu:4", 4), name
        assert node["partitions"] == (["gpu", "long"] if name in ("node1", "node2", "node3") else ["gpu"]), name
    # 24.11 names the reservation; 22.05 only flags the node
    assert nodes["node1"]["reservation"] == (None if key == "sinfo-22.05" else "maint-node1")
    assert "reserved" in nodes["node1"]["state_flags"]
    assert all(node["reservation"] is None for name, node in nodes.items() if name != "node1")


def test_the_reservation_capture_agrees_with_the_nodes():
    reservations = json.loads(_capture("scontrol-reservation-24.11-lab.json"))["reservations"]
    active = {r["name"]: r["node_list"] for r in reservations if r["start_time"]["number"] <= CAPTURED}
    nodes = slurm_node.parse_nodes_json(_capture("scontrol-nodes-24.11-lab.json"))["nodes"]
    assert active == {"maint-node1": "node1"}
    assert {n["name"]: n["reservation"] for n in nodes.values() if n["reservation"]} == {"node1": "maint-node1"}


@pytest.mark.parametrize("key", sorted(JOB_CAPTURES))
def test_captured_jobs(key):
    file, parser, ten_minutes, thirty_minutes = JOB_CAPTURES[key]
    parsed = slurm_node.parse_squeue_json(_capture(file))
    assert parsed["slurm"]["data_parser"] == parser
    assert [(j["job_id"], j["state"], j["nodes"], j["end_time"], j["holds_nodes"]) for j in parsed["jobs"]] == [
        (1, ["running"], ["node2"], ten_minutes, True),
        (2, ["running"], ["node3", "node8"], None, True),  # no time limit: no known end
        (3, ["running"], ["node4"], ten_minutes, True),
        (4, ["running"], ["node1"], thirty_minutes, True),
        (5, ["pending"], [], None, False),  # pending on the drained node5: holds nothing
    ]
    assert slurm_node.job_ends(parsed["jobs"], CAPTURED) == {
        "node2": ten_minutes,
        "node3": None,
        "node8": None,
        "node4": ten_minutes,
        "node1": thirty_minutes,
    }


def test_a_job_without_a_time_limit_has_no_end_although_slurm_writes_one():
    # Slurm writes start + 365 days as the EndTime of a job without a time limit
    for file in ("squeue-24.11-lab.json", "squeue-22.05-lab.json"):
        raw = next(job for job in json.loads(_capture(file))["jobs"] if job["job_id"] == 2)
        end = raw["end_time"]["number"] if isinstance(raw["end_time"], dict) else raw["end_time"]
        start = raw["start_time"]["number"] if isinstance(raw["start_time"], dict) else raw["start_time"]
        assert end - start == 365 * 86400
    assert slurm_node.parse_squeue_json(_capture("squeue-24.11-lab.json"))["jobs"][1]["end_time"] is None


@pytest.mark.parametrize(
    ("nodes_key", "jobs_key"), [("scontrol-24.11", "squeue-24.11"), ("sinfo-22.05", "squeue-22.05")]
)
def test_survey_of_the_captured_clusters(nodes_key, jobs_key):
    file, command, _release, _parser = NODE_CAPTURES[nodes_key]
    nodes = slurm_node.parse_nodes_json(_capture(file), command)["nodes"]
    _file, _parser, ten_minutes, thirty_minutes = JOB_CAPTURES[jobs_key]
    jobs = slurm_node.parse_squeue_json(_capture(JOB_CAPTURES[jobs_key][0]))["jobs"]
    fleet = slurm_node.survey(nodes, slurm_node.job_ends(jobs, CAPTURED), sorted(SCENARIO), PREFIX)
    assert {n["name"]: (n["state"], n["job_end"]) for n in fleet} == {
        "node1": ("busy", thirty_minutes),
        "node2": ("busy", ten_minutes),
        "node3": ("busy", None),
        "node4": ("busy", ten_minutes),  # our drain, its job still running
        "node5": ("drained_by_others", None),
        "node6": ("idle", None),  # our drain, left by an aborted run
        "node7": ("down", None),
        "node8": ("busy", None),
        "node9": ("idle", None),
        "node11": ("down", None),
    }
    assert next(n for n in fleet if n["name"] == "node5")["reason"] == FOREIGN


def test_sinfo_json_of_24_11_groups_reasons_and_is_refused():
    data = json.loads(_capture("sinfo-24.11-lab.json"))
    # the captured grouping: node5 (someone else's drain) and node6 (ours) under node5's reason
    grouped = next(r for r in data["sinfo"] if r["nodes"]["nodes"] == ["node5", "node6"])
    assert grouped["reason"]["description"] == FOREIGN
    with pytest.raises(slurm_node.SlurmParseError) as raised:
        slurm_node.parse_sinfo_json(_capture("sinfo-24.11-lab.json"))
    message = str(raised.value)
    assert "sinfo --json output of Slurm 24.11.5 (data_parser v0.0.42)" in message
    assert "scontrol show nodes --json" in message


def test_json_unsupported_tells_22_05_scontrol():
    assert slurm_node.json_unsupported(_capture("scontrol-nodes-22.05-lab.stderr"))
    assert slurm_node.json_unsupported("", "sinfo: unknown option -- --json")
    # 24.11 asked for a data_parser it lacks: --json is known, the error is another
    assert not slurm_node.json_unsupported(
        "scontrol: error: load_plugins: unable to find plugin: data_parser/v0.0.39\n"
        "scontrol: error: application/json output not supported by data_parser/v0.0.42"
    )
    assert not slurm_node.json_unsupported("scontrol: error: Unable to contact slurm controller (connect failure)")


def test_argv():
    assert slurm_node.scontrol_nodes_json_argv("/usr/bin/scontrol") == ["/usr/bin/scontrol", "show", "nodes", "--json"]
    assert slurm_node.squeue_json_argv("/usr/bin/squeue") == ["/usr/bin/squeue", "--all", "--json"]


def _real_node(**changes):
    """node4 of the 24.11 capture with ``changes``: the wrapped-number cases Slurm writes elsewhere."""
    data = json.loads(_capture("scontrol-nodes-24.11-lab.json"))
    data["nodes"] = [dict(next(n for n in data["nodes"] if n["name"] == "node4"), **changes)]
    return json.dumps(data)


@pytest.mark.parametrize(
    ("boot_time", "expected"),
    [
        ({"set": True, "infinite": False, "number": 1796318813}, 1796318813),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": False, "infinite": True, "number": 0}, None),
        (1796318813, 1796318813),
        (None, None),
    ],
)
def test_wrapped_numbers_are_unwrapped(boot_time, expected):
    assert slurm_node.parse_nodes_json(_real_node(boot_time=boot_time))["nodes"]["node4"]["boot_time"] == expected


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"state": {"base": "MIXED"}}, r"state of node4 is \{'base': 'MIXED'\}, not a word"),
        ({"boot_time": "yesterday"}, "boot_time of node4 is 'yesterday', not a number"),
        ({"boot_time": {"set": True, "infinite": False, "number": "x"}}, "not a number"),
        ({"name": "", "hostname": ""}, "a node has no name"),
    ],
)
def test_unreadable_records_name_the_slurm_version(changes, message):
    with pytest.raises(slurm_node.SlurmParseError, match=message) as raised:
        slurm_node.parse_nodes_json(_real_node(**changes))
    assert "scontrol show nodes --json output of Slurm 24.11.5 (data_parser v0.0.42)" in str(raised.value)


def test_output_without_records_names_the_version_and_slurms_error():
    meta = json.loads(_capture("scontrol-nodes-24.11-lab.json"))["meta"]
    text = json.dumps({"meta": meta, "errors": [{"description": "Unable to contact slurm controller"}]})
    with pytest.raises(slurm_node.SlurmParseError) as raised:
        slurm_node.parse_nodes_json(text)
    assert str(raised.value) == (
        "cannot read scontrol show nodes --json output of Slurm 24.11.5 (data_parser v0.0.42): no 'nodes' list "
        "(scontrol show nodes --json of 23.02+, sinfo --json of 22.05); keys: errors, meta; "
        "Slurm says: Unable to contact slurm controller"
    )
    with pytest.raises(slurm_node.SlurmParseError, match="a Slurm that names no version in meta"):
        slurm_node.parse_nodes_json('{"nodes": [{"name": "x", "state": 7}]}')
    with pytest.raises(slurm_node.SlurmParseError, match=r"squeue --json output of Slurm 22\.05\.8 .*no 'jobs' list"):
        slurm_node.parse_squeue_json(_capture("sinfo-22.05-lab.json"))
    with pytest.raises(slurm_node.SlurmParseError, match="squeue --json did not print JSON"):
        slurm_node.parse_squeue_json("squeue: error: Invalid user")


def test_slurm_meta_of_each_form():
    assert slurm_node.slurm_meta({"meta": {"slurm": {"version": {"major": "23", "minor": "2", "micro": "7"}}}}) == {
        "release": "23.02.7",
        "data_parser": None,
    }
    assert slurm_node.slurm_meta({}) == {"release": None, "data_parser": None}
    assert slurm_node.describe({"release": "23.02.7", "data_parser": None}) == "Slurm 23.02.7"


def test_job_states_since_23_02_are_lists_with_flags():
    base = json.loads(_capture("squeue-24.11-lab.json"))
    job = next(j for j in base["jobs"] if j["job_id"] == 1)
    cases = [(["COMPLETED", "COMPLETING"], True), (["RUNNING", "CONFIGURING"], True), (["SUSPENDED"], False)]
    for state, holds in cases:
        base["jobs"] = [dict(job, job_state=state)]
        assert slurm_node.parse_squeue_json(json.dumps(base))["jobs"][0]["holds_nodes"] is holds, state
    # a job past its end still holds its node: its end is now
    base["jobs"] = [dict(job, job_state=["COMPLETED", "COMPLETING"])]
    jobs = slurm_node.parse_squeue_json(json.dumps(base))["jobs"]
    assert slurm_node.job_ends(jobs, 1796319800) == {"node2": 1796319800}


def test_a_job_ending_a_year_after_its_start_has_no_known_end():
    """Slurm's EndTime for a job without a time limit is its start plus one year, whatever a read says of the limit."""
    base = json.loads(_capture("squeue-24.11-lab.json"))
    job = next(j for j in base["jobs"] if j["job_id"] == 1)
    start = 1796280000
    limited = {"set": True, "infinite": False, "number": 60}
    for span, expected in ((365 * 86400, None), (3600, start + 3600)):
        end = {"set": True, "infinite": False, "number": start + span}
        base["jobs"] = [
            dict(job, job_state=["RUNNING"], time_limit=limited, end_time=end, start_time=dict(end, number=start))
        ]
        assert slurm_node.parse_squeue_json(json.dumps(base))["jobs"][0]["end_time"] == expected
