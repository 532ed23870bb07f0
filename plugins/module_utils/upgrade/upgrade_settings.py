# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling upgrade's settings: the default of each, and the checks before any node moves.

Each ``gpuops_upgrade_<name>`` setting that has a default has it in :data:`DEFAULTS`, and nowhere else:
the role gpuops.cluster.rolling_upgrade reads its settings in one value, :func:`settings` (through the
lookup gpuops.cluster.upgrade_settings); the window's defaults are the planner's own
(``window_input.DEFAULTS``), the drain reason's prefix the drain adapter's. The registry
playbooks/vars/gpuops_variables.yml documents each default under ``default`` and the unit tests keep
the two equal.

A typo in a value must not change what the run does: ``gpuops_upgrade_drain: slrum``
would otherwise upgrade nodes without draining them, and ``on_failure: rolback``
would halt without the rollback the operator asked for. Every problem is returned
as a sentence that names the variable and what to set.

The type, choices and range of each setting are checked with every other
variable (``variable_values``, from the registry playbooks/vars/gpuops_variables.yml);
what is checked here needs more than one value: the Slurm controller against the
inventory, the window's settings together, the canary group against the run, and
run settings set for some hosts only.

Some checks need the whole run (:func:`run_problems`): ``forks`` against the window's
size (a node in flight holds a fork; with fewer forks than the window, the window is
never filled and the run is slower than planned), and ``per_domain`` against the
failure domains the hosts declare (a kind no host declares limits nothing).

Settings come in two kinds. Node settings (drain adapter, timeouts, gates, failure
policy, failure domains) are read on each node and may differ between nodes. Run
settings (the window, the canary group, the run id, the report path) are read once, on the
controller (``localhost``): a value set for some nodes only (``group_vars/gpu_nodes``,
``host_vars``) would be ignored, so it is reported.
"""

from __future__ import annotations

import copy
import datetime
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import variable_values
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    drain_adapter,
    node_record,
    window_input,
)

PREFIX = "gpuops_upgrade_"
DEFAULT_CANARY_GROUP = "canary"
# Every setting the rolling upgrade reads with a default, by name without the prefix: its default.
DEFAULTS = {
    # node settings
    "drain": "none",
    "drain_poll_interval": 10,
    "on_drain_timeout": node_record.DEFAULT_ON_DRAIN_TIMEOUT,
    "on_failure": "halt",
    "gate_level": "standard",
    "canary_gate_level": "extended",
    "canary_soak_seconds": 0,
    "reason_prefix": drain_adapter.DEFAULT_PREFIX,
    "kubernetes_delegate": "localhost",
    "stop_services": ["nvidia-dcgm", "nvidia-fabricmanager", "nvidia-persistenced"],
    "domains": {},
    # run settings (read on the controller); the window's are the planner's
    "max_unavailable": window_input.DEFAULTS["max_unavailable"],
    "per_domain": window_input.DEFAULTS["per_domain"],
    "partition_floor": window_input.DEFAULTS["partition_floor"],
    "barrier": window_input.DEFAULTS["barrier"],
    "max_job_wait": window_input.DEFAULTS["max_job_wait"],
    "drain_ahead": window_input.DEFAULTS["drain_ahead"],
    "deadline": "auto",  # the window's default (window_input.auto_deadline): deadline_at gives it None
    "plan_only": False,
    "canary_group": DEFAULT_CANARY_GROUP,
    "refresh_interval": 60,
    "maintenance_reservation": None,
    "resume_journal": "auto",
}
RUN_SETTINGS = (
    "max_unavailable",
    "per_domain",
    "partition_floor",
    "barrier",
    "plan_only",
    "canary_group",
    "run_id",
    "report_path",
    "max_job_wait",
    "refresh_interval",
    "drain_ahead",
    "deadline",
    "journal_path",
    "resume_journal",
)
# Window settings checked on each host, by the window's own parser (window_input.Settings, the one place that
# reads a count or "N%"), and the gpuops_upgrade_* variable that sets each.
WINDOW_SETTINGS = {
    "max_unavailable": "max_unavailable",
    "per_domain": "per_domain",
    "partition_floor": "partition_floor",
}


def _var(name: str) -> str:
    return PREFIX + name


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def deadline_at(value, now) -> float | None:
    """``gpuops_upgrade_deadline`` as the window's deadline (seconds since the epoch) for a run planned at ``now``.

    Unset (None, ``auto``): None, the window's default (the latest end of the jobs running now). ``0``: 0, the run
    waits for no job. A duration (seconds, or ``90m``, ``36h``, ``2d``, ``1w``): that long after ``now``. A time
    (ISO 8601, ``2026-12-06T18:00:00Z``; without a zone, UTC).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, bool):
        raise ValueError("%r is not a duration or a time" % (value,))
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("%r is below 0" % (value,))
        return 0 if value == 0 else now + value
    text = str(value)
    match = _DURATION.match(text.lower())
    if match:
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
        return 0 if seconds == 0 else now + seconds
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            "%r is neither a duration (seconds, or such as 90m, 36h, 2d) nor a time (such as 2026-12-06T18:00:00Z)"
            % (text,)
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def settings(variables, types=None) -> dict:
    """``{name: value}`` for every setting of :data:`DEFAULTS`: ``gpuops_upgrade_<name>`` from ``variables`` when set
    (not null), else its default.

    ``types`` (variable name -> the registry's ``type``) converts each value set to its type, as the validation
    play checks it: ``-e gpuops_upgrade_plan_only=true`` is the string ``true`` on the command line and the bool
    true here. A value that does not convert is left as it is (the validation play refuses it).
    """
    if not isinstance(variables, dict):
        raise ValueError("upgrade settings take the host's variables as a mapping, got %r" % (variables,))
    types = types or {}
    return {
        name: copy.deepcopy(default)
        if variables.get(PREFIX + name) is None
        else variable_values.converted(variables[PREFIX + name], types.get(PREFIX + name))
        for name, default in DEFAULTS.items()
    }


