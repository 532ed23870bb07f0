# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit of a rolling upgrade's timeline: every window rule that a run broke, if any.

The simulator, the integration tests and the run's report replay what happened (who was out of
service, and who drained ahead, from when to when) and ask :func:`check` for the rules broken.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import (
    FLOOR_EPSILON,
    OUT_OF_SERVICE_STATES,
    Settings,
    nodes_of,
)


def check(timeline, nodes, settings=None, ahead=()) -> list[dict]:
    """Every rule broken by a timeline of ``(name, start, end)`` out-of-service intervals.

    Intervals are half-open ``[start, end)``: a node back at ``t`` and another
    leaving at ``t`` are not out together. Down and drained-by-others nodes of
    ``nodes`` are out the whole time. ``ahead`` holds the ``(name, start, end)``
    intervals of nodes drained ahead of their slot (until admitted or given back):
    they count on the partition floor and against ``drain_ahead``, not against
    ``max_unavailable`` or ``per_domain``. Returns ``[{time, rule, detail}]``, one
    entry per interval start that leaves a rule broken.
    """
    fleet = {node.name: node for node in nodes_of(nodes)}
    config = Settings(settings, len(fleet))
    partition_gpus: dict = {}
    for node in fleet.values():
        for partition in node.partitions:
            partition_gpus[partition] = partition_gpus.get(partition, 0) + node.gpus
    events = []
    for drained, entries in ((False, timeline), (True, ahead)):
        for entry in entries:
            name, start, end = entry
            if name not in fleet:
                raise ValueError("check: %s of the timeline is not a node of the fleet" % name)
            if end < start:
                raise ValueError("check: %s ends (%r) before it starts (%r)" % (name, end, start))
            if end > start:
                events.append((start, 1, name, drained))
                events.append((end, 0, name, drained))
    events.sort(key=lambda event: (event[0], event[1], event[2], event[3]))
    ahead_now = 0

    out = 0
    domain_out: dict = {}
    partition_out: dict = {}

    def move(node, step):
        for kind, member in node.domains.items():
            if kind in config.per_domain:
                domain_out[(kind, member)] = domain_out.get((kind, member), 0) + step
        for partition in node.partitions:
            partition_out[partition] = partition_out.get(partition, 0) + step * node.gpus

    for node in fleet.values():
        if node.state in OUT_OF_SERVICE_STATES:
            out += 1
            move(node, 1)
    violations = []
    for time, kind_of_event, name, drained in events:
        node = fleet[name]
        step = 1 if kind_of_event else -1
        if drained:
            ahead_now += step
            for partition in node.partitions:
                partition_out[partition] = partition_out.get(partition, 0) + step * node.gpus
        else:
            out += step
            move(node, step)
        if not kind_of_event:
            continue
        if drained:
            if ahead_now > config.drain_ahead:
                violations.append(
                    {
                        "time": time,
                        "rule": "drain_ahead",
                        "detail": "%d nodes drained ahead, drain_ahead %d (%s drained)"
                        % (ahead_now, config.drain_ahead, name),
                    }
                )
        elif out > config.max_unavailable:
            violations.append(
                {
                    "time": time,
                    "rule": "max_unavailable",
                    "detail": "%d nodes out of service, max_unavailable %d (%s left)"
                    % (out, config.max_unavailable, name),
                }
            )
        for kind, member in () if drained else node.domains.items():
            limit = config.per_domain.get(kind)
            if limit is not None and domain_out[(kind, member)] > limit:
                violations.append(
                    {
                        "time": time,
                        "rule": "per_domain",
                        "detail": "%d nodes of %s %s out of service, limit %d (%s left)"
                        % (domain_out[(kind, member)], kind, member, limit, name),
                    }
                )
        if config.partition_floor is not None:
            for partition in node.partitions:
                total = partition_gpus[partition]
                left = total - partition_out[partition]
                if left < config.partition_floor * total - FLOOR_EPSILON:
                    violations.append(
                        {
                            "time": time,
                            "rule": "partition_floor",
                            "detail": "partition %s keeps %d of %d GPUs schedulable, floor %g (%s left)"
                            % (partition, left, total, config.partition_floor, name),
                        }
                    )
    return violations
