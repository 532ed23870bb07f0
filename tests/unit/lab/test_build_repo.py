"""The lab repositories' specs as build_repo.py expands them: names, revisions, companions, the partial mirror."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ROOT / "extensions" / "molecule" / "lab" / "packages"

_spec = importlib.util.spec_from_file_location("build_repo", PACKAGES / "build_repo.py")
build_repo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_repo)


def load(name):
    return yaml.safe_load((PACKAGES / name).read_text(encoding="utf-8"))


@pytest.fixture(name="ubuntu")
def fixture_ubuntu():
    spec = load("spec-ubuntu2204.yml")
    return spec, build_repo.expand(spec)


def versions(packages, name):
    return sorted(p["version"] for p in packages if p["name"] == name)


def test_r580_on_both_sides_of_the_revision_change(ubuntu):
    _spec, packages = ubuntu
    assert versions(packages, "nvidia-driver-580-open") == ["580.126.20-1ubuntu1", "580.65.06-0ubuntu1"]
    assert versions(packages, "nvidia-fabricmanager") == ["580.126.20-1", "580.65.06-1", "595.91.07-1ubuntu1"]
    driver = next(p for p in packages if p["name"] == "nvidia-driver-580-open" and p["version"].startswith("580.126"))
    assert driver["depends"] == [
        "nvidia-kernel-source-580-open (= 580.126.20-1ubuntu1)",
        "libnvidia-compute-580 (= 580.126.20-1ubuntu1)",
        "nvidia-compute-utils-580 (= 580.126.20-1ubuntu1)",
        "nvidia-utils-580 (= 580.126.20-1ubuntu1)",
    ]


def test_companions_carry_the_branch_before_r580_only(ubuntu):
    _spec, packages = ubuntu
    assert versions(packages, "nvidia-fabricmanager-535") == ["535.288.01-1"]
    assert versions(packages, "libnvidia-nscq-570") == ["570.211.01-1"]
    assert not versions(packages, "nvidia-fabricmanager-580")
    fabric = next(p for p in packages if p["name"] == "nvidia-fabricmanager" and p["version"] == "580.65.06-1")
    assert fabric["provides"] == ["nvidia-fabricmanager-580"]
    # a package never provides its own name
    assert all(p["name"] not in p["provides"] for p in packages)


def test_r590_is_0ubuntu1_without_fabric_manager_and_names_drop_the_branch(ubuntu):
    _spec, packages = ubuntu
    assert versions(packages, "nvidia-driver-open") == ["590.48.01-0ubuntu1", "595.91.07-1ubuntu1"]
    assert not [p for p in packages if p["version"].startswith("590.") and "fabricmanager" in p["name"]]
    assert not [p for p in packages if p["name"].endswith("-590") or "-590-" in p["name"]]


def test_partial_mirror_leaves_out_fabric_manager_and_nscq(ubuntu):
    spec, packages = ubuntu
    full, partial = build_repo.dists(spec)
    assert full["path"] == "compute/cuda/repos/ubuntu2204/x86_64"
    kept = build_repo.kept(packages, partial)
    assert {p["name"] for p in packages} - {p["name"] for p in kept} == {
        "nvidia-fabricmanager",
        "nvidia-fabricmanager-535",
        "nvidia-fabricmanager-570",
        "libnvidia-nscq",
        "libnvidia-nscq-535",
        "libnvidia-nscq-570",
    }
    assert build_repo.kept(packages, full) == packages


def test_debian12_spec_keeps_its_layout():
    spec = load("spec.yml")
    packages = build_repo.expand(spec)
    assert build_repo.dists(spec) == [{"path": "compute/cuda/repos/debian12/x86_64"}]
    assert versions(packages, "nvidia-driver") == ["550.127.05-1", "550.127.08-1", "580.65.06-1"]
    assert versions(packages, "nvidia-fabricmanager-550") == ["550.127.05-1", "550.127.08-1"]
    fabric = next(p for p in packages if p["name"] == "nvidia-fabricmanager" and p["version"] == "580.65.06-1")
    assert fabric["depends"] == ["nvidia-driver (= 580.65.06-1)", "libnvidia-nscq (= 580.65.06-1)"]


@pytest.mark.parametrize("name", ["spec.yml", "spec-ubuntu2204.yml"])
def test_every_lab_stack_resolves_in_its_repository(name):
    spec = load(name)
    first = build_repo.kept(build_repo.expand(spec), build_repo.dists(spec)[0])
    assert build_repo.resolver_check(spec, {(p["name"], p["version"]) for p in first}) == len(spec["lab_stacks"])
