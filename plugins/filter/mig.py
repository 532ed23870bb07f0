# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The MIG profile set of a host's GPU model, for gpu_mig's profile_set (docs: mig_profile_set.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_sync, mig_layout, mig_profiles
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix


def mig_profile_set(gpu):
    """The profiles of ``gpu`` (a ``gpuops_gpu``: a matrix key or a product name), or None for a GPU without MIG.

    ``{"name": "h100-80gb", "profiles": [{"name", "id", "compute", "memory", "max", "placements"}]}``, from
    ``matrix/mig_profiles.yml``. A GPU the matrix does not know, whose profiles are not recorded, or a key naming
    models of different profiles is an error that says what to set.
    """
    where = "gpuops.cluster.mig_profile_set"
    if not isinstance(gpu, str) or not gpu:
        raise AnsibleFilterError("%s: give the host's gpuops_gpu (a matrix GPU key or a product name)" % where)
    entry = default_matrix().gpu(gpu)
    if entry is None:
        raise AnsibleFilterError("%s: %r is no GPU of the compatibility matrix" % (where, gpu))
    model = mig_profiles.default_profiles().model(entry["key"], product=gpu)
    if model["mig"] == "no":
        return None
    if model["mig"] == "unlisted":
        raise AnsibleFilterError(
            "%s: the MIG profiles of %s are not recorded in matrix/mig_profiles.yml yet" % (where, entry["key"])
        )
    if model["mig"] == "ambiguous":
        raise AnsibleFilterError(
            "%s: %r names GPUs of different MIG profiles (%s): give the product name nvidia-smi prints"
            % (where, gpu, ", ".join(model["products"]))
        )
    chosen = model["set"]
    return {
        "name": chosen["name"],
        "profiles": [dict(profile, name=name) for name, profile in chosen["profiles"].items()],
    }


def mig_declared(spec, config, gpu):
    """The layout ``gpuops_mig`` (``spec``) declares for a host of ``gpu``: ``{"config": name, "entries": [...]}``,
    the entries of the config ``config`` names as mig-parted reads them, for gpu_health's ``mig_declared``.

    The layout is checked as the validation play checks it (``mig_layout.problems``); a problem is an error naming
    the variable and the fix. The node resolves each GPU's entry by its index and PCI device id, as gpu_mig does.
    """
    where = "gpuops.cluster.mig_declared"
    found = mig_layout.problems(spec, config, gpu, default_matrix(), mig_profiles.default_profiles())
    if found:
        raise AnsibleFilterError("%s: %s" % (where, "; ".join(found)))
    if spec is None:
        return None
    return {"config": config, "entries": [dict(entry) for entry in spec["mig-configs"][config]]}


def slurm_gres_differs(slurm_gres, wanted):
    """None when the node's gres as Slurm has it (``slurm_fleet``'s ``gres``) gives the GPUs ``wanted`` (the
    ``Gres=`` gpuops.cluster.slurm_gres returned), else one line saying what differs (:mod:`gres_sync`)."""
    if slurm_gres is not None and not isinstance(slurm_gres, str):
        raise AnsibleFilterError("gpuops.cluster.slurm_gres_differs: give the node's gres as Slurm has it (a string)")
    if not isinstance(wanted, str):
        raise AnsibleFilterError("gpuops.cluster.slurm_gres_differs: give the Gres= slurm_gres returned (a string)")
    return gres_sync.slurm_gres_differs(slurm_gres, wanted)


class FilterModule:
    """gpuops.cluster MIG filters."""

    def filters(self):
        return {
            "mig_profile_set": mig_profile_set,
            "mig_declared": mig_declared,
            "slurm_gres_differs": slurm_gres_differs,
        }