def problems(
    settings: dict, run_settings: dict | None = None, inventory_hosts=(), groups=None, fleet=None
) -> list[str]:
    """Every problem of one node's upgrade settings (names without the ``gpuops_upgrade_`` prefix).

    ``settings`` holds the node's values, None for a setting that is not set (its default
    applies, and every default is valid), ``run_settings`` the controller's values of the
    run settings, and ``inventory_hosts`` every host of the inventory (the Slurm
    controller must be one). With ``groups`` (the inventory's groups and their hosts) and
    ``fleet`` (the hosts of this run), the canary group is checked too.
    """
    run_settings = run_settings or {}
    settings = {name: value for name, value in settings.items() if value is not None}
    found = []
    if settings.get("drain") == "slurm":
        controller = settings.get("slurm_controller")
        if not controller:
            found.append(
                "gpuops_upgrade_drain is slurm but gpuops_upgrade_slurm_controller is not set; "
                "name the inventory host that runs scontrol (the Slurm controller)"
            )
        elif inventory_hosts and controller not in inventory_hosts:
            found.append(
                "gpuops_upgrade_slurm_controller %r is not an inventory host; add it to the inventory "
                "or name the host that runs scontrol" % controller
            )
    ahead = (
        run_settings.get("drain_ahead") if run_settings.get("drain_ahead") is not None else settings.get("drain_ahead")
    )
    adapter = settings.get("drain", DEFAULTS["drain"])
    if str(ahead).strip().isdigit() and int(str(ahead).strip()) > 0 and not drain_adapter.drains_ahead(adapter):
        found.append(
            "gpuops_upgrade_drain_ahead is %s but gpuops_upgrade_drain is %s: nodes are drained ahead of their slot "
            "only through Slurm; set gpuops_upgrade_drain: slurm, or gpuops_upgrade_drain_ahead: 0" % (ahead, adapter)
        )
    for name, key in WINDOW_SETTINGS.items():
        if name in settings:
            try:
                window_input.Settings({key: settings[name]})
            except ValueError as exc:
                found.append("gpuops_upgrade_%s: %s" % (name, exc))
    if "deadline" in settings:
        try:
            deadline_at(settings["deadline"], 0)
        except ValueError as exc:
            found.append(
                "gpuops_upgrade_deadline: %s; set a duration, a time, 0 (wait for no job) or auto (the latest end of "
                "the jobs running when the run starts)" % exc
            )
    domains = settings.get("domains")
    if domains is not None and (
        not isinstance(domains, dict)
        or not all(
            isinstance(kind, str) and isinstance(member, str) and kind and member for kind, member in domains.items()
        )
    ):
        found.append(
            "gpuops_upgrade_domains is %r; map each kind of failure domain to this host's member, "
            "such as {rack: r07, nvlink: nvl72-3}" % (domains,)
        )
    if groups is not None:
        found.extend(canary_problems(run_settings.get("canary_group"), groups, fleet or ()))
    for name in RUN_SETTINGS:
        if name in settings and name in run_settings and settings[name] != run_settings[name]:
            found.append(
                "%s is %r on this host but %r for the run: it is read once per run on the controller, "
                "so set it for all hosts (group_vars/all or -e), not per host or group"
                % (_var(name), settings[name], run_settings[name])
            )
    return found


