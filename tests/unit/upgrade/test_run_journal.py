"""The run's journal: written as decisions happen, replayed by a re-run and by the report."""

from __future__ import annotations

import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import fleet_nodes, run_journal, window_plan
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.run_journal import entry, replay

TARGET = 'gpu_nodes {"driver": "580"}'


def crashed_run():
    """Canary a upgraded; b and c in flight when the controller died; d deferred; a read of the fleet."""
    return [
        entry("start", 100, run_id="r1", target=TARGET, resumed_from=None, resumed=[]),
        entry("admit", 101, node="a", canary=True, resume=False),
        entry("release", 150, node="a", ok=True, deferred=False, halt=False),
        entry("refresh", 151, ok=True, took=0.8, why="release", changes={"jobs_ended": ["c"]}),
        entry("admit", 152, node="b", canary=False, resume=False),
        entry("admit", 152, node="c", canary=False, resume=False),
        entry("defer", 153, node="d", why="its job ends at ..."),
    ]


def test_replay_finds_the_nodes_left_mid_upgrade():
    state = replay(crashed_run())
    assert state["run_id"] == "r1"
    assert state["in_flight"] == ["b", "c"]
    assert state["done"] == ["a"]
    assert state["deferred"] == {"d": "its job ends at ..."}
    assert state["ended_at"] is None  # killed: no end
    assert state["timeline"] == [("a", 101, 150), ("b", 152, None), ("c", 152, None)]
    assert run_journal.to_resume(state) == ["b", "c"]
    assert [read["why"] for read in state["refreshes"]] == ["release"]
    assert state["events"] == {"start": 1, "admit": 3, "release": 1, "refresh": 1, "defer": 1}


def test_replay_spans_each_drain_ahead_until_admitted_or_given_back():
    entries = [
        *crashed_run(),
        entry("drain_ahead", 154, node="d", ok=True, job_end=900),
        entry("drain_ahead", 155, node="e", ok=False, why="scontrol refused"),
        entry("admit", 170, node="d", canary=False, resume=False),
        entry("drain_ahead", 171, node="e", ok=True, job_end=950),
        entry("undrain", 180, node="e", ok=True),
        entry("drain_ahead", 190, node="f", ok=True, job_end=990),
    ]
    state = replay(entries)
    # a refused drain is no span; the one still drained when the journal stops stays open
    assert state["ahead_spans"] == [("d", 154, 170), ("e", 171, 180), ("f", 190, None)]
    assert state["drained_ahead"] == ["f"]


def test_a_failed_node_is_resumed_and_a_halt_is_kept():
    entries = [
        *crashed_run(),
        entry("release", 200, node="b", ok=False, deferred=False, halt=True),
        entry("halt", 200, node="b", why="a node failed"),
        entry("release", 210, node="c", ok=True, deferred=False, halt=True),
        entry("end", 211, done=["a", "c"], failed=["b"], deferred=["d"], halted=True),
    ]
    state = replay(entries)
    assert state["in_flight"] == []
    assert state["failed"] == ["b"]
    assert state["halted"] == {"at": 200, "node": "b", "why": "a node failed"}
    assert run_journal.to_resume(state) == ["b"]
    assert state["ended_at"] == 211


def test_a_deferred_release_is_in_service_not_resumed():
    entries = [*crashed_run(), entry("release", 160, node="b", ok=True, deferred=True, halt=False)]
    state = replay(entries)
    assert "b" in state["deferred"]
    assert "b" not in state["done"]
    assert run_journal.to_resume(state) == ["c"]


def test_a_torn_last_line_is_left_out_and_a_bad_line_inside_is_refused():
    text = "".join(run_journal.encode(item) for item in crashed_run())
    assert len(run_journal.parse(text + '{"event": "admit", "at": 15')) == len(crashed_run())
    with pytest.raises(ValueError, match="line 2, is not a JSON entry"):
        run_journal.parse(text.replace("\n", "\nnot json\n", 1))
    with pytest.raises(ValueError, match="is not a journal entry"):
        run_journal.parse('{"event": "reboot", "at": 1}\n' + text)


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError, match="journal event 'restart'"):
        entry("restart", 1)


def test_the_writer_appends_one_line_per_entry_mode_0644(tmp_path):
    path = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    old = os.umask(0o077)
    try:
        writer = run_journal.JournalWriter(str(path))
    finally:
        os.umask(old)
    for item in crashed_run():
        writer.append(item)
    writer.close()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines][:3] == ["start", "admit", "release"]
    assert run_journal.read(str(path)) == crashed_run()


