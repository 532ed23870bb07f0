"""installed_versions / moved_components: what nvidia_stack_report says of the node's packages."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.stack_report import installed_versions, moved_components

RESOLVED = [
    {"name": "cuda-drivers-580", "component": "driver"},
    {"name": "nvidia-fabricmanager-580", "component": "fabricmanager"},
    {"name": "nvidia-driver", "component": "driver"},
    {"name": "datacenter-gpu-manager-4-core", "component": "dcgm"},
]


def test_installed_versions_of_the_read_packages():
    packages = {
        "cuda-drivers-580": {"installed": "580.65.06-1", "requested": "580.95.05-1"},
        "nvidia-fabricmanager-580": {"installed": None, "requested": "580.95.05-1"},
    }
    assert installed_versions(packages) == {"cuda-drivers-580": "580.65.06-1", "nvidia-fabricmanager-580": None}
    assert installed_versions({}) == {}
    with pytest.raises(AnsibleFilterError, match="installed_versions: the input must be"):
        installed_versions([])


def test_moved_components_once_each_in_the_stack_order():
    moved = ["nvidia-driver", "datacenter-gpu-manager-4-core", "cuda-drivers-580"]
    assert moved_components(RESOLVED, moved) == ["driver", "dcgm"]
    assert moved_components(RESOLVED, []) == []
    with pytest.raises(AnsibleFilterError, match="moved_components: the input must be"):
        moved_components({"name": "x"}, moved)
