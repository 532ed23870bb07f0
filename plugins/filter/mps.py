# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The declared MPS of a host and the daemons its node runs (docs: mps_settings.yml, mps_node_plan.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.mig.mig_state import MigStateError, node_state
from ansible_collections.gpuops.cluster.plugins.module_utils.mps import mps_node
from ansible_collections.gpuops.cluster.plugins.module_utils.mps import mps_settings as settings_of


def mps_settings(spec, drain=None):
    """``gpuops_mps`` with every key, defaults filled in and the scheduler decided (``drain``:
    ``gpuops_upgrade_drain``); an error names the key and the fix."""
    try:
        return settings_of.settings(spec, drain)
    except settings_of.MpsSettingsError as exc:
        raise AnsibleFilterError("gpuops.cluster.mps_settings: %s" % exc) from exc


def mps_node_plan(settings, query_xml, gres_conf="", node_names=(), slurm_gres=None):
    """The node's MPS daemons and gres/mps lines from ``settings`` (``mps_settings``), its ``nvidia-smi -q -x`` and,
    under Slurm, its gres.conf (``gres_conf``), its names in Slurm (``node_names``) and its Gres as Slurm has it
    (``slurm_gres``, None where not read)."""
    where = "gpuops.cluster.mps_node_plan"
    try:
        gpus = node_state(query_xml)["gpus"]
        return mps_node.plan(settings, gpus, gres_conf or "", list(node_names or ()), slurm_gres)
    except (MigStateError, mps_node.MpsNodeError) as exc:
        raise AnsibleFilterError("%s: %s; nothing was changed" % (where, exc)) from exc


class FilterModule:
    """gpuops.cluster MPS filters."""

    def filters(self):
        return {"mps_settings": mps_settings, "mps_node_plan": mps_node_plan}
