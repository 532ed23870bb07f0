"""The wave planner: unit cases and properties (every node once, canary first, never over max_unavailable)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import wave_plan
from hypothesis import given, settings
from hypothesis import strategies as st

FLEET = ["n%02d" % i for i in range(1, 21)]


def hosts_of(result):
    return [wave["hosts"] for wave in result["waves"]]


def test_issue_example_on_twenty_nodes():
    result = wave_plan.plan(FLEET, ["n05"], [1, "10%", "25%", "100%"], max_unavailable="25%")
    # canary alone; then 1, 10% of 20 = 2, 25% of 20 = 5, then 100% split at max_unavailable 5
    assert [len(w) for w in hosts_of(result)] == [1, 1, 2, 5, 5, 5, 1]
    assert result["waves"][0] == {"index": 0, "name": "canary", "canary": True, "hosts": ["n05"]}
    assert [w["name"] for w in result["waves"][1:3]] == ["wave 1", "wave 2"]
    assert result["hosts"] == ["n05"] + [h for h in FLEET if h != "n05"]
    assert result["batch_sizes"] == [1, 1, 2, 5, 5, 5, 1]
    assert result["max_unavailable"] == 5


def test_without_canary_group_the_first_node_is_the_canary():
    result = wave_plan.plan(["a", "b", "c", "d"], [], ["50%"], max_unavailable=2)
    assert hosts_of(result) == [["a"], ["b", "c"], ["d"]]
    assert result["canary"] == ["a"]


def test_percentages_round_down_with_a_minimum_of_one():
    assert wave_plan.size_of("10%", 4) == 1
    assert wave_plan.size_of("10%", 25) == 2
    assert wave_plan.size_of("33%", 3) == 1
    assert wave_plan.size_of("100%", 7) == 7
    assert wave_plan.size_of("12.5%", 16) == 2
    assert wave_plan.size_of(" 3 ", 100) == 3


def test_skipped_nodes_are_left_out_but_sizes_stay_those_of_the_whole_fleet():
    first = wave_plan.plan(FLEET, ["n01"], ["25%"], max_unavailable=10)
    rerun = wave_plan.plan(FLEET, ["n01"], ["25%"], max_unavailable=10, skip=["n01", "n02", "n03"])
    assert [len(w) for w in hosts_of(first)] == [1, 5, 5, 5, 4]
    # the canary passed before: no canary wave, waves of 25% of 20 over the 17 left
    assert [len(w) for w in hosts_of(rerun)] == [5, 5, 5, 2]
    assert rerun["canary"] == []
    assert rerun["skipped"] == ["n01", "n02", "n03"]
    assert not any(w["canary"] for w in rerun["waves"])


def test_first_node_skipped_without_canary_group_makes_the_next_one_canary():
    result = wave_plan.plan(["a", "b", "c"], None, ["100%"], skip=["a"])
    assert hosts_of(result) == [["b"], ["c"]]
    assert result["waves"][0]["canary"] is True


def test_several_canaries_share_the_canary_waves_split_by_max_unavailable():
    result = wave_plan.plan(["a", "b", "c", "d", "e"], ["d", "b", "e"], ["100%"], max_unavailable=2)
    assert hosts_of(result) == [["b", "d"], ["e"], ["a", "c"]]
    assert [w["name"] for w in result["waves"]] == ["canary 1", "canary 2", "wave 1"]


def test_duplicates_are_planned_once():
    result = wave_plan.plan(["a", "b", "a"], ["b", "b"], [1])
    assert result["hosts"] == ["b", "a"]
    assert result["fleet_size"] == 2


def test_empty_fleet_and_everything_skipped():
    assert wave_plan.plan([], None, [1])["waves"] == []
    done = wave_plan.plan(["a", "b"], ["a"], [1], skip=["a", "b"])
    assert done["waves"] == []
    assert done["skipped"] == ["a", "b"]
    assert wave_plan.describe(done)[-1] == "nothing to upgrade"


def test_describe_names_every_wave():
    lines = wave_plan.describe(wave_plan.plan(["a", "b", "c"], ["c"], [2], skip=["b"]))
    assert lines == [
        "3 node(s) in the fleet, at most 3 out of service at once, 1 left out (already done or unhealthy)",
        "canary: c",
        "wave 1: a",
        "left out: b",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"waves": []}, "non-empty list"),
        ({"waves": "25%"}, "non-empty list"),
        ({"waves": [0]}, "at least 1"),
        ({"waves": [-2]}, "at least 1"),
        ({"waves": ["0%"]}, "above 0%"),
        ({"waves": ["150%"]}, "at most 100%"),
        ({"waves": ["ten"]}, "neither a count"),
        ({"waves": [True]}, "boolean"),
        ({"waves": [1.5]}, "neither a count"),
        ({"max_unavailable": 0}, "max_unavailable size 0 must be at least 1"),
        ({"max_unavailable": "x%"}, "max_unavailable"),
        ({"canary_hosts": ["zz"]}, "zz are not in the fleet"),
        ({"canary_hosts": "a"}, "list of host names"),
        ({"skip": [None]}, "not a host name"),
    ],
)
def test_bad_specs_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        wave_plan.plan(["a", "b"], **kwargs)


entries = st.one_of(st.integers(1, 12), st.integers(1, 100).map(lambda p: "%d%%" % p))


@st.composite
def plans(draw):
    fleet = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=0, max_size=40, unique=True))
    canary = draw(st.lists(st.sampled_from(fleet), max_size=3, unique=True)) if fleet else []
    skip = draw(st.lists(st.sampled_from(fleet), max_size=len(fleet), unique=True)) if fleet else []
    waves = draw(st.lists(entries, min_size=1, max_size=5))
    max_unavailable = draw(entries)
    return fleet, canary, skip, waves, max_unavailable


@settings(max_examples=400, deadline=None)
@given(plans())
def test_properties(case):
    fleet, canary, skip, waves, max_unavailable = case
    result = wave_plan.plan(fleet, canary, waves, max_unavailable, skip)
    planned = result["hosts"]
    # every node not skipped exactly once, none of the skipped ones
    assert sorted(planned) == sorted(set(fleet) - set(skip))
    assert len(planned) == len(set(planned))
    # never over max_unavailable, no empty wave
    limit = wave_plan.size_of(max_unavailable, max(len(fleet), 1))
    assert all(1 <= len(w["hosts"]) <= limit for w in result["waves"])
    # canary waves first, holding only canaries; a canary exists whenever something is planned
    flags = [w["canary"] for w in result["waves"]]
    assert flags == sorted(flags, reverse=True)
    canary_hosts = [h for w in result["waves"] if w["canary"] for h in w["hosts"]]
    expected_canaries = [h for h in canary if h not in skip] if canary else planned[:1]
    assert sorted(canary_hosts) == sorted(expected_canaries)
    # inventory order inside the non-canary part
    rest = [h for w in result["waves"] if not w["canary"] for h in w["hosts"]]
    assert rest == [h for h in fleet if h in set(rest)]
    assert result["batch_sizes"] == [len(w["hosts"]) for w in result["waves"]]
