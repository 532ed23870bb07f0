"""Exact versions from the node's package index (module_utils/stack/package_index.py).

The versions below are NVIDIA's as listed in the team reference (nvidia-stack-facts.md, "Checked against
NVIDIA's package indexes and install scripts"): R580 on Ubuntu used -0ubuntu1 up to 580.105.08 and
-1ubuntu1 from 580.126.09; R590 590.48.01 is -0ubuntu1; R595/R610 -1ubuntu1; DCGM 4.0-4.2 debs carry no
revision, -1 from 4.3.1; RHEL drivers carry epoch 3. The madison line layout is apt-cache's own
(`name | version | uri dist/component arch Packages`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_index

REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"


def madison(rows):
    return "".join(" %s | %s | %s  Packages\n" % (name, version, REPO) for name, version in rows)


R580_UBUNTU = madison(
    [
        ("nvidia-driver-580", "580.126.09-1ubuntu1"),
        ("nvidia-driver-580", "580.105.08-0ubuntu1"),
        ("nvidia-driver-580", "580.95.05-0ubuntu1"),
        ("nvidia-fabricmanager", "580.126.09-1ubuntu1"),
        ("nvidia-fabricmanager", "580.105.08-1"),
        ("nvidia-fabricmanager", "580.95.05-1"),
        ("libnvidia-nscq", "580.126.09-1ubuntu1"),
        ("libnvidia-nscq", "580.105.08-1"),
        ("libnvidia-nscq", "580.95.05-1"),
        ("datacenter-gpu-manager-4-core", "1:4.5.2-1"),
        ("datacenter-gpu-manager-4-core", "1:4.2.2"),
        ("libnccl2", "2.27.7-1+cuda13.0"),
        ("libnccl2", "2.27.7-1+cuda12.9"),
    ]
)

DRIVER = [
    {"component": "driver", "name": "nvidia-driver-580", "version": "580.95.05", "follows_driver": True},
    {"component": "fabricmanager", "name": "nvidia-fabricmanager", "version": "580.95.05", "follows_driver": True},
    {"component": "fabricmanager", "name": "libnvidia-nscq", "version": "580.95.05", "follows_driver": True},
]
PINS = [
    {
        "component": "driver",
        "names": ["nvidia-driver-580", "nvidia-*-580"],
        "version": "580.95.05",
        "follows_driver": True,
    },
    {"component": "nccl", "names": ["libnccl2"], "version": "2.27.7-*+cuda12.9", "follows_driver": False},
]
NCCL = [{"component": "nccl", "name": "libnccl2", "version": "2.27.7-*+cuda12.9", "follows_driver": False}]


def branch(number="580", **kwargs):
    return {"branch": number, "exact": None, "floor": None, "skip": [], "upgrade": False, **kwargs}


@pytest.mark.parametrize(
    ("requested", "available", "expected"),
    [
        ("580.126.09", "580.126.09-1ubuntu1", True),
        ("580.126.09", "580.126.09-0ubuntu1", True),
        ("580.126.09", "3:580.126.09-1.el9", True),
        ("580.126.09", "580.126.090-1", False),
        ("580.126.09", "580.126.1-1", False),
        ("4.5.2", "1:4.5.2-1", True),
        ("4.1.1", "1:4.1.1", True),
        ("2.27.7-*+cuda12.9", "2.27.7-1+cuda12.9", True),
        ("2.27.7-*+cuda12.9", "2.27.7-1+cuda13.0", False),
        ("580.126.09-1ubuntu1", "580.126.09-1ubuntu1", True),
        ("580.126.09-1ubuntu1", "580.126.09-0ubuntu1", False),
        ("3:580.126.09-1.el9", "580.126.09-1.el9", False),
        ("580.126.09", "not a version", False),
    ],
)
def test_matches_by_upstream_version(requested, available, expected):
    assert package_index.matches(requested, available) is expected


def test_madison_keeps_binary_packages_and_the_repository():
    text = R580_UBUNTU + " nvidia-driver-580 | 580.126.09-1ubuntu1 | %s  Sources\n" % REPO
    index = package_index.parse_apt_madison(text)
    assert [e["version"] for e in index["nvidia-driver-580"]] == [
        "580.126.09-1ubuntu1",
        "580.105.08-0ubuntu1",
        "580.95.05-0ubuntu1",
    ]
    assert index["libnccl2"][0]["source"] == REPO


def test_madison_rejects_other_output():
    with pytest.raises(package_index.PackageIndexError, match="unexpected apt-cache madison line"):
        package_index.parse_apt_madison("N: Unable to locate package nvidia-driver-580\n")


def test_dnf_repoquery_drops_epoch_zero_and_keeps_the_repo():
    text = (
        "Updating Subscription Management repositories.\n"
        "nvidia-driver 3:580.126.09-1.el9 cuda-rhel9-x86_64\n"
        "nvidia-driver 3:580.105.08-1.el9 cuda-rhel9-x86_64\n"
        "nvidia-fabricmanager 0:580.126.09-1 cuda-rhel9-x86_64\n"
    )
    index = package_index.parse_dnf_repoquery(text)
    assert [e["version"] for e in index["nvidia-driver"]] == ["3:580.126.09-1.el9", "3:580.105.08-1.el9"]
    assert index["nvidia-fabricmanager"] == [{"version": "580.126.09-1", "source": "cuda-rhel9-x86_64"}]


def test_branch_takes_the_newest_release_with_every_companion_across_the_revision_change():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    result = package_index.resolve(DRIVER + NCCL, PINS, branch(), index, {})
    assert result["problems"] == []
    assert result["driver_version"] == "580.126.09"
    assert [p["spec"] for p in result["packages"]] == [
        "nvidia-driver-580=580.126.09-1ubuntu1",
        "nvidia-fabricmanager=580.126.09-1ubuntu1",
        "libnvidia-nscq=580.126.09-1ubuntu1",
        "libnccl2=2.27.7-1+cuda12.9",
    ]
    assert [p["version"] for p in result["pins"]] == ["580.126.09-1ubuntu1", "2.27.7-1+cuda12.9"]
    assert result["repositories"] == [REPO]


def test_branch_skips_a_release_whose_companion_is_missing():
    text = R580_UBUNTU.replace(" nvidia-fabricmanager | 580.126.09-1ubuntu1 | %s  Packages\n" % REPO, "")
    result = package_index.resolve(DRIVER, [], branch(), package_index.parse_apt_madison(text), {})
    assert result["driver_version"] == "580.105.08"
    assert result["packages"][0]["version"] == "580.105.08-0ubuntu1"
    assert result["packages"][1]["version"] == "580.105.08-1"


def test_branch_keeps_the_release_the_node_runs_and_reports_the_newer_one():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    installed = {"nvidia-driver-580": "580.105.08-0ubuntu1", "nvidia-fabricmanager": "580.105.08-1"}
    result = package_index.resolve(DRIVER, [], branch(), index, installed)
    assert result["kept_installed"] is True
    assert result["driver_version"] == "580.105.08"
    assert result["newer_available"] == "580.126.09"
    assert [p["version"] for p in result["packages"]] == ["580.105.08-0ubuntu1", "580.105.08-1", "580.105.08-1"]


def test_upgrade_moves_to_the_newest_release():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    installed = {"nvidia-driver-580": "580.105.08-0ubuntu1"}
    result = package_index.resolve(DRIVER, [], branch(upgrade=True), index, installed)
    assert (result["driver_version"], result["kept_installed"]) == ("580.126.09", False)


def test_a_node_on_another_branch_moves_to_the_newest_of_the_requested_one():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    result = package_index.resolve(DRIVER, [], branch(), index, {"nvidia-driver-580": "570.211.01-0ubuntu1"})
    assert (result["driver_version"], result["kept_installed"]) == ("580.126.09", False)


def test_floor_and_known_bad_releases_are_skipped():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    result = package_index.resolve(DRIVER, [], branch(skip=["580.126.09"]), index, {})
    assert result["driver_version"] == "580.105.08"
    kept = package_index.resolve(
        DRIVER, [], branch(floor="580.105.08"), index, {"nvidia-driver-580": "580.95.05-0ubuntu1"}
    )
    assert kept["driver_version"] == "580.126.09"
    refused = package_index.resolve(DRIVER, [], branch(floor="580.200.01"), index, {})
    assert refused["packages"] == []
    assert refused["problems"] == [
        "nvidia-driver-580: no R580 release in the repository is allowed (the stack needs 580.200.01 or newer); "
        "the repository holds 580.126.09-1ubuntu1, 580.105.08-0ubuntu1, 580.95.05-0ubuntu1"
    ]


def test_an_exact_release_the_repository_lacks_names_what_it_holds():
    index = package_index.parse_apt_madison(R580_UBUNTU)
    result = package_index.resolve(DRIVER, [], branch(exact="580.178.04"), index, {})
    assert result["packages"] == []
    assert result["problems"] == [
        "nvidia-driver-580 580.178.04: the repository holds 580.126.09-1ubuntu1, 580.105.08-0ubuntu1, "
        "580.95.05-0ubuntu1",
        "nvidia-fabricmanager 580.178.04: the repository holds 580.126.09-1ubuntu1, 580.105.08-1, 580.95.05-1",
        "libnvidia-nscq 580.178.04: the repository holds 580.126.09-1ubuntu1, 580.105.08-1, 580.95.05-1",
    ]


def test_a_mirror_without_fabric_manager_is_refused():
    text = "".join(line + "\n" for line in R580_UBUNTU.splitlines() if "fabricmanager" not in line)
    result = package_index.resolve(DRIVER, [], branch(), package_index.parse_apt_madison(text), {})
    assert result["problems"] == ["nvidia-fabricmanager 580.126.09: the repository holds no version"]


def test_a_component_not_tied_to_the_driver_is_matched_by_upstream():
    dcgm = [{"component": "dcgm", "name": "datacenter-gpu-manager-4-core", "version": "4.2.2"}]
    result = package_index.resolve(dcgm, [], None, package_index.parse_apt_madison(R580_UBUNTU), {})
    assert result["packages"][0]["spec"] == "datacenter-gpu-manager-4-core=1:4.2.2"
    missing = package_index.resolve(
        [{"component": "nccl", "name": "libnccl2", "version": "2.28.9-*+cuda13.0"}],
        [],
        None,
        package_index.parse_apt_madison(R580_UBUNTU),
        {},
    )
    assert missing["problems"] == [
        "libnccl2 2.28.9-*+cuda13.0: the repository holds 2.27.7-1+cuda13.0, 2.27.7-1+cuda12.9"
    ]


def test_dnf_specs_carry_the_epoch():
    text = "nvidia-driver 3:580.126.09-1.el9 cuda-rhel9-x86_64\n"
    requested = [{"component": "driver", "name": "nvidia-driver", "version": "580.95.05", "follows_driver": True}]
    result = package_index.resolve(
        requested, [], branch(), package_index.parse_dnf_repoquery(text), {}, package_manager="dnf"
    )
    assert result["packages"][0]["spec"] == "nvidia-driver-3:580.126.09-1.el9"


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "package_index"


def test_real_madison_excerpt_r590_and_r595_revisions():
    # tests/fixtures/package_index/README.md: apt-cache madison nvidia-open on ubuntu2404/sbsa, as published.
    text = (FIXTURES / "ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt").read_text(encoding="utf-8")
    index = package_index.parse_apt_madison("\n".join(line for line in text.splitlines() if not line.startswith("$")))
    requested = [{"component": "driver", "name": "nvidia-open", "version": "595.58.03", "follows_driver": True}]
    assert package_index.resolve(requested, [], branch("595"), index, {})["packages"][0]["spec"] == (
        "nvidia-open=595.91.07-1ubuntu1"
    )
    assert package_index.resolve(requested, [], branch("590"), index, {})["packages"][0]["spec"] == (
        "nvidia-open=590.48.01-0ubuntu1"
    )


def test_real_r580_file_list_crosses_the_revision_change():
    # The .deb names of cuda-drivers-580 in repos/ubuntu2404/sbsa (fixture README): -0ubuntu1 up to 580.105.08.
    index = {}
    for line in (FIXTURES / "ubuntu2404-sbsa-cuda-drivers-580-filenames.txt").read_text(encoding="utf-8").split():
        name, version, _arch = line.removesuffix(".deb").split("_")
        index.setdefault(name, []).append({"version": version, "source": "ubuntu2404/sbsa"})
    requested = [{"component": "driver", "name": "cuda-drivers-580", "version": "580.65.06", "follows_driver": True}]
    newest = package_index.resolve(requested, [], branch(), index, {})
    assert newest["packages"][0]["spec"] == "cuda-drivers-580=580.159.04-1ubuntu1"
    exact = package_index.resolve(requested, [], branch(exact="580.105.08"), index, {})
    assert exact["packages"][0]["spec"] == "cuda-drivers-580=580.105.08-0ubuntu1"
    kept = package_index.resolve(requested, [], branch(), index, {"cuda-drivers-580": "580.95.05-0ubuntu1"})
    assert (kept["driver_version"], kept["newer_available"]) == ("580.95.05", "580.159.04")


def test_dnf_4_lists_the_packages_of_every_module_stream_dnf_5_has_no_such_option():
    """The lab's dnf node: NVIDIA's driver packages are modular; with no stream enabled (a first install) dnf 4's
    plain repoquery listed none of them, and the role refused a repository that holds the stack."""
    argv = package_index.dnf_repoquery_argv("/usr/bin/dnf", ["nvidia-driver", "kmod-nvidia-open-dkms"])
    assert argv[:5] == ["/usr/bin/dnf", "repoquery", "-q", "--showduplicates", "--disable-modular-filtering"]
    assert argv[-2:] == ["nvidia-driver", "kmod-nvidia-open-dkms"]
    assert "--disable-modular-filtering" not in package_index.dnf_repoquery_argv("/usr/bin/dnf5", ["x"], dnf5=True)
