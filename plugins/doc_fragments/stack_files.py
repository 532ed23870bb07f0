# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Where the NVIDIA stack's pins live on a node, and which package manager owns them.

    Shared by ``package_pin`` (writes these files) and ``gpu_stack_facts`` (reports them), so the two
    always name the same paths with the same defaults.
    """

    DOCUMENTATION = r"""
options:
  preferences_path:
    description:
      - The apt preferences file with the NVIDIA stack's version pins. M(gpuops.cluster.package_pin) owns it,
        M(gpuops.cluster.gpu_stack_facts) reports its pins.
    type: path
    default: /etc/apt/preferences.d/gpuops-nvidia.pref
  unattended_upgrades_path:
    description:
      - The apt.conf drop-in with the C(Unattended-Upgrade::Package-Blacklist) entries that keep unattended-upgrades
        away from the pinned packages.
    type: path
    default: /etc/apt/apt.conf.d/51gpuops-nvidia-blacklist
  versionlock_path:
    description:
      - The dnf versionlock plugin's list (its C(locklist) setting). Its locks are the pins on the dnf family.
    type: path
    default: /etc/dnf/plugins/versionlock.list
  package_manager:
    description:
      - The package manager family of the node. V(auto) picks V(apt) when the apt tools exist (C(apt-mark) for
        M(gpuops.cluster.package_pin), C(dpkg-query) for M(gpuops.cluster.gpu_stack_facts)), else V(dnf) when
        C(dnf) (or C(rpm)) exists.
    type: str
    choices: [auto, apt, dnf]
    default: auto
"""
