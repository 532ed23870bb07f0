# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which areas of one task the run's --tags and --skip-tags select (docs: selected_by_tags.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean


def selected_by_tags(areas, run_tags, skip_tags, enabled=None):
    """Names of ``areas`` (name -> its tags) that Ansible would run as separate tasks with those tags.

    An area runs when --tags selects it (``all``, ``tagged``, or one of its tags) and --skip-tags
    names none of its tags, as Ansible decides for a task; with ``enabled`` (name -> its switch),
    also only when its switch is on.
    """
    if not isinstance(areas, dict):
        raise AnsibleFilterError("gpuops.cluster.selected_by_tags: the input must map each area to its list of tags")
    if enabled is not None and not isinstance(enabled, dict):
        raise AnsibleFilterError("gpuops.cluster.selected_by_tags: enabled must map each area to its switch")
    run, skip = set(run_tags or ["all"]), set(skip_tags or [])
    chosen = []
    for name, tags in areas.items():
        if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
            raise AnsibleFilterError(f"gpuops.cluster.selected_by_tags: the tags of {name!r} must be a list")
        own = set(tags)
        if enabled is not None and not boolean(enabled.get(name, False), strict=False):
            continue
        if ({"all", "tagged"} & run or own & run) and not own & skip and not {"all", "tagged"} & skip:
            chosen.append(name)
    return chosen


class FilterModule:
    """gpuops.cluster tag filters."""

    def filters(self):
        return {"selected_by_tags": selected_by_tags}
