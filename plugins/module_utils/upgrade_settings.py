# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of a rolling upgrade's settings, before any node moves.

A typo in a value must not change what the run does: ``gpuops_upgrade_drain: slrum``
would otherwise upgrade nodes without draining them, and ``on_failure: rolback``
would halt without the rollback the operator asked for. Every problem is returned
as a sentence that names the variable and what to set.

Settings come in two kinds. Node settings (drain adapter, timeouts, gates, failure
policy) are read on each node and may differ between nodes. Run settings (the wave
plan, the canary group, the run id, the report path) are read once, on the
controller (``localhost``): a value set for some nodes only (``group_vars/gpu_nodes``,
``host_vars``) would be ignored, so it is reported.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils import wave_plan

CHOICES = {
    "drain": ("none", "slurm", "kubernetes"),
    "on_failure": ("halt", "rollback"),
    "on_drain_timeout": ("halt", "continue"),
    "gate_level": ("quick", "standard", "extended"),
    "canary_gate_level": ("quick", "standard", "extended"),
}
# name -> least value
INTEGERS = {"drain_timeout": 0, "drain_poll_interval": 1, "canary_soak_seconds": 0}
RUN_SETTINGS = ("waves", "max_unavailable", "canary_group", "run_id", "report_path")


def _var(name: str) -> str:
    return "gpuops_upgrade_" + name


def _as_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def problems(settings: dict, run_settings: dict | None = None, inventory_hosts=()) -> list[str]:
    """Every problem of one node's upgrade settings (names without the ``gpuops_upgrade_`` prefix).

    ``settings`` holds the node's values, None for a setting that is not set (its default
    applies, and every default is valid), ``run_settings`` the controller's values of the
    run settings, and ``inventory_hosts`` every host of the inventory (the Slurm
    controller must be one).
    """
    run_settings = run_settings or {}
    settings = {name: value for name, value in settings.items() if value is not None}
    found = []
    for name, allowed in CHOICES.items():
        if name in settings and settings[name] not in allowed:
            found.append("%s is %r; set one of: %s" % (_var(name), settings[name], ", ".join(allowed)))
    for name, least in INTEGERS.items():
        if name in settings:
            value = _as_int(settings[name])
            if value is None or value < least:
                found.append(
                    "%s is %r; set a whole number of seconds, at least %d" % (_var(name), settings[name], least)
                )
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
    waves = settings.get("waves")
    if "waves" in settings:
        if not isinstance(waves, (list, tuple)) or not waves:
            found.append(
                "gpuops_upgrade_waves is %r; set a list of counts or percentages, e.g. [1, '10%%', '100%%']" % (waves,)
            )
        else:
            for entry in waves:
                try:
                    wave_plan.size_of(entry, 100, "gpuops_upgrade_waves: wave")
                except ValueError as exc:
                    found.append(str(exc))
    if "max_unavailable" in settings:
        try:
            wave_plan.size_of(settings["max_unavailable"], 100, "gpuops_upgrade_max_unavailable:")
        except ValueError as exc:
            found.append(str(exc))
    for name in RUN_SETTINGS:
        if name in settings and name in run_settings and settings[name] != run_settings[name]:
            found.append(
                "%s is %r on this host but %r for the run: it is read once per run on the controller, "
                "so set it for all hosts (group_vars/all or -e), not per host or group"
                % (_var(name), settings[name], run_settings[name])
            )
    return found