def run_problems(max_unavailable, fleet_size: int, forks=None, per_domain=None, domains_by_host=None) -> list[str]:
    """Problems of the run as a whole, checked once: ``forks`` against the window, ``per_domain`` against the domains.

    ``max_unavailable`` is the run's value (None: the default), ``fleet_size`` the hosts of the
    run, ``forks`` Ansible's forks (``ansible_forks``; None: not checked), ``per_domain`` the run's
    value and ``domains_by_host`` each host's ``gpuops_upgrade_domains`` (None or {} when unset).
    A value that is itself invalid is reported by :func:`problems`, not here.
    """
    found = []
    given = window_input.DEFAULTS["max_unavailable"] if max_unavailable in (None, "") else max_unavailable
    try:
        window = window_input.Settings({"max_unavailable": given}, int(fleet_size)).max_unavailable
    except ValueError:
        window = None
    if window is not None and forks is not None and not isinstance(forks, bool):
        try:
            forks = int(forks)
        except (TypeError, ValueError):
            forks = None
        if forks is not None and forks < window:
            found.append(
                "forks is %d but the window takes up to %d node(s) at once (gpuops_upgrade_max_unavailable %s of %d "
                "host(s)): each node in flight holds a fork, so the window would never fill; run with --forks %d "
                "(or forks = %d under [defaults] in ansible.cfg, or ANSIBLE_FORKS=%d), or lower "
                "gpuops_upgrade_max_unavailable to %d"
                % (
                    forks,
                    window,
                    given,
                    fleet_size,
                    window,
                    window,
                    window,
                    forks,
                )
            )
    if isinstance(per_domain, dict) and per_domain:
        declared = set()
        for domains in (domains_by_host or {}).values():
            if isinstance(domains, dict):
                declared.update(str(kind) for kind in domains)
        for kind in sorted(map(str, per_domain)):
            if kind not in declared:
                found.append(
                    "gpuops_upgrade_per_domain limits %r, but no host of the run declares a %s in "
                    "gpuops_upgrade_domains, so the limit would do nothing; give each host its %s (such as "
                    "gpuops_upgrade_domains: {%s: r07}), or remove %s from gpuops_upgrade_per_domain%s"
                    % (
                        kind,
                        kind,
                        kind,
                        kind,
                        kind,
                        " (kinds declared: %s)" % ", ".join(sorted(declared)) if declared else "",
                    )
                )
    return found


def canary_problems(canary_group, groups: dict, fleet) -> list[str]:
    """The canary group must exist when it is named, and its hosts must be in the run.

    Unset, the group ``canary`` is used when the inventory has it, else the first node of
    the plan: that fallback is only for the default, never for a group named by the operator.
    """
    name = canary_group if canary_group not in (None, "") else DEFAULT_CANARY_GROUP
    if name not in groups:
        if canary_group in (None, ""):
            return []
        known = sorted(group for group in groups if group not in ("all", "ungrouped"))
        return [
            "gpuops_upgrade_canary_group is %r, which is not an inventory group (groups: %s); create the group "
            "with the canary node(s), or unset the variable to use the group %r (or the first node)"
            % (canary_group, ", ".join(known) or "none", DEFAULT_CANARY_GROUP)
        ]
    outside = [host for host in groups[name] if host not in set(fleet)]
    if outside:
        return [
            "canary host(s) %s of group %r are not in this run (--limit or gpuops_target_hosts left them out): "
            "include them, or set gpuops_upgrade_canary_group to a group of hosts in the run"
            % (", ".join(outside), name)
        ]
    return []
