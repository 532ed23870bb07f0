"""The upgrade_window strategy's host loop hook at fleet size: what it looks up on every pass of the loop.

The free strategy asks for the hosts left on every pass; the window must not look up every host's next
task (a copy of its iterator state) on each of them, only the hosts whose state changed since.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from ansible.executor.play_iterator import HostState, IteratingStates
from ansible.plugins.strategy.free import StrategyModule as FreeStrategyModule
from ansible_collections.gpuops.cluster.plugins.strategy.upgrade_window import StrategyModule, state_key

SLOT = SimpleNamespace(action="gpuops.cluster.upgrade_slot", args={})
WORK = SimpleNamespace(action="ansible.builtin.wait_for", args={})


class Iterator:
    """The PlayIterator calls the hook makes; counts the look-ups of a host's next task."""

    def __init__(self, tasks: dict):
        self.tasks = dict(tasks)
        self.states = {name: HostState(blocks=[]) for name in tasks}
        self.peeks = Counter()

    def get_state_for_host(self, name):
        return self.states[name]

    def get_next_task_for_host(self, host, peek=False):
        assert peek, "the hook only looks"
        self.peeks[host.name] += 1
        return self.states[host.name].copy(), self.tasks[host.name]

    def is_failed(self, host):
        return False


@pytest.fixture(name="window")
def fixture_window(monkeypatch):
    """The strategy without a task queue manager: hosts n1..n5, the window admitting nobody."""

    def build(tasks: dict):
        monkeypatch.setattr(FreeStrategyModule, "__init__", lambda self, tqm: None)
        strategy = StrategyModule(None)
        hosts = {name: SimpleNamespace(name=name) for name in tasks}
        strategy._hosts_cache = list(tasks)
        strategy._tqm = SimpleNamespace(_unreachable_hosts={})
        strategy._inventory = SimpleNamespace(hosts=hosts, get_host=hosts.get)
        strategy._blocked_hosts = {}
        strategy.waited = []
        strategy._admit = lambda iterator, waiting: strategy.waited.append([h.name for h, _t in waiting]) or []
        return strategy, Iterator(tasks)

    return build


NAMES = ["n1", "n2", "n3", "n4", "n5"]


def test_each_host_is_looked_up_once_until_its_state_changes(window):
    strategy, iterator = window(dict.fromkeys(NAMES, SLOT))
    for _unused in range(3):
        assert strategy.get_hosts_left(iterator) == []
    assert iterator.peeks == Counter(dict.fromkeys(NAMES, 1))
    assert strategy.waited == [NAMES] * 3

    iterator.states["n2"] = iterator.states["n2"].copy()  # advanced, failed or given an include: a new state
    iterator.states["n3"].run_state = IteratingStates.COMPLETE  # end_play: changed in place
    iterator.tasks["n3"] = None
    assert [host.name for host in strategy.get_hosts_left(iterator)] == ["n3"]  # done: the one left to end the loop
    assert iterator.peeks == Counter({"n1": 1, "n2": 2, "n3": 2, "n4": 1, "n5": 1})
    assert strategy.waited[-1] == ["n1", "n2", "n4", "n5"]


def test_a_host_running_handlers_is_looked_up_on_every_pass(window):
    strategy, iterator = window(dict.fromkeys(NAMES, SLOT))
    iterator.states["n4"].run_state = IteratingStates.HANDLERS
    for _unused in range(3):
        strategy.get_hosts_left(iterator)
    assert iterator.peeks["n4"] == 3
    assert iterator.peeks["n1"] == 1


def test_hosts_done_with_the_play_are_hidden_but_one_stays_to_end_the_loop(window):
    strategy, iterator = window({"n1": None, "n2": WORK, "n3": None, "n4": SLOT})
    assert [host.name for host in strategy.get_hosts_left(iterator)] == ["n2"]
    iterator.tasks["n2"] = None
    iterator.states["n2"] = iterator.states["n2"].copy()
    assert [host.name for host in strategy.get_hosts_left(iterator)] == ["n1"]


def test_a_blocked_host_is_shown_without_a_look_up(window):
    strategy, iterator = window(dict.fromkeys(NAMES, WORK))
    strategy._blocked_hosts["n1"] = True
    assert [host.name for host in strategy.get_hosts_left(iterator)] == NAMES
    assert "n1" not in iterator.peeks


def test_the_state_key_follows_in_place_changes_down_the_child_states():
    state = HostState(blocks=[])
    state.run_state = IteratingStates.TASKS
    state.tasks_child_state = HostState(blocks=[])
    before = state_key(state)
    state.tasks_child_state.fail_state |= 2
    assert state_key(state) != before
    state.tasks_child_state.run_state = IteratingStates.HANDLERS
    assert state_key(state) is None
