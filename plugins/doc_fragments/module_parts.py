# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """How a module that runs other modules' work as parts behaves (node_tuning, node_stack).

    The parts' own options and return values stay documented on their modules; this fragment
    says once what running them together in one execution changes and what it keeps.
    """

    DOCUMENTATION = r"""
options: {}
notes:
  - Each option is the options of the module of the same name, checked against that module's own argument spec; an
    option left out (or null) does not run that module. The parts run in the order of the options.
  - The same code as each module runs, with the same results, check mode and diff mode; what changes is the cost, one
    remote execution for all the parts.
  - Every part's options are checked before the first part runs. A part's bad option fails the call with the part named,
    and nothing changes.
  - A part that fails stops the call. The parts before it have run (as separate tasks would have); their results come
    back with the failure, in RV(results), and the failed part in RV(failed_part).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff entries of every part, in order.
"""
