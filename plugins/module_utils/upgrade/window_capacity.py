# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who is out of service during a rolling upgrade, and whether one more node may leave (the window's rules).

The window (:class:`window.Window`) decides when and in which order; this ledger only counts, whoever took a node
out of service (the window, a failure, someone else's drain, a down node), against the three limits:

* ``max_unavailable``: never more nodes out of service in the whole fleet;
* ``per_domain`` (``{"rack": 1, "nvlink": 1}``): never more nodes out of service in one member of that kind of
  domain; a node without that kind of domain is not limited by it;
* ``partition_floor`` (a fraction in (0, 1], or None): in every Slurm partition, the GPUs of the nodes in service
  stay at least that share of the partition's GPUs; a node in several partitions must keep every one of them above
  its floor. A node drained ahead of its slot takes no new job, so its GPUs count on its partitions from its drain
  (:meth:`Capacity.take_floor`) while it does not count against the other two limits until it takes its slot.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import FLOOR_EPSILON, Node


class Capacity:
    """The out-of-service counts of a fleet against the window's settings (:class:`window_input.Settings`).

    ``out`` (names out of service), ``domain_out`` ((kind, member) -> count, for the kinds ``per_domain`` limits),
    ``partition_out`` (partition -> GPUs not schedulable) and ``partition_gpus`` (partition -> its GPUs).
    """

    def __init__(self, nodes, settings):
        self.limit = settings.max_unavailable
        self.per_domain = settings.per_domain
        self.floor = settings.partition_floor
        self.partition_gpus: dict = {}
        for node in nodes:
            for partition in node.partitions:
                self.partition_gpus[partition] = self.partition_gpus.get(partition, 0) + node.gpus
        self.out: set = set()
        self.domain_out: dict = {}
        self.partition_out: dict = {}

    @property
    def full(self) -> bool:
        """Whether ``max_unavailable`` nodes are out of service already."""
        return len(self.out) >= self.limit

    def take(self, node: Node, partitions=True):
        """``node`` leaves service; ``partitions`` false when its GPUs count on its partitions already (drained
        ahead)."""
        self.out.add(node.name)
        for kind, member in node.domains.items():
            if kind in self.per_domain:
                self.domain_out[(kind, member)] = self.domain_out.get((kind, member), 0) + 1
        if partitions:
            self.take_floor(node)

    def take_floor(self, node: Node):
        """``node``'s GPUs stop counting as schedulable on its partitions (drained ahead, or out of service)."""
        for partition in node.partitions:
            self.partition_out[partition] = self.partition_out.get(partition, 0) + node.gpus

    def give_floor(self, node: Node):
        """``node``'s GPUs are schedulable again on its partitions (a drain ahead undone)."""
        for partition in node.partitions:
            self.partition_out[partition] -= node.gpus

    def give_back(self, node: Node):
        """``node`` is back in service."""
        self.out.discard(node.name)
        for kind, member in node.domains.items():
            if kind in self.per_domain:
                self.domain_out[(kind, member)] -= 1
        for partition in node.partitions:
            self.partition_out[partition] -= node.gpus

    def keeps_floor(self, node: Node) -> bool:
        """Whether every partition of ``node`` stays above its floor with ``node``'s GPUs out as well."""
        if self.floor is None:
            return True
        return not any(
            self.partition_gpus[partition] - self.partition_out.get(partition, 0) - node.gpus
            < self.floor * self.partition_gpus[partition] - FLOOR_EPSILON
            for partition in node.partitions
        )

    def misfit(self, node: Node, counts=None, counted=False):
        """What keeps ``node`` from leaving service now, as a key (None when it can leave).

        ``("max_unavailable",)``, ``("domain", kind, member)`` or ``("partition", name)``.
        ``counts``: ``(out, domain_out, partition_out)`` to judge against, the ledger's own by default.
        ``counted``: ``node``'s GPUs count on its partitions already in the ledger's own counts (drained ahead).
        """
        out, domain_out, partition_out = counts or (len(self.out), self.domain_out, self.partition_out)
        if out + 1 > self.limit:
            return ("max_unavailable",)
        per_domain = self.per_domain
        for kind, member in node.domains.items():
            limit = per_domain.get(kind)
            if limit is not None and domain_out.get((kind, member), 0) + 1 > limit:
                return ("domain", kind, member)
        if self.floor is not None:
            gpus = 0 if counts is None and counted else node.gpus
            for partition in node.partitions:
                total = self.partition_gpus[partition]
                if total - partition_out.get(partition, 0) - gpus < self.floor * total - FLOOR_EPSILON:
                    return ("partition", partition)
        return None

    def explain(self, node: Node, key, counts=None) -> str:
        """The operator's words for a key of :meth:`misfit`."""
        out, domain_out, partition_out = counts or (len(self.out), self.domain_out, self.partition_out)
        if key[0] == "max_unavailable":
            return "max_unavailable %d: %d node(s) already out of service" % (self.limit, out)
        if key[0] == "domain":
            kind, member = key[1], key[2]
            return "per_domain %s %d: %d node(s) of %s %s already out of service" % (
                kind,
                self.per_domain[kind],
                domain_out.get((kind, member), 0),
                kind,
                member,
            )
        partition = key[1]
        total = self.partition_gpus[partition]
        return "partition_floor %g: partition %s would keep %d of its %d GPUs schedulable" % (
            self.floor,
            partition,
            total - partition_out.get(partition, 0) - node.gpus,
            total,
        )

    def counts_without(self, back, ahead) -> tuple:
        """The counts as if the nodes ``back`` were back in service and the nodes ``ahead`` not drained ahead:
        ``(out, domain_out, partition_out)`` for :meth:`misfit` and :meth:`explain`."""
        domain_out = dict(self.domain_out)
        partition_out = dict(self.partition_out)
        returned = 0
        for node in back:
            returned += 1
            for kind, member in node.domains.items():
                if kind in self.per_domain:
                    domain_out[(kind, member)] -= 1
            for partition in node.partitions:
                partition_out[partition] -= node.gpus
        for node in ahead:
            for partition in node.partitions:
                partition_out[partition] -= node.gpus
        return len(self.out) - returned, domain_out, partition_out
