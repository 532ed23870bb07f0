"""Reading a node's MIG state from real nvidia-smi output (tests/fixtures/mig/README.md names each capture)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_state

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def text(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_gpu_instances_of_the_guides_3_2_1_1_geometry():
    assert mig_state.parse_gpu_instances(text("mig/lgi-a100-sxm4-40gb-guide-3211.txt")) == [
        {"gpu": 0, "id": 7, "profile": "1g.5gb", "profile_id": 19, "start": 0, "size": 1},
        {"gpu": 0, "id": 8, "profile": "1g.5gb", "profile_id": 19, "start": 1, "size": 1},
        {"gpu": 0, "id": 4, "profile": "2g.10gb", "profile_id": 14, "start": 2, "size": 2},
        {"gpu": 0, "id": 2, "profile": "3g.20gb", "profile_id": 9, "start": 4, "size": 4},
    ]


@pytest.mark.parametrize("name", ["mig/lgi-none-a30.txt", "mig/lgi-mig-disabled.txt"])
def test_empty_listings(name):
    assert mig_state.parse_gpu_instances(text(name)) == []
    assert mig_state.parse_compute_instances(text(name)) == []


def test_compute_instances_with_and_without_the_placement_column():
    with_placement = mig_state.parse_compute_instances(text("mig/lci-a100-pcie-40gb.txt"))
    assert with_placement[0] == {
        "gpu": 0,
        "gpu_instance": 1,
        "id": 0,
        "profile": "3g.20gb",
        "profile_id": 2,
        "compute": 3,
        "start": 0,
        "size": 3,
    }
    assert [(ci["gpu_instance"], ci["id"], ci["compute"]) for ci in with_placement[1:]] == [
        (2, 0, 1),
        (2, 1, 1),
        (2, 2, 1),
    ]
    without = mig_state.parse_compute_instances(text("mig/lci-a100-sxm4-40gb-guide.txt"))
    assert [(ci["profile"], ci["compute"], ci["start"]) for ci in without] == [("1c.3g.20gb", 1, None)] * 3


def test_a_row_that_does_not_parse_is_an_error_not_a_skip():
    broken = text("mig/lgi-a100-pcie-40gb.txt").replace("0:4", "0-4")
    with pytest.raises(mig_state.MigStateError, match="cannot read the row"):
        mig_state.parse_gpu_instances(broken)
    with pytest.raises(mig_state.MigStateError, match="unexpected output"):
        mig_state.parse_gpu_instances("Failed to display GPU instances: Insufficient Permissions\n")


def test_node_state_of_the_real_h200_capture():
    state = mig_state.node_state(text("nvidia-smi/h200-1x-vm-idle.xml"), text("mig/lgi-mig-disabled.txt"))
    (gpu,) = state["gpus"]
    assert gpu["mig"] == {"current": False, "pending": False}
    assert gpu["device_id"] == "0x233510de"
    assert gpu["gpu_instances"] == []
    assert gpu["processes"] == []
    (busy,) = mig_state.node_state(text("nvidia-smi/h200-1x-vm-load.xml"))["gpus"]
    assert busy["processes"] == [
        {
            "pid": 818,
            "name": "python3",
            "type": "C",
            "used_memory_mib": 2154,
            "gpu_instance_id": None,
            "compute_instance_id": None,
        }
    ]


def test_node_state_puts_compute_instances_into_their_gpu_instances():
    # The real 8x A100 capture with GPU 0's MIG mode turned on (derived here), and the real listings of one GPU.
    xml = text("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml").replace(
        "<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>", 1
    )
    state = mig_state.node_state(xml, text("mig/lgi-a100-pcie-40gb.txt"), text("mig/lci-a100-pcie-40gb.txt"))
    first, second = state["gpus"][:2]
    assert first["mig"]["current"] is True
    assert [
        (gi["id"], gi["start"], [ci["compute"] for ci in gi["compute_instances"]]) for gi in first["gpu_instances"]
    ] == [
        (1, 0, [3]),
        (2, 4, [1, 1, 1]),
    ]
    assert second["gpu_instances"] == []
    assert len(state["gpus"]) == 8


def test_inconsistent_listings_are_refused():
    xml = text("nvidia-smi/h200-1x-vm-idle.xml")
    with pytest.raises(mig_state.MigStateError, match="unknown to -lgi"):
        mig_state.node_state(xml, "", text("mig/lci-a100-pcie-40gb.txt"))
    with pytest.raises(mig_state.MigStateError, match="lists no GPU"):
        mig_state.node_state("", "", "")
