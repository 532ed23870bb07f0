"""The run's journal: written as decisions happen, replayed by a re-run and by the report."""

from __future__ import annotations

import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    fleet_nodes,
    run_journal,
    upgrade_settings,
    window_open,
    window_preview,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.run_journal import entry, replay
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.run_state import RunState
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window

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

    journal("gpuops-upgrade-a.journal.jsonl", TARGET, 100)
    newer = journal("gpuops-upgrade-b.journal.jsonl", TARGET, 200)
    journal("gpuops-upgrade-c.journal.jsonl", 'gpu_nodes {"driver": "570"}', 300)  # another target
    (tmp_path / "gpuops-upgrade-d.journal.jsonl").write_text("garbage\n")
    (tmp_path / "notes.txt").write_text("x")
    own = str(tmp_path / "gpuops-upgrade-e.journal.jsonl")
    assert run_journal.find_previous(own, TARGET) == newer
    # a re-run writing to the same path (a fixed journal path, a reused run id) continues its own journal
    assert run_journal.find_previous(newer, TARGET) == newer
    # its own journal of another target is not continued: the newest of this target beside it is
    assert run_journal.find_previous(str(tmp_path / "gpuops-upgrade-c.journal.jsonl"), TARGET) == newer
    assert run_journal.find_previous(own, "other") is None
    assert run_journal.find_previous(str(tmp_path / "missing" / "x.journal.jsonl"), TARGET) is None


