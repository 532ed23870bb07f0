# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The window's view of the fleet: one node per inventory host, from the survey and the scheduler.

The survey play gives, per host, ``{host, done, domains, scheduler_name}``: ``done`` when
the host is already on the target (skipped) or left out (unhealthy), ``domains`` its
failure domains from ``gpuops_upgrade_domains`` (``{"rack": "r01", "nvlink": "nvl72-5"}``),
``scheduler_name`` its name in Slurm. ``slurm`` is what ``gpuops.cluster.slurm_fleet``
returned for them: state (idle, busy, drained_by_others, down), job end, partitions, GPUs.
Without a scheduler every node is idle and in no partition.

A node Slurm shows in a reservation (the flag ``reserved`` or ``maint`` in its
``slurm_state``, such as ``idle+reserved``) is ``reserved`` for the window: it
serves the reservation's users, so the run leaves it alone and reports it. The
rolling upgrade makes no reservation of its own, so every one is someone else's,
but the one the operator names as the upgrade's maintenance reservation
(``gpuops_upgrade_maintenance_reservation``): its nodes are out of users' service
already, so the window takes them first (``maintenance``).

A node to upgrade that Slurm shows drained by us (``owner: ours``: the reason carries our
prefix; left by a run that crashed or halted) is out of service already: the window counts it so
from the start and takes it first (``resume``). So is a node the survey found done (on the
target, or left out) that Slurm shows drained by us: it is not done while our drain holds it (a
run lost its controller before giving it back), so it is resumed like the others, and given back
only once its gate passed; it counts against ``max_unavailable`` until then. One drained ahead
of its slot (our reason ends with ``window_input.DRAIN_AHEAD_REASON``) still runs its job and
held no slot: it starts drained ahead (``drained_ahead``), takes its slot first when its job
ends. A node Slurm shows in service, with no drain of ours, has ``resume`` and ``drained_ahead``
false: Slurm is the truth about it, whatever a previous run's journal says.

With the Kubernetes adapter ``slurm`` is the plan's read of the Nodes (``kubernetes_node.survey``, the same shape):
a cordon carrying our annotation is ``owner: ours`` and is resumed by the same rules, a cordon without it is
``drained_by_others``, a Node not Ready is ``down``; no node is busy or in a reservation there.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input

SLURM_KEYS = ("state", "job_end", "partitions", "gpus")
# Slurm state words of a node in a reservation (sinfo: RESERVED; a maintenance reservation: MAINT).
RESERVATION_FLAGS = frozenset({"reserved", "maint"})


def in_reservation(entry: dict) -> bool:
    """Whether Slurm shows the node in a reservation, from its ``slurm_state`` (``idle+reserved``)."""
    words = str(entry.get("slurm_state") or "").lower().split("+")
    return bool(RESERVATION_FLAGS.intersection(words)) or bool(entry.get("reservation"))


def in_maintenance(entry: dict, maintenance) -> bool:
    """Whether the node is in the maintenance reservation the operator named (``maintenance``, a name or None)."""
    return bool(maintenance) and entry.get("reservation") == maintenance


def reserved_reasons(slurm, maintenance=None) -> dict:
    """Why each node in a reservation (not the operator's maintenance one) is left alone, by node name."""
    reasons = {}
    for entry in slurm or []:
        if in_maintenance(entry, maintenance):
            continue
        if entry.get("state") in ("idle", "busy") and in_reservation(entry):
            named = entry.get("reservation")
            reasons[entry["name"]] = "in a Slurm reservation%s (%s): left alone, not upgraded" % (
                " " + str(named) if named else "",
                entry.get("slurm_state") or "reserved",
            )
    return reasons


def unavailable_reasons(slurm) -> dict:
    """Why each node drained (cordoned) by someone else or down is out of service, from its scheduler, by node name."""
    reasons = {}
    for entry in slurm or []:
        state = entry.get("state")
        if state == "drained_by_others":
            reasons[entry["name"]] = "drained by someone else (%s): not touched" % (entry.get("reason") or "no reason")
        elif state == "down":
            reasons[entry["name"]] = "down in %s (%s): not touched" % (
                entry.get("scheduler") or "Slurm",
                entry.get("reason") or "no reason",
            )
    return reasons


def window_nodes(hosts, slurm=None, canary=(), maintenance=None) -> list[dict]:
    """The ``nodes`` of :class:`window.Window`, named by inventory host, in the order given.

    ``maintenance``: the name of a Slurm reservation the operator set aside for the upgrade; its nodes
    are ``maintenance`` (out of users' service already: taken first) instead of ``reserved``.
    """
    if maintenance is not None and (not isinstance(maintenance, str) or not maintenance.strip()):
        raise ValueError("maintenance must name a Slurm reservation (scontrol show reservation), got %r" % maintenance)
    by_name = {}
    for entry in slurm or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError("a Slurm node must be a mapping with a name, got %r" % (entry,))
        by_name[entry["name"]] = entry
    canaries = set(canary or ())
    nodes = []
    for host in hosts:
        if not isinstance(host, dict) or not host.get("host"):
            raise ValueError("a surveyed host must be a mapping with its inventory name as host, got %r" % (host,))
        name = host["host"]
        domains = host.get("domains") or {}
        if not isinstance(domains, dict):
            raise ValueError(
                "gpuops_upgrade_domains of %s must map a kind of domain to the host's member, such as "
                "{rack: r01}, got %r" % (name, domains)
            )
        node = {
            "name": name,
            "domains": {str(kind): str(member) for kind, member in domains.items()},
            "canary": name in canaries,
            "done": bool(host.get("done")),
        }
        if slurm is not None:
            scheduler_name = host.get("scheduler_name") or name
            found = by_name.get(scheduler_name)
            if found is None:
                raise ValueError("Slurm returned no state for node %s (inventory host %s)" % (scheduler_name, name))
            node.update({key: found[key] for key in SLURM_KEYS if key in found})
            if node.get("state") in ("idle", "busy") and in_maintenance(found, maintenance) and not node["done"]:
                node["maintenance"] = True
                node["drained_ahead"] = False
            elif node.get("state") in ("idle", "busy") and in_reservation(found):
                node["state"] = "reserved"
                node.pop("job_end", None)
            elif node.get("state") in ("idle", "busy") and found.get("owner") == "ours" and node["done"]:
                # On the target by the survey, but drained by us (left by a run that lost its controller before
                # giving it back): out of service, not done. Resumed first, its gate verifies it, then it is given
                # back; until then it counts against max_unavailable.
                node["done"] = False
                node["resume"] = True
            elif node.get("state") in ("idle", "busy") and found.get("owner") == "ours":
                if str(found.get("reason") or "").endswith(window_input.DRAIN_AHEAD_REASON):
                    node["drained_ahead"] = True
                else:
                    node["resume"] = True
            elif node.get("state") in ("idle", "busy"):
                # In service by Slurm's word: a journal that left it out (a node rolled back and given back after
                # its record was written, say) is not taken for the truth.
                node["resume"] = False
                node["drained_ahead"] = False
        nodes.append(node)
    if maintenance and slurm is not None and not any(in_maintenance(entry, maintenance) for entry in by_name.values()):
        named = sorted({str(entry["reservation"]) for entry in by_name.values() if entry.get("reservation")})
        raise ValueError(
            "no node of this run is in the maintenance reservation %r (the nodes' reservations: %s): check "
            "gpuops_upgrade_maintenance_reservation against scontrol show reservation"
            % (maintenance, ", ".join(named) or "none named; Slurm 22.05 names no node's reservation")
        )
    return nodes
