"""The matrix gap (module_utils/stack/matrix_gap.py) on real package listings (issue 27 item 4).

Each listing is a real excerpt under tests/fixtures/package_index/ (sources in its README.md), read by the parser the
command uses. The matrix is the collection's, with the entry under test taken out (or kept) so the case does not
depend on what the matrix lists today: a release the matrix lacks is listed with its rule, one it has is not.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import matrix_gap, repository_listing
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    DEFAULT_MATRIX_PATH,
    StackMatrix,
)

LISTINGS = Path(__file__).resolve().parents[2] / "fixtures" / "package_index"
SHIPPED = yaml.safe_load(DEFAULT_MATRIX_PATH.read_text(encoding="utf-8"))


def matrix(edit=None):
    """The collection's matrix, edited by ``edit(data)`` (a copy: the shipped one is untouched)."""
    data = copy.deepcopy(SHIPPED)
    if edit:
        edit(data)
    return StackMatrix(data)


def branch(data, number):
    return next(entry for entry in data["driver_branches"] if entry["branch"] == number)


def without_release(number, release):
    def edit(data):
        entry = branch(data, number)
        entry["releases"] = [item for item in entry["releases"] if item["version"] != release]

    return edit


def with_release(number, release):
    def edit(data):
        entry = branch(data, number)
        if release not in [item["version"] for item in entry["releases"]]:
            entry["releases"].append({"version": release, "source": "unverified"})
            entry["releases"].sort(key=lambda item: [int(part) for part in item["version"].split(".")])

    return edit


def both(*edits):
    def edit(data):
        for one in edits:
            one(data)

    return edit


def report_of(name, the_matrix):
    listing = repository_listing.read_listing(LISTINGS / name)
    return matrix_gap.gaps(the_matrix, listing["index"], listing["streams"], listing["source"], listing["format"])


def found(report, component, version):
    return [gap for gap in report["gaps"] if gap["component"] == component and gap["version"] == version]


# ----------------------------------------------------------------------------- driver releases


def test_apt_madison_release_the_matrix_lacks_is_listed_with_its_rule_and_one_it_has_is_not():
    """apt-cache madison nvidia-open on ubuntu2404/sbsa: 610.57.04, 595.91.07, 590.48.01 (-0ubuntu1/-1ubuntu1)."""
    the_matrix = matrix(both(without_release(610, "610.57.04"), with_release(595, "595.91.07")))
    report = report_of("ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt", the_matrix)
    assert report["format"] == "apt-cache madison"
    [gap] = found(report, "driver", "610.57.04")
    assert gap["rules"] == [
        'driver 610.57.04 in branch 610: add {version: "610.57.04", source: <id>} to '
        "driver_branches[R610].releases (oldest first)"
    ]
    assert gap["packages"] == ["nvidia-open 610.57.04-1ubuntu1"]
    assert gap["sources"] == [".../compute/cuda/repos/ubuntu2404/sbsa"]
    assert not found(report, "driver", "595.91.07")
    assert [g["version"] for g in report["gaps"]] == ["610.57.04"]


def test_a_branch_the_matrix_lacks_is_one_gap_naming_the_branch_entry_and_its_releases():
    def drop_r610(data):
        data["driver_branches"] = [entry for entry in data["driver_branches"] if entry["branch"] != 610]

    report = report_of("ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt", matrix(drop_r610))
    [gap] = found(report, "driver", "R610")
    assert gap["detail"] == "releases 610.57.04"
    assert gap["rules"][0].startswith(
        "driver branch R610 is not in the matrix: add a driver_branches entry {branch: 610,"
    )
    assert gap["rules"][1] == "list its releases 610.57.04 in driver_branches[R610].releases (oldest first)"
    assert "packaging rule" in gap["rules"][2]


def test_releases_older_than_the_matrix_tracks_are_counted_not_listed():
    index = {"nvidia-driver-470": [{"version": "470.256.02-0ubuntu1", "source": "archive"}]}
    report = matrix_gap.gaps(matrix(), index)
    assert report["gaps"] == []
    assert report["older"] == {"driver": ["R470"]}