def test_a_re_run_finds_the_newest_journal_of_the_same_target(tmp_path):
    def journal(name, target, mtime):
        path = tmp_path / name
        path.write_text(run_journal.encode(entry("start", 1, run_id=name, target=target)))
        os.utime(path, (mtime, mtime))
        return str(path)

    older = journal("gpuops-upgrade-a.journal.jsonl", TARGET, 100)
    newer = journal("gpuops-upgrade-b.journal.jsonl", TARGET, 200)
    journal("gpuops-upgrade-c.journal.jsonl", 'gpu_nodes {"driver": "570"}', 300)  # another target
    (tmp_path / "gpuops-upgrade-d.journal.jsonl").write_text("garbage\n")
    (tmp_path / "notes.txt").write_text("x")
    own = str(tmp_path / "gpuops-upgrade-e.journal.jsonl")
    assert run_journal.find_previous(own, TARGET) == newer
    assert run_journal.find_previous(newer, TARGET) == older  # its own journal is never the one it continues
    assert run_journal.find_previous(own, "other") is None
    assert run_journal.find_previous(str(tmp_path / "missing" / "x.journal.jsonl"), TARGET) is None


# A re-run: the nodes left mid-upgrade count as out of service from the start and go first.


def test_nodes_to_resume_count_as_out_and_go_first_whatever_the_rules():
    fleet = [{"name": name, "domains": {"rack": "r1"}} for name in ("a", "b", "c", "d", "e")]
    fleet[2]["resume"] = True
    fleet[3]["resume"] = True
    settings = {"max_unavailable": 2, "per_domain": {"rack": 1}}
    window = window_plan.Window(fleet, settings, now=0)
    assert window.resumed == ["c", "d"]
    assert window.remaining[:2] == ["c", "d"]
    assert "c" not in window.canaries
    # while they are out, the rest waits for them (they count)
    assert set(window.blocked) == {"a", "b", "e"}
    assert window.admit(0) == ["c", "d"]  # out already: admitted although the rack allows one
    assert window.admit(0) == []  # nothing more while they are out
    window.finish("c", True)
    assert window.admit(1) == []  # the canary goes alone
    window.finish("d", True)
    (canary,) = window.admit(2)
    assert canary in ("a", "b", "e")


def test_the_plan_says_which_nodes_it_resumes():
    fleet = [{"name": "a"}, {"name": "b", "resume": True}]
    preview = window_plan.plan(fleet, {"max_unavailable": 1}, now=0)
    assert preview["resumed"] == ["b"]
    assert preview["first_window"] == ["b"]
    assert "resumed first, out of service already (left by an earlier run): b" in window_plan.describe(preview)


def test_a_node_to_upgrade_drained_by_us_is_resumed_a_done_one_is_not():
    hosts = [
        {"host": "gpu01", "done": False, "scheduler_name": "node01"},
        {"host": "gpu02", "done": True, "scheduler_name": "node02"},
        {"host": "gpu03", "done": False, "scheduler_name": "node03"},
    ]
    ours = {"state": "idle", "job_end": None, "partitions": ["gpu"], "gpus": 8, "owner": "ours"}
    slurm = [dict(ours, name="node01"), dict(ours, name="node02"), dict(ours, name="node03", owner="none")]
    nodes = fleet_nodes.window_nodes(hosts, slurm)
    assert [node.get("resume", False) for node in nodes] == [True, False, False]


def test_the_report_takes_its_timeline_and_reads_from_the_journal():
    text = "".join(run_journal.encode(item) for item in crashed_run()) + run_journal.encode(
        entry("release", 170, node="b", ok=True, deferred=False, halt=False)
    )
    journal = upgrade.upgrade_journal(text, path="/tmp/j.journal.jsonl")
    assert journal["path"] == "/tmp/j.journal.jsonl"
    plan = {"order": ["a", "b", "c"], "canary": ["a"]}
    audit = upgrade.upgrade_report([], "r1", plan, "s", "f", journal=journal)
    assert audit["window"]["timeline"] == [["a", 101.0, 150.0], ["b", 152.0, 170.0]]
    assert audit["refreshes"]["count"] == 1
    assert audit["journal"]["in_flight"] == ["c"]
    assert "fleet read again 1 time(s) during the run" in audit["summary"]
    with pytest.raises(AnsibleFilterError, match=r"upgrade_journal: .*line 1"):
        upgrade.upgrade_journal("nonsense\n{}")
