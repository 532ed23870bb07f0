"""window_capacity.Capacity: who is out of service, counted against max_unavailable, per_domain and the partition
floor, and the operator's words for what keeps a node in service."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_capacity import Capacity
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import Node, Settings


def fleet():
    """Four 8-GPU nodes: a and b in rack r1, c and d in r2; a, b, c in partition p (24 GPUs), d in none."""
    return [
        Node("a", {"rack": "r1"}, ["p"]),
        Node("b", {"rack": "r1"}, ["p"]),
        Node("c", {"rack": "r2"}, ["p"]),
        Node("d", {"rack": "r2", "nvlink": "n1"}),
    ]


def capacity(nodes, **settings):
    return Capacity(nodes, Settings(settings, len(nodes)))


def test_each_limit_is_named_when_one_more_node_would_break_it():
    a, b, c, d = fleet()
    counts = capacity([a, b, c, d], max_unavailable=2, per_domain={"rack": 1}, partition_floor=0.5)
    assert counts.misfit(a) is None
    counts.take(a)
    assert counts.out == {"a"}
    assert counts.domain_out == {("rack", "r1"): 1}
    assert counts.partition_out == {"p": 8}
    assert counts.misfit(b) == ("domain", "rack", "r1")
    assert counts.explain(b, counts.misfit(b)) == "per_domain rack 1: 1 node(s) of rack r1 already out of service"
    # c alone would leave p with 8 of its 24 GPUs, under half
    assert counts.misfit(c) == ("partition", "p")
    assert (
        counts.explain(c, ("partition", "p"))
        == "partition_floor 0.5: partition p would keep 8 of its 24 GPUs schedulable"
    )
    assert counts.misfit(d) is None  # its nvlink domain is not limited
    counts.take(d)
    assert counts.full
    assert counts.misfit(d) == ("max_unavailable",)
    assert counts.explain(d, ("max_unavailable",)) == "max_unavailable 2: 2 node(s) already out of service"
    counts.give_back(a)
    assert not counts.full
    assert counts.out == {"d"}
    assert counts.domain_out[("rack", "r1")] == 0
    assert counts.partition_out["p"] == 0
    assert counts.misfit(b) is None


def test_a_node_drained_ahead_counts_on_its_partitions_only():
    a, b, c, d = fleet()
    counts = capacity([a, b, c, d], max_unavailable=3, partition_floor=0.5)
    counts.take_floor(a)  # drained ahead: no new job, not out of service
    assert counts.out == set()
    assert counts.partition_out == {"p": 8}
    assert counts.keeps_floor(b) is False  # b out as well would leave p 8 of 24
    assert counts.misfit(a, counted=True) is None  # a's own GPUs are counted already
    assert counts.misfit(b) == ("partition", "p")
    counts.take(a, partitions=False)  # takes its slot: counted once on p
    assert counts.out == {"a"}
    assert counts.partition_out == {"p": 8}
    counts.give_floor(a)
    assert counts.partition_out == {"p": 0}
    assert counts.keeps_floor(b) is True


def test_the_counts_without_some_nodes_judge_what_could_fit_with_them_back():
    a, b, c, d = fleet()
    counts = capacity([a, b, c, d], max_unavailable=1, per_domain={"rack": 1}, partition_floor=0.5)
    counts.take(a)
    counts.take_floor(c)
    without = counts.counts_without([a], [c])
    assert without == (0, {("rack", "r1"): 0}, {"p": 0})
    assert counts.misfit(b, without) is None
    assert counts.misfit(b) == ("max_unavailable",)
    # the ledger's own counts are untouched
    assert counts.out == {"a"}
    assert counts.partition_out == {"p": 16}


def test_no_floor_keeps_every_partition():
    a, b, c, d = fleet()
    counts = capacity([a, b, c, d], max_unavailable=4)
    for node in (a, b, c):
        counts.take(node)
    assert counts.keeps_floor(d) is True
    assert counts.misfit(d) is None