def test_known_bad_release_is_known_to_the_matrix():
    def bad(data):
        entry = branch(data, 610)
        entry["releases"] = [item for item in entry["releases"] if item["version"] != "610.57.04"]
        entry["known_bad"] = [{"version": "610.57.04", "reason": "test", "source": "unverified"}]

    report = report_of("ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt", matrix(bad))
    assert not found(report, "driver", "610.57.04")


def test_rpm_repoquery_release_the_matrix_lacks_is_listed():
    """dnf repoquery '*kmod*' on RHEL 9: kmod-nvidia-open-dkms-3:595.{45.04,58.03,71.05}-1.el9 (epoch 3)."""
    the_matrix = matrix(both(without_release(595, "595.71.05"), with_release(595, "595.58.03")))
    report = report_of("rhel9-dnf-repoquery-kmod.txt", the_matrix)
    [gap] = found(report, "driver", "595.71.05")
    assert gap["packages"] == ["kmod-nvidia-open-dkms 3:595.71.05-1.el9"]
    assert "driver_branches[R595].releases" in gap["rules"][0]
    assert not found(report, "driver", "595.58.03")


def test_apt_packages_file_release_the_matrix_lacks_is_listed_and_one_it_has_is_not():
    """Debian's own Packages files: bookworm-backports nvidia-driver 535.216.03-2~bpo12+1, bookworm 535.261.03-1."""
    the_matrix = matrix(both(without_release(535, "535.216.03"), with_release(535, "535.261.03")))
    report = report_of("debian12-backports-non-free-packages-nvidia-driver.txt", the_matrix)
    assert report["format"] == "apt Packages"
    [gap] = found(report, "driver", "535.216.03")
    assert gap["packages"] == ["nvidia-driver 535.216.03-2~bpo12+1"]
    assert report_of("debian12-non-free-packages-nvidia-driver.txt", the_matrix)["gaps"] == []


# ----------------------------------------------------------------------------- NCCL, CUDA, DCGM


def test_nccl_release_and_build_the_matrix_lacks_are_listed_with_their_rules():
    """apt policy libnccl-dev on ubuntu2204: 2.28.9 and 2.28.7 for cuda13.0 and cuda12.9, 2.28.3 for cuda13.0."""

    def edit(data):
        data["nccl"] = [entry for entry in data["nccl"] if entry["version"] != "2.28.7"]
        nccl = {entry["version"]: entry for entry in data["nccl"]}
        nccl["2.28.9"]["cuda"] = ["13.0"]
        nccl["2.28.9"].pop("build_sources", None)
        assert nccl["2.28.3"]["cuda"] == ["13.0"]

    report = report_of("ubuntu2204-apt-policy-libnccl-dev.txt", matrix(edit))
    assert report["format"] == "apt-cache policy"
    [new] = found(report, "nccl", "2.28.7")
    assert new["rules"] == [
        'NCCL 2.28.7 built for cuda12.9, cuda13.0: add {version: "2.28.7", cuda: ["12.9", "13.0"], source: <id>} '
        "to nccl (oldest first)"
    ]
    assert new["sources"] == ["https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"]
    [build] = found(report, "nccl", "2.28.9")
    assert build["detail"] == "built for cuda12.9"
    assert build["rules"][0].startswith('NCCL 2.28.9 built for cuda12.9: add "12.9" to nccl[2.28.9].cuda')
    assert not found(report, "nccl", "2.28.3")


def test_nccl_build_for_a_cuda_the_matrix_lacks_says_to_add_the_cuda_release_first():
    index = {"libnccl2": [{"version": "2.32.3-1+cuda13.4", "source": "seen"}]}  # nccl_seen_2026 in the matrix
    report = matrix_gap.gaps(matrix(), index)
    [gap] = found(report, "nccl", "2.32.3")
    assert any(
        rule.startswith("CUDA 13.4 is not in cuda.releases: add the CUDA release first") for rule in gap["rules"]
    )


def test_debian_own_nccl_package_is_left_out_not_a_gap():
    """Debian sid contrib libnccl2 2.29.7-1-1: Debian's build, no +cuda<X.Y>."""
    report = report_of("debian-sid-contrib-packages-libnccl2.txt", matrix())
    assert report["gaps"] == []
    assert report["skipped"] == ["libnccl2 2.29.7-1-1: not NVIDIA's <nccl>-<revision>+cuda<X.Y> build"]