def test_the_writer_refuses_a_symlink_and_leaves_its_target_alone(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("secret\n")
    target.chmod(0o600)
    link = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic links"):
        run_journal.JournalWriter(str(link))
    assert target.read_text() == "secret\n"
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_the_writer_keeps_the_mode_of_a_journal_it_did_not_create(tmp_path):
    path = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    path.write_text(run_journal.encode(crashed_run()[0]))
    path.chmod(0o600)
    writer = run_journal.JournalWriter(str(path))
    writer.append(crashed_run()[1])
    writer.close()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert run_journal.read(str(path)) == crashed_run()[:2]


def test_the_writer_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.journal.jsonl")
    with pytest.raises(OSError, match="not a regular file"):
        run_journal.JournalWriter(str(tmp_path / "fifo.journal.jsonl"))


@pytest.mark.parametrize("chunk", [7, 65536])
def test_a_torn_last_line_is_cut_before_the_re_run_appends(tmp_path, chunk, monkeypatch):
    """The controller died while writing an entry: the re-run's first entry starts on a line of its own."""
    path = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    torn = '{"event": "admit", "at": 15'
    path.write_text("".join(run_journal.encode(item) for item in crashed_run()) + torn)
    monkeypatch.setattr(run_journal, "repair", lambda fd, _chunk=chunk, real=run_journal.repair: real(fd, _chunk))
    writer = run_journal.JournalWriter(str(path))
    assert writer.torn == len(torn)
    restart = entry("start", 200, run_id="r1", target=TARGET, resumed_from=str(path), resumed=["b", "c"])
    writer.append(restart)
    writer.close()
    assert run_journal.read(str(path)) == [*crashed_run(), restart]
    assert run_journal.parse(path.read_text()) == [*crashed_run(), restart]


def test_a_journal_of_one_torn_line_is_emptied(tmp_path):
    path = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    path.write_text('{"event": "sta')
    writer = run_journal.JournalWriter(str(path))
    writer.close()
    assert path.read_text() == ""


def test_a_re_run_on_the_same_journal_resumes_from_it_and_reads_one_operation():
    """The run of another target before it is left out; a node in flight at the crash is out until released."""
    other = [entry("start", 1, run_id="r0", target="other"), entry("admit", 2, node="a", canary=True, resume=False)]
    rerun = [
        entry("start", 200, run_id="r1", target=TARGET, resumed_from="same", resumed=["b", "c"]),
        entry("admit", 201, node="b", canary=False, resume=True),
        entry("admit", 201, node="c", canary=False, resume=True),
        entry("release", 260, node="b", ok=True, deferred=False, halt=False),
        entry("admit", 261, node="d", canary=False, resume=False),
        entry("release", 300, node="d", ok=True, deferred=False, halt=False),
    ]
    replayed = replay(other + crashed_run() + rerun)
    assert replayed["run_id"] == "r1"
    assert replayed["started_at"] == 200
    assert replayed["in_flight"] == ["c"]
    assert replayed["done"] == ["a", "b", "d"]
    assert replayed["deferred"] == {}
    assert ("b", 152, 260) in replayed["timeline"]  # one span: out of service from the crashed run's admission
    assert [span for span in replayed["timeline"] if span[0] == "c"] == [("c", 152, None)]
    assert run_journal.to_resume(replayed) == ["c"]


def test_the_operation_keeps_the_first_run_s_deadline():
    """A run killed while it waited for a job, resumed by the same command: the resumed run keeps the deadline."""
    first = [entry("start", 100, run_id="r1", target=TARGET, resumed_from=None, resumed=[], deadline=90000)]
    first += crashed_run()[1:]
    again = [entry("start", 200, run_id="r1", target=TARGET, resumed_from="same", resumed=["b"], deadline=95000)]
    assert replay(first)["deadline"] == 90000
    assert replay(first + again)["deadline"] == 90000
    assert replay(crashed_run())["deadline"] is None  # a journal of a run before deadlines: the window's default
    # a run that ended is not continued: the next run of the same journal has its own deadline
    ended = [*first, entry("end", 150, done=["a"], failed=[], deferred=["d"], halted=False)]
    replayed = replay(ended + again)
    assert replayed["deadline"] == 95000
    assert replayed["ended_at"] is None


# A re-run: the nodes left mid-upgrade count as out of service from the start and go first.


def test_nodes_to_resume_count_as_out_and_go_first_whatever_the_rules():
    fleet = [{"name": name, "domains": {"rack": "r1"}} for name in ("a", "b", "c", "d", "e")]
    fleet[2]["resume"] = True
    fleet[3]["resume"] = True
    settings = {"max_unavailable": 2, "per_domain": {"rack": 1}}
    window = Window(fleet, settings, now=0)
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
    preview = window_preview.plan(Window(fleet, {"max_unavailable": 1}, 0), 0)
    assert preview["resumed"] == ["b"]
    assert preview["first_window"] == ["b"]
    assert "resumed first, out of service already (left by an earlier run): b" in window_preview.describe(preview)


def test_a_node_drained_by_us_is_resumed_even_when_the_survey_found_it_done():
    """gpu02 is on the target (done by the survey) but still carries our drain: a controller lost before its
    give-back. It is not done: it counts out of service against max_unavailable and goes first, to be gated and
    given back; gpu03, in service, is Slurm's word."""
    hosts = [
        {"host": "gpu01", "done": False, "scheduler_name": "node01"},
        {"host": "gpu02", "done": True, "scheduler_name": "node02"},
        {"host": "gpu03", "done": False, "scheduler_name": "node03"},
        {"host": "gpu04", "done": True, "scheduler_name": "node04"},
    ]
    ours = {"state": "idle", "job_end": None, "partitions": ["gpu"], "gpus": 8, "owner": "ours"}
    slurm = [
        dict(ours, name="node01"),
        dict(ours, name="node02"),
        dict(ours, name="node03", owner="none"),
        dict(ours, name="node04", owner="none"),
    ]
    nodes = fleet_nodes.window_nodes(hosts, slurm)
    assert [node.get("resume", False) for node in nodes] == [True, True, False, False]
    assert [node["done"] for node in nodes] == [False, False, False, True]
    window = Window(nodes, {"max_unavailable": 2}, now=0)
    assert window.resumed == ["gpu01", "gpu02"]
    assert window.skipped == ["gpu04"]
    assert window.admit(0) == ["gpu01", "gpu02"]
    assert window.admit(0) == []  # both out: gpu03 waits, max_unavailable 2 holds with them counted
    window.finish("gpu02", True)
    window.finish("gpu01", True)
    assert window.admit(1) == ["gpu03"]


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


def test_the_window_continues_its_own_journal_at_a_fixed_path(tmp_path):
    """A fixed gpuops_upgrade_journal_path (or a reused run id): the re-run resumes the nodes its own journal left
    in flight, appends to it after the torn line is cut, and the journal reads back whole."""
    path = tmp_path / "gpuops-upgrade.journal.jsonl"
    path.write_text("".join(run_journal.encode(item) for item in crashed_run()) + '{"event": "rel')
    state = RunState()
    journal = {"path": str(path), "run_id": "r1", "target": TARGET, "resume": "auto"}
    nodes, resume = window_open.continued(journal, [{"name": name} for name in "abcde"])
    state.open_journal(journal)
    assert resume["resumed_from"] == str(path)
    assert [node["name"] for node in nodes if node.get("resume")] == ["b", "c"]
    state.journal.append(entry("start", 200, run_id="r1", target=TARGET, resumed_from=str(path), resumed=["b"]))
    state.journal.close()
    assert run_journal.read(str(path))[-1]["event"] == "start"
    assert replay(run_journal.read(str(path)))["in_flight"] == ["b", "c"]


def test_replay_keeps_each_nodes_record_as_its_last_release_built_it():
    upgraded = {"host": "b", "status": "upgraded"}
    entries = [
        run_journal.entry("start", 1, run_id="r1", target="t"),
        run_journal.entry("admit", 2, node="a"),
        run_journal.entry("release", 3, node="a", ok=False, record={"host": "a", "status": "failed"}),
        run_journal.entry("admit", 4, node="b"),
        run_journal.entry("release", 5, node="b", ok=True, record=upgraded),
        # the run continuing it: a taken first and upgraded this time
        run_journal.entry("start", 6, run_id="r2", target="t", resumed_from="r1", resumed=["a"]),
        run_journal.entry("admit", 7, node="a"),
        run_journal.entry("release", 8, node="a", ok=True, record={"host": "a", "status": "upgraded"}),
        run_journal.entry("release", 9, node="c", ok=True),  # a release without a record names none
    ]
    records = run_journal.replay(entries)["records"]
    assert records == {"b": upgraded, "a": {"host": "a", "status": "upgraded"}}
    assert list(records) == ["b", "a"]  # in the order released


def test_the_run_state_journals_the_plans_report_and_each_nodes_record_and_slot(tmp_path):
    """The journal is the run's one record: its start carries the plan's part of the report; a release, the node's
    record and its slot (without the reads of the fleet, which are refresh entries); a node not admitted, the record
    its slot task built. The report built from it alone names both."""
    path = tmp_path / "r1.journal.jsonl"
    payload = {
        "run_id": "r1",
        "started_at": "2026-12-05T10:00:00+00:00",
        "plan": {"order": ["a", "b"], "canary": ["a"]},
        "window": {"nodes": [{"name": "a"}, {"name": "b"}], "settings": {"max_unavailable": 1}},
        "settings": {"drain": "none"},
        "survey": [],
    }
    state = RunState()
    args = {
        "nodes": [{"name": "a", "canary": True}, {"name": "b"}],
        "settings": {"max_unavailable": 1},
        "journal": {"path": str(path), "run_id": "r1", "target": TARGET, "resume": "none"},
        "report": payload,
    }
    assert state.open(args, 100)
    state.take_admitted(["a"], 101)
    state.verdict("a")
    upgraded = {"host": "a", "status": "upgraded", "reason": "on the target stack, gated"}
    state.records["a"]["refreshes"] = [{"at": 102, "ok": True}]
    released = state.release("a", True, None, node=upgraded)
    assert released["refreshes"] == [{"at": 102, "ok": True}]  # the host's record keeps them
    deferred = {"host": "b", "status": "deferred", "reason": "deferred: its job ends later"}
    state.not_admitted("b", deferred, {"state": "acquired", "admitted": False, "refreshes": [{"at": 102}]})
    state.not_admitted("b", None, {})  # a slot task that built no record journals nothing
    state.end()
    entries = run_journal.read(str(path))
    assert [item["event"] for item in entries] == ["start", "admit", "release", "not_admitted", "end"]
    assert entries[0]["report"] == payload
    assert entries[2]["record"] == upgraded
    assert entries[2]["slot"]["state"] == "released"
    assert "refreshes" not in entries[2]["slot"]
    assert entries[3]["record"] == deferred
    assert entries[3]["slot"] == {"state": "acquired", "admitted": False}
    text = path.read_text()
    audit = upgrade.upgrade_run_report(payload, "2026-12-05T10:05:00+00:00", text, str(path))
    assert [(node["host"], node["status"]) for node in audit["nodes"]] == [("a", "upgraded"), ("b", "deferred")]
    assert audit["result"] == "partial"
    assert audit["window"]["timeline"] == [["a", 101.0, entries[2]["at"]]]
    # a journal another run wrote last (this run's nodes never reached the window) is not this run's
    other = dict(
        payload,
        started_at="2026-12-05T11:00:00+00:00",
        plan={"order": [], "canary": []},
        survey=[{"host": "a", "status": "skipped"}, {"host": "b", "status": "skipped"}],
    )
    alone = upgrade.upgrade_run_report(other, "2026-12-05T11:05:00+00:00", text, str(path))
    assert [(node["host"], node["status"]) for node in alone["nodes"]] == [("a", "skipped"), ("b", "skipped")]
    assert alone["journal"] is None


def test_the_plan_previews_the_window_the_strategy_opens_for_a_run_it_continues(tmp_path):
    """A controller lost with b and c mid-upgrade (adapter none: no scheduler says so) and the run's deadline set:
    the plan of the re-run, made before anything moves, shows the Window the strategy then opens from the plan's
    value - b and c resumed first and out of service, the lost run's deadline kept, the same order and canary -
    because both open it by window_open.window."""
    path = tmp_path / "gpuops-upgrade-r1.journal.jsonl"
    lost = [entry("start", 100, run_id="r1", target=TARGET, resumed_from=None, resumed=[], deadline=1_900_000_000)]
    path.write_text("".join(run_journal.encode(item) for item in lost + crashed_run()[1:]))
    hosts = [{"host": name, "done": name == "a", "domains": {}} for name in "abcde"]
    run = upgrade_settings.settings({"gpuops_upgrade_max_unavailable": 2})
    at = 1_796_280_000.0
    plan = upgrade.upgrade_plan(hosts, run, run_id="r1", journal_path=str(path), journal_target=TARGET, now=at)
    preview = plan["window"]
    assert preview["resumed"] == ["b", "c"]
    assert preview["first_window"] == ["b", "c"]
    assert preview["deadline"] == 1_900_000_000
    assert preview["continues"] == {"journal": str(path), "deadline": 1_900_000_000}
    assert "continues the run its journal %s left (its deadline kept: 2030-03-17T17:46:40Z)" % path in preview["lines"]

    state = RunState()
    assert state.open(plan["run"], at)
    window = state.window
    assert window.resumed == preview["resumed"]
    assert window.remaining == preview["order"]
    assert list(window.canaries) == preview["canary"]
    assert window.deadline == preview["deadline"]
    assert window.admit(at) == preview["first_window"]
    state.journal.close()
    assert run_journal.read(str(path))[-1]["resumed_from"] == str(path)  # the strategy continued the same journal


def test_a_journal_to_resume_that_cannot_be_read_stops_the_plan_before_anything_moves(tmp_path):
    run = upgrade_settings.settings({"gpuops_upgrade_resume_journal": str(tmp_path / "missing.jsonl")})
    hosts = [{"host": "a", "done": False, "domains": {}}]
    with pytest.raises(AnsibleFilterError, match=r"upgrade_window: the journal to resume from, .*missing.jsonl, can"):
        upgrade.upgrade_plan(hosts, run, journal_path=str(tmp_path / "j.jsonl"), now=0)
