"""matrix/mig_profiles.yml: every matrix GPU once, the guide's tables, and the loader's lookups."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_profiles
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix

PROFILES = mig_profiles.default_profiles()


def test_every_matrix_gpu_is_listed_once():
    assert sorted(PROFILES.gpus) == default_matrix().gpu_names()


def test_h100_80gb_ids_are_the_captured_ones():
    # tests/fixtures/mig/lgip-h100-pcie-570.txt (a real H100 PCIe, driver 570.169)
    ids = {name: p["id"] for name, p in PROFILES.sets["h100-80gb"]["profiles"].items()}
    assert ids == {
        "1g.10gb": 19,
        "1g.10gb+me": 20,
        "1g.20gb": 15,
        "2g.20gb": 14,
        "3g.40gb": 9,
        "4g.40gb": 5,
        "7g.80gb": 0,
    }


def test_h200_table_of_the_guide():
    profiles = PROFILES.sets["h200-141gb"]["profiles"]
    assert {name: p["max"] for name, p in profiles.items()} == {
        "1g.18gb": 7,
        "1g.18gb+me": 1,
        "1g.35gb": 4,
        "2g.35gb": 3,
        "3g.71gb": 2,
        "4g.71gb": 1,
        "7g.141gb": 1,
    }


def test_model_lookup():
    assert PROFILES.model("h100-sxm")["set"]["name"] == "h100-80gb"
    assert PROFILES.model("l40s") == {"key": "l40s", "mig": "no", "set": None, "products": []}
    assert PROFILES.model("gh200")["mig"] == "unlisted"
    assert PROFILES.model("a100-sxm4", product="nvidia a100-sxm4-40gb")["set"]["name"] == "a100-40gb"
    assert PROFILES.model("a100-sxm4", product="a100-sxm4")["mig"] == "ambiguous"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("1g.10gb", {"gi": "1g.10gb", "compute": 1, "slices": 1}),
        ("1c.3g.40gb", {"gi": "3g.40gb", "compute": 1, "slices": 3}),
        ("1g.10gb+me", {"gi": "1g.10gb+me", "compute": 1, "slices": 1}),
        ("1g.24gb-me", {"gi": "1g.24gb-me", "compute": 1, "slices": 1}),
        ("1g.24gb+me.all", {"gi": "1g.24gb+me.all", "compute": 1, "slices": 1}),
        ("MIG 1g.10gb", None),
        ("1g10gb", None),
    ],
)
def test_parse_device(name, parsed):
    assert mig_profiles.parse_device(name) == parsed


def test_schema_errors_are_listed():
    data = copy.deepcopy(PROFILES.data)
    data["profile_sets"]["h100-80gb"]["profiles"] = [
        {"name": "2g.20gb", "id": 14, "compute": 2, "memory": 2, "max": 3, "placements": [0, 7]}
    ]
    data["gpus"]["h100-sxm"] = {"profiles": "h100-81gb"}
    with pytest.raises(mig_profiles.MigProfilesError) as raised:
        mig_profiles.MigProfiles(data)
    assert any("2g.20gb does not fit the seven_eight geometry" in e for e in raised.value.errors)
    assert any("'h100-81gb' is no profile set" in e for e in raised.value.errors)