def test_cuda_minor_and_update_the_matrix_lacks_need_a_minimum_driver_from_the_release_notes():
    # cuda-toolkit-13-0 13.0.2-1 and 13.0.3 (seen-versions.md, Nebius label cuda_version 13.0.3-1); 13.3.x: the
    # CUDA 13.3 runfiles (matrix source cuda_runfiles).
    index = {
        "cuda-toolkit-13-0": [{"version": "13.0.2-1", "source": "r"}, {"version": "13.0.3-1", "source": "r"}],
        "cuda-toolkit-13-3": [{"version": "13.3.0-1", "source": "r"}, {"version": "13.3.1-1", "source": "r"}],
    }

    def edit(data):
        data["cuda"]["releases"] = [entry for entry in data["cuda"]["releases"] if entry["version"] != "13.3"]
        minor = next(entry for entry in data["cuda"]["releases"] if entry["version"] == "13.0")
        minor["updates"] = [update for update in minor["updates"] if update["version"] != "13.0.3"]
        data["nccl"] = [entry for entry in data["nccl"] if "13.3" not in entry["cuda"]]

    report = matrix_gap.gaps(matrix(edit), index)
    [minor] = found(report, "cuda", "13.3")
    assert minor["detail"] == "updates 13.3.0, 13.3.1"
    assert minor["rules"][0].startswith('CUDA 13.3: add a cuda.releases entry {version: "13.3", source: <id>, updates:')
    assert minor["rules"][1].startswith("CUDA 13.3 needs minimum driver ...: minimum driver: unknown, check the CUDA")
    [update] = found(report, "cuda", "13.0.3")
    assert update["rules"][0].startswith('CUDA 13.0.3: add {version: "13.0.3", min_driver: ...} to cuda.releases[13.0]')
    assert not found(report, "cuda", "13.0.2")


def test_cuda_major_without_compat_entry_asks_for_one():
    index = {"cuda-toolkit-14-0": [{"version": "14.0.0-1", "source": "r"}]}
    [gap] = matrix_gap.gaps(matrix(), index)["gaps"]
    assert gap["rules"][-1].startswith("CUDA major 14 has no cuda.minor_version_compat entry")


def test_dcgm_release_and_cuda_major_the_matrix_lacks_are_listed():
    # datacenter-gpu-manager-4-core 1:4.5.2-1 (matrix source agentbaker_pr7855); -cuda11 4.5.3 (dcgm_repo).
    index = {
        "datacenter-gpu-manager-4-core": [
            {"version": "1:4.5.2-1", "source": "r"},
            {"version": "1:4.7.0-1", "source": "r"},
        ],
        "datacenter-gpu-manager-4-cuda12": [{"version": "1:4.7.0-1", "source": "r"}],
        "datacenter-gpu-manager-4-cuda13": [{"version": "1:4.7.0-1", "source": "r"}],
        "datacenter-gpu-manager-4-cuda11": [{"version": "1:4.5.2-1", "source": "r"}],
    }

    def edit(data):
        data["dcgm"] = [entry for entry in data["dcgm"] if entry["version"] != "4.7.0"]
        entry = next(entry for entry in data["dcgm"] if entry["version"] == "4.5.2")
        entry["cuda_majors"] = [12, 13]

    report = matrix_gap.gaps(matrix(edit), index)
    [new] = found(report, "dcgm", "4.7.0")
    assert new["rules"] == [
        'DCGM 4.7.0: add {version: "4.7.0", major: 4, cuda_majors: [12, 13], source: <id>} to dcgm (oldest first)'
    ]
    [major] = found(report, "dcgm", "4.5.2")
    assert major["rules"] == ["DCGM 4.5.2 has -cuda11 packages: add 11 to dcgm[4.5.2].cuda_majors"]


# ----------------------------------------------------------------------------- rpm module streams


