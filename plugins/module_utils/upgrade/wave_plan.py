# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waves as Ansible's ``serial`` runs them: which nodes move together, in which order.

The rolling upgrade itself runs a sliding window (window_plan). This module keeps
``size_of`` (counts and percentages of the fleet, for ``max_unavailable``) and
``plan``, the serial-waves baseline of tests/benchmarks/bench_fleet_rollout.py.

Rules of ``plan``:

* The canary wave comes first and holds only canary nodes. The canaries are the
  hosts of ``canary_hosts`` that are in the fleet and not skipped; when
  ``canary_hosts`` is empty, the first host of the fleet (inventory order) that
  is not skipped is the canary. When every named canary is skipped (a re-run
  after the canary passed), there is no canary wave.
* The waves spec applies to the nodes after the canary, like Ansible's
  ``serial``: each entry is the size of one wave, the last entry repeats until
  every node is planned. An entry is a count (``3``) or a percentage of the
  whole fleet (``"25%"``), skipped nodes included, so a re-run keeps the
  sizes of the first run.
* Percentages round down, with a minimum of one node (what Ansible does for
  ``serial``): ``"10%"`` of 4 nodes is 1, of 25 nodes 2.
* No wave holds more than ``max_unavailable`` nodes (a count, or a percentage
  of the whole fleet rounded the same way): a larger wave is split into waves
  of at most that size, in order.
* Every node that is not skipped is in exactly one wave; the order of the
  fleet (inventory order) is kept inside and across waves.
"""

from __future__ import annotations

import re

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_COUNT = re.compile(r"^\s*(\d+)\s*$")


def size_of(entry, fleet_size: int, what: str = "wave") -> int:
    """Number of nodes an entry (count or ``"N%"``) means for a fleet of ``fleet_size`` nodes."""
    if isinstance(entry, bool):
        raise ValueError(
            "%s size %r is a boolean: give a count such as 2 or a percentage such as '25%%'" % (what, entry)
        )
    if isinstance(entry, int):
        count = entry
    elif isinstance(entry, str) and _COUNT.match(entry):
        count = int(entry)
    elif isinstance(entry, str) and _PERCENT.match(entry):
        percent = float(_PERCENT.match(entry).group(1))
        if percent <= 0 or percent > 100:
            raise ValueError("%s size %r must be a percentage above 0%% and at most 100%%" % (what, entry))
        return max(1, int(percent * fleet_size // 100))
    else:
        raise ValueError("%s size %r is neither a count (2) nor a percentage ('25%%')" % (what, entry))
    if count < 1:
        raise ValueError("%s size %r must be at least 1" % (what, entry))
    return count


def _ordered_unique(names, what: str) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str):
        raise ValueError("%s must be a list of host names, got the string %r" % (what, names))
    seen, ordered = set(), []
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError("%s holds %r, which is not a host name" % (what, name))
        if name not in seen:
            seen.add(name)
            ordered.append(name)
    return ordered


def _split(hosts: list[str], limit: int) -> list[list[str]]:
    return [hosts[start : start + limit] for start in range(0, len(hosts), limit)]


def plan(hosts, canary_hosts=None, waves=(1, "10%", "25%", "100%"), max_unavailable="100%", skip=None) -> dict:
    """Plan the waves of a rolling upgrade.

    Returns ``{fleet_size, max_unavailable, canary, skipped, waves, batch_sizes, hosts}`` where
    ``waves`` is ``[{index, name, canary, hosts}]`` in the order they run, ``batch_sizes`` the
    wave sizes (what Ansible's ``serial`` takes), ``hosts`` every planned node in plan order.
    Raises ValueError for a bad spec.
    """
    fleet = _ordered_unique(hosts, "hosts")
    canaries = _ordered_unique(canary_hosts, "canary_hosts")
    skipped_names = set(_ordered_unique(skip, "skip"))
    if not isinstance(waves, (list, tuple)) or not waves:
        raise ValueError(
            "waves must be a non-empty list of counts or percentages, such as [1, '25%%', '100%%'], got %r" % (waves,)
        )
    unknown = [name for name in canaries if name not in fleet]
    if unknown:
        raise ValueError("canary host(s) %s are not in the fleet being upgraded" % ", ".join(unknown))
    fleet_size = len(fleet)
    sizes = [size_of(entry, max(fleet_size, 1)) for entry in waves]
    limit = size_of(max_unavailable, max(fleet_size, 1), "max_unavailable")

    pending = [name for name in fleet if name not in skipped_names]
    skipped = [name for name in fleet if name in skipped_names]
    canary = [name for name in canaries if name not in skipped_names] if canaries else pending[:1]
    canary_set = set(canary)
    # Canaries run in inventory order too.
    canary = [name for name in pending if name in canary_set]
    rest = [name for name in pending if name not in canary_set]

    planned: list[tuple[bool, list[str]]] = [(True, chunk) for chunk in _split(canary, limit)]
    position = 0
    entry = 0
    while position < len(rest):
        size = sizes[min(entry, len(sizes) - 1)]
        wave = rest[position : position + size]
        planned.extend((False, chunk) for chunk in _split(wave, limit))
        position += size
        entry += 1

    result_waves = []
    wave_number = 0
    for index, (is_canary, members) in enumerate(planned):
        if is_canary:
            name = "canary" if len(canary) <= limit else "canary %d" % (index + 1)
        else:
            wave_number += 1
            name = "wave %d" % wave_number
        result_waves.append({"index": index, "name": name, "canary": is_canary, "hosts": members})
    return {
        "fleet_size": fleet_size,
        "max_unavailable": limit,
        "canary": canary,
        "skipped": skipped,
        "waves": result_waves,
        "batch_sizes": [len(wave["hosts"]) for wave in result_waves],
        "hosts": [name for wave in result_waves for name in wave["hosts"]],
    }


def describe(wave_plan: dict) -> list[str]:
    """One line per wave, for the operator before anything moves."""
    lines = [
        "%d node(s) in the fleet, at most %d out of service at once, %d left out (already done or unhealthy)"
        % (wave_plan["fleet_size"], wave_plan["max_unavailable"], len(wave_plan["skipped"]))
    ]
    for wave in wave_plan["waves"]:
        lines.append("%s: %s" % (wave["name"], ", ".join(wave["hosts"])))
    if wave_plan["skipped"]:
        lines.append("left out: %s" % ", ".join(wave_plan["skipped"]))
    if not wave_plan["waves"]:
        lines.append("nothing to upgrade")
    return lines
