"""selected_by_tags: the areas of one task that --tags and --skip-tags select, as for separate tasks."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.tags import selected_by_tags

AREAS = {
    "sysctl_profile": ["sysctl", "numa", "rdma"],
    "irq_affinity": ["irq"],
    "rdma_dropins": ["memlock", "peermem", "rdma"],
}


@pytest.mark.parametrize(
    ("run_tags", "skip_tags", "selected"),
    [
        (["all"], [], ["sysctl_profile", "irq_affinity", "rdma_dropins"]),
        ([], [], ["sysctl_profile", "irq_affinity", "rdma_dropins"]),
        (["irq"], [], ["irq_affinity"]),
        (["rdma"], [], ["sysctl_profile", "rdma_dropins"]),
        (["all"], ["sysctl"], ["irq_affinity", "rdma_dropins"]),
        (["all"], ["rdma"], ["irq_affinity"]),
        (["tagged"], [], ["sysctl_profile", "irq_affinity", "rdma_dropins"]),
        (["untagged"], [], []),
        (["nvidia_stack"], [], []),
        (["peermem", "irq"], ["memlock"], ["irq_affinity"]),
        (["all"], ["tagged"], []),
    ],
)
def test_selection_matches_separate_tasks(run_tags, skip_tags, selected):
    assert selected_by_tags(AREAS, run_tags, skip_tags) == selected


def test_bad_input_says_what_to_give():
    with pytest.raises(AnsibleFilterError, match="map each area to its list of tags"):
        selected_by_tags(["irq"], ["all"], [])
    with pytest.raises(AnsibleFilterError, match="the tags of 'irq_affinity' must be a list"):
        selected_by_tags({"irq_affinity": "irq"}, ["all"], [])


def test_switched_off_areas_are_not_selected():
    switches = {"sysctl_profile": True, "irq_affinity": "false", "rdma_dropins": False}
    assert selected_by_tags(AREAS, ["all"], [], switches) == ["sysctl_profile"]
    assert selected_by_tags(AREAS, ["irq"], [], switches) == []
    assert selected_by_tags(AREAS, ["all"], [], {"irq_affinity": True}) == ["irq_affinity"]
    with pytest.raises(AnsibleFilterError, match="enabled must map each area to its switch"):
        selected_by_tags(AREAS, ["all"], [], ["irq_affinity"])