def test_module_streams_against_the_rhel_driver_rules():
    # Stream names as NVIDIA's genmodules.py writes them (<branch>, <branch>-dkms; -open in the R580+ guides).
    index = {"nvidia-driver": [{"version": "3:595.71.05-1.el9", "source": "r"}]}
    streams = ["nvidia-driver:595-open", "nvidia-driver:620-dkms", "nvidia-driver:latest-dkms"]
    report = matrix_gap.gaps(matrix(), index, streams=streams)
    [unpublished] = found(report, "packaging", "nvidia-driver:620-dkms")
    assert "published: false" in unpublished["rules"][0]
    [absent] = found(report, "packaging", "nvidia-driver:595-dkms")
    assert absent["detail"] == "R595 proprietary modules"
    assert not found(report, "packaging", "nvidia-driver:595-open")


# ----------------------------------------------------------------------------- bad input and the text


def test_an_index_that_is_not_a_mapping_is_refused():
    with pytest.raises(matrix_gap.GapError, match="must map package names"):
        matrix_gap.gaps(matrix(), ["nvidia-driver"])


def test_watched_packages_come_from_the_packaging_rules():
    names = {name for _kind, name, _regex in matrix_gap.watched_packages(matrix())}
    assert {"cuda-toolkit-{cuda_dashed}", "libnccl2", "libnccl", "nvidia-open", "cuda-drivers-{branch}"} <= names
    assert "nvidia-fabricmanager" not in names  # a companion, not a driver release of its own
    assert matrix_gap.watched_names(matrix(), ["cuda-toolkit-13-0", "cuda-toolkit", "libnccl2", "vim"]) == [
        "cuda-toolkit-13-0",
        "libnccl2",
    ]
    assert "cuda-toolkit-*" in matrix_gap.query_globs(matrix())


def test_render_shows_the_table_and_the_rules():
    the_matrix = matrix(without_release(610, "610.57.04"))
    lines = matrix_gap.render(report_of("ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt", the_matrix))
    assert lines[1].split() == ["COMPONENT", "VERSION", "IN", "THE", "REPOSITORY"]
    assert lines[2].split() == ["driver", "610.57.04", "nvidia-open", "610.57.04-1ubuntu1"]
    assert any("driver_branches[R610].releases" in line for line in lines)
    assert matrix_gap.render(matrix_gap.gaps(the_matrix, {}))[1].startswith("No gap")


def test_dcgm_3_has_one_package_its_cuda_majors_come_from_the_release_notes():
    # datacenter-gpu-manager 1:3.3.6 (matrix source nvidia_repo_ubuntu2404) is listed; DCGM 2 predates the matrix.
    index = {"datacenter-gpu-manager": [{"version": "1:3.3.6", "source": "r"}, {"version": "1:2.4.8", "source": "r"}]}
    report = matrix_gap.gaps(matrix(), index)
    assert report["gaps"] == []
    assert report["older"] == {"dcgm": ["2.4.8"]}

    def drop(data):  # the matrix keeps a DCGM 3 entry, an older one, so DCGM 3 is still tracked
        next(entry for entry in data["dcgm"] if entry["version"] == "3.3.6")["version"] = "3.3.5"

    [gap] = matrix_gap.gaps(matrix(drop), index)["gaps"]
    assert gap["rules"][1] == (
        "cuda_majors: unknown from this index (DCGM 3 ships one package): check the DCGM release notes"
    )


def test_a_release_only_a_companion_holds_says_to_check_it():
    # Debian's archive: nvidia-persistenced 535.171.04-1~deb12u1 beside nvidia-driver 535.261.03-1 (bookworm, apt-cache
    # madison on the Packages files of tests/fixtures/package_index/debian12-*; persistenced is its own source there).
    index = {
        "nvidia-persistenced": [{"version": "535.171.04-1~deb12u1", "source": "deb.debian.org bookworm/contrib"}],
        "nvidia-driver": [{"version": "535.261.03-1", "source": "deb.debian.org bookworm/non-free"}],
    }
    report = matrix_gap.gaps(matrix(both(without_release(535, "535.171.04"), with_release(535, "535.261.03"))), index)
    [gap] = report["gaps"]
    assert gap["version"] == "535.171.04"
    assert gap["rules"][1].startswith("only nvidia-persistenced holds it, no driver package: check that 535.171.04")
    report = report_of(
        "debian12-backports-non-free-packages-nvidia-driver.txt", matrix(without_release(535, "535.216.03"))
    )
    assert len(found(report, "driver", "535.216.03")[0]["rules"]) == 1  # nvidia-driver is the driver package
