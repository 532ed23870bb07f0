"""apt_install_argv: the one builder of the pin-free apt-get install (check mode's simulation, pre-staging)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import stack as stack_filters
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.apt_install_argv import apt_install_argv

SPECS = ["nvidia-driver-580-open=580.65.06-1", "libnccl2=2.27.7-1+cuda13.0"]


def test_simulate_is_the_install_without_the_nodes_pins():
    assert apt_install_argv(SPECS, "simulate") == [
        "apt-get",
        "install",
        "--simulate",
        "--quiet",
        "--allow-downgrades",
        "--allow-change-held-packages",
        "-o",
        "Dir::Etc::Preferences=/dev/null",
        "-o",
        "Dir::Etc::PreferencesParts=/nonexistent",
        "--no-install-recommends",
        *SPECS,
    ]


def test_download_takes_the_targets_pins_what_moves_and_the_removals():
    argv = apt_install_argv(
        SPECS,
        "download",
        install_recommends=True,
        preferences_parts="/var/cache/apt/gpuops-prestage",
        also=["nvidia-driver-cuda=580.65.06-1"],
        remove=["cuda-drivers-550"],
    )
    assert argv[:5] == ["apt-get", "install", "--download-only", "--yes", "--quiet"]
    assert "Dir::Etc::PreferencesParts=/var/cache/apt/gpuops-prestage" in argv
    assert "--no-install-recommends" not in argv
    assert argv[-4:] == [*SPECS, "nvidia-driver-cuda=580.65.06-1", "cuda-drivers-550-"]


def test_simulation_and_download_resolve_the_same_install():
    """Only the action differs: the rest of the argument list is one list."""
    simulated = apt_install_argv(SPECS, "simulate", remove=["x"])
    downloaded = apt_install_argv(SPECS, "download", remove=["x"])
    assert simulated[4:] == downloaded[5:]


@pytest.mark.parametrize(
    ("specs", "action", "message"),
    [
        (SPECS, "install", "action must be one of simulate, download"),
        ("nvidia-driver=1", "simulate", "specs must be a list"),
        ([], "simulate", "specs is empty"),
        (["ok=1", ""], "download", "specs must be a list"),
    ],
)
def test_bad_input_is_refused(specs, action, message):
    with pytest.raises(ValueError, match=message):
        apt_install_argv(specs, action)


def test_the_filter_wraps_the_builder_and_names_itself():
    assert stack_filters.apt_install_argv(SPECS, "simulate") == apt_install_argv(SPECS, "simulate")
    assert stack_filters.apt_install_argv(SPECS, "download", False, None, None, None) == apt_install_argv(
        SPECS, "download"
    )
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.apt_install_argv: action must be"):
        stack_filters.apt_install_argv(SPECS, "upgrade")
