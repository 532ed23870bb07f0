"""The upgrade_window strategy gives a node drained ahead back to its scheduler before its host passes its slot.

A host passing its slot not admitted (deferred, halted, blocked) while its node is drained ahead is held at its
slot until the give-back has run: with no worker free for it, it waits for one; the run never moves on, nor ends,
with the node drained.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible.plugins.strategy.free import StrategyModule as FreeStrategyModule
from ansible_collections.gpuops.cluster.plugins.strategy.upgrade_window import StrategyModule


@pytest.fixture(name="strategy")
def fixture_strategy(monkeypatch):
    """The strategy without a task queue manager; n3 drained ahead; the workers as ``free`` says; queued tasks
    recorded instead of run."""
    monkeypatch.setattr(FreeStrategyModule, "__init__", lambda self, tqm: None)
    strategy = StrategyModule(None)
    strategy._blocked_hosts = {}
    strategy._run.drained_ahead.add("n3")
    strategy.free = False
    strategy.queued = []
    strategy.handed = {}

    def a_fork_is_free(wait=False):
        return strategy.free

    def queue_ahead(iterator, host, action, wait=False):
        if strategy._blocked_hosts.get(host.name) or not strategy._a_fork_is_free(wait=wait):
            return False
        strategy._blocked_hosts[host.name] = True
        strategy.queued.append((host.name, action, wait))
        return True

    strategy._a_fork_is_free = a_fork_is_free
    strategy._queue_ahead = queue_ahead
    strategy._hand = lambda host, record: strategy.handed.__setitem__(host.name, record)
    return strategy


N3 = SimpleNamespace(name="n3")
N4 = SimpleNamespace(name="n4")


def test_a_host_drained_ahead_waits_at_its_slot_until_a_worker_gives_its_node_back(strategy):
    # no worker free: n3 does not pass (its node is still drained); n4, not drained ahead, passes
    assert strategy._hold_drained_ahead(None, [N3, N4]) == [N4]
    assert strategy._hold_drained_ahead(None, [N3]) == []
    assert strategy.queued == []
    # a worker is free on a later pass: the give-back is queued (without the first pass's wait), n3 still waits
    strategy.free = True
    assert strategy._hold_drained_ahead(None, [N3]) == []
    assert strategy.queued == [("n3", "resume", False)]
    # its give-back came back: n3 passes
    strategy._blocked_hosts.pop("n3")
    strategy._run.ahead_done("n3", "resume", {"changed": True})
    assert strategy._hold_drained_ahead(None, [N3]) == [N3]


def test_a_give_back_that_failed_lets_the_host_pass_and_its_record_says_the_node_is_still_drained(strategy):
    strategy.free = True
    assert strategy._hold_drained_ahead(None, [N3]) == []
    strategy._blocked_hosts.pop("n3")
    strategy._run.window = SimpleNamespace(
        nodes={"n3": SimpleNamespace(job_end=None)},
        in_flight=[],
        canaries=[],
        settings=SimpleNamespace(max_job_wait=3600),
    )
    strategy._run.ahead_done("n3", "resume", {"failed": True, "msg": "scontrol: Invalid node name"})
    assert strategy._hold_drained_ahead(None, [N3]) == [N3]
    record = strategy._run.record("n3", False, "deferred: its job ends at 2026-12-05 10:00 UTC")
    assert record["drained_ahead"] is True
    assert record["reason"].endswith("still drained ahead: its give-back failed: scontrol: Invalid node name")


def test_a_node_drained_ahead_is_given_back_when_the_window_cannot_be_built(monkeypatch):
    """The window's nodes say n3 was drained ahead by a crashed run, then a bad setting breaks the window: n3's host
    passes its slot not admitted only after its give-back, queued in the slot task's place (before, the strategy had
    no slot task and failed queueing it, the node left drained)."""
    monkeypatch.setattr(FreeStrategyModule, "__init__", lambda self, tqm: None)
    strategy = StrategyModule(None)
    strategy._blocked_hosts = {}
    strategy._a_fork_is_free = lambda wait=False: True
    strategy._hand = lambda host, record: None
    queued = []

    def queue_own_task(iterator, host, name, action, args, where):
        queued.append((host.name, action, args["state"], strategy._slot_task))
        strategy._blocked_hosts[host.name] = True
        return SimpleNamespace(_uuid="give-back")

    strategy._queue_own_task = queue_own_task
    names = {"n3": "n3", "n4": "n4"}
    strategy._play_window = lambda iterator: {
        "nodes": [{"name": "n3", "drained_ahead": True}, {"name": "n4"}],
        "settings": {"max_unavailable": 1, "drain_ahead": 1},
        "drain_ahead": {"delegate_to": "slurmctl", "names": names, "run_id": "r1"},
        "refresh": {"delegate_to": "slurmctl"},  # no names: the window cannot be built
        "journal": None,
    }
    slot = SimpleNamespace(action="gpuops.cluster.upgrade_slot", args={"state": "acquired"})
    assert strategy._admit(None, [(N3, slot), (N4, slot)]) == [N4]
    assert strategy._run.broken.startswith("refresh must be")
    assert queued == [("n3", "gpuops.cluster.slurm_drain", "resumed", slot)]
