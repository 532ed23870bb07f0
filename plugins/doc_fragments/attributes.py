# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The attribute texts every module repeats (community.general's ``attributes`` fragment pattern).

    A module extends ``gpuops.cluster.attributes`` and states only its ``support`` (and ``details``)
    per attribute; ``.platform`` and ``.facts`` add those attributes.
    """

    # Standard documentation fragment: check and diff mode.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description:
      Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
"""

    PLATFORM = r"""
options: {}
attributes:
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""
