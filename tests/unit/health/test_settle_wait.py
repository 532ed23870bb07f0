"""The gate's settle wait decided on captured tool output (module_utils/health/settle_wait.py)."""

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import infiniband, nvidia_smi_xml, nvlink
from ansible_collections.gpuops.cluster.plugins.module_utils.health.settle_wait import (
    SettleWait,
    fabric_pending,
    infiniband_pending,
    nvlink_expectations,
    nvlink_pending,
)

from .conftest import FIXTURES

H100 = "nvidia-smi/h100-sxm-8x-healthy.xml"


def smi(relative=H100, fabric=None):
    """A capture parsed; ``fabric``: (state, status) written over every GPU's ``<fabric>`` (the same XML shape)."""
    text = (FIXTURES / relative).read_text()
    if fabric:
        text = text.replace("<state>Completed</state>", "<state>%s</state>" % fabric[0])
        text = text.replace("<status>Success</status>", "<status>%s</status>" % fabric[1])
    return nvidia_smi_xml.parse(text)


def status(relative="nvlink/h100-8x-status-healthy.txt"):
    return nvlink.parse_status((FIXTURES / relative).read_text())


def ports(name="healthy-8x-ndr"):
    return infiniband.read_ports(str(FIXTURES / "infiniband" / name))


# --- what is still coming up --------------------------------------------------------------------------


def test_a_completed_fabric_is_done_and_one_in_progress_is_named():
    assert fabric_pending(smi()) == (True, None)
    assert fabric_pending(smi(fabric=("In Progress", "N/A"))) == (True, "In Progress on GPU 0, 1, 2, 3, 4, 5, 6, 7")


def test_completed_with_a_failure_status_is_not_waited_for():
    # the fabric check judges the status; waiting does not change a finished registration
    assert fabric_pending(smi(fabric=("Completed", "Failure"))) == (True, None)


def test_gpus_without_a_fabric_report_none():
    assert fabric_pending(smi("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml")) == (False, None)
    assert fabric_pending(smi("nvidia-smi/l40s-1x.xml")) == (False, None)


def test_nvlinks_expected_by_model_and_short_ones_named():
    expected = nvlink_expectations(smi())
    assert expected == dict.fromkeys(range(8), 18)
    assert nvlink_pending(status(), expected) is None
    assert nvlink_pending(status("nvlink/h100-8x-status-link-inactive.txt"), expected).startswith("GPU ")
    short = nvlink_pending(status("nvlink/h100-8x-status-all-inactive.txt"), expected)
    assert "GPU 0 0 of 18 active" in short
    assert nvlink_expectations(smi("nvidia-smi/l40s-1x.xml")) == {}
    assert nvlink_expectations(smi(), override=0) == {}


def test_infiniband_expected_ports_and_count():
    assert infiniband_pending(ports(), ["mlx5_0", "mlx5_3:1"], 8) is None
    degraded = infiniband_pending(ports("degraded-8x-ndr"), ["mlx5_3"], 9)
    assert degraded == "mlx5_3:1 DOWN/Polling, 7 of 9 ports up"  # mlx5_8 is an Ethernet port
    assert infiniband_pending(ports(), ["mlx5_42"]) == "mlx5_42:1 not found"
    assert infiniband_pending(ports(), [], None) is None


# --- the wait -------------------------------------------------------------------------------------------


def poll(wait, now, smi_out=None, nvlink_out=None, fabricmanager="active", ib=None, nvswitch=("nvswitch0",)):
    """One poll as the module runs it; returns the reads made."""
    made = []
    read = wait.next_poll()
    if read == "smi":
        wait.saw_smi(smi_out, now, list(nvswitch))
        made.append("smi")
    elif read == "nvlink":
        wait.saw_nvlink(nvlink_out, now)
        made.append("nvlink")
    if wait.wants("fabricmanager"):
        wait.saw_fabricmanager(fabricmanager, now)
        made.append("fabricmanager")
    if wait.wants("infiniband"):
        wait.saw_infiniband(ib, now)
        made.append("infiniband")
    return made


def test_fabric_comes_up_within_the_bound_one_nvidia_smi_a_poll():
    wait = SettleWait(300, 1000.0)
    training = smi(fabric=("In Progress", "N/A"))
    assert poll(wait, 1000.0, training, fabricmanager="activating") == ["smi", "fabricmanager"]
    assert not wait.done(1000.0)
    assert wait.pause(1000.0) == 5
    assert poll(wait, 1005.0, training) == ["smi", "fabricmanager"]
    assert poll(wait, 1010.0, smi()) == ["smi"]  # Fabric Manager is up: not read again
    assert not wait.done(1010.0)  # the NVLinks are read once the fabric is done
    assert poll(wait, 1015.0, nvlink_out=status()) == ["nvlink"]
    assert wait.done(1015.0)
    check = wait.check(1015.0)
    assert check["status"] == "pass"
    assert (
        check["detail"]
        == "settled in 15 s: Fabric Manager active after 5 s, fabric Completed after 10 s, NVLinks up after 15 s"
    )
    facts = wait.facts(1015.0)
    assert facts["settled"] is True
    assert facts["polls"] == 4
    assert facts["conditions"]["infiniband"]["state"] == "none"


def test_fabric_manager_not_active_when_the_bound_runs_out_is_named():
    wait = SettleWait(300, 0.0)
    training = smi(fabric=("In Progress", "N/A"))
    now = 0.0
    while True:
        poll(wait, now, training, fabricmanager="inactive")
        if wait.done(now):
            break
        now += wait.pause(now)
    assert now == 300.0
    check = wait.check(now)
    assert check["status"] == "fail"
    assert check["action"] == "reboot_node"
    assert check["detail"] == (
        "Fabric Manager not active after 300 s (inactive); NVLink fabric not Completed after 300 s "
        "(In Progress on GPU 0, 1, 2, 3, 4, 5, 6, 7); NVLinks not read (they come up after the fabric)"
    )
    assert wait.facts(now)["polls"] == 61


def test_the_pause_never_passes_the_bound():
    wait = SettleWait(12, 0.0)
    assert wait.pause(0.0) == 5
    assert wait.pause(10.0) == 2
    assert wait.pause(13.0) == 0
    assert wait.done(12.0) is False or wait.expired(12.0)


def test_links_short_after_the_bound_name_the_gpus():
    wait = SettleWait(10, 0.0)
    poll(wait, 0.0, smi())
    poll(wait, 5.0, nvlink_out=status("nvlink/h100-8x-status-all-inactive.txt"))
    poll(wait, 10.0, nvlink_out=status("nvlink/h100-8x-status-all-inactive.txt"))
    assert wait.done(10.0)
    check = wait.check(10.0)
    assert check["status"] == "fail"
    assert check["detail"].startswith("NVLinks not up after 10 s (GPU 0 0 of 18 active, GPU 1 0 of 18 active")
    assert check["action"] == "reset_gpu"


def test_infiniband_ports_waited_for_and_named():
    wait = SettleWait(5, 0.0, expected_ib_ports=["mlx5_3"], expected_nvlinks=0)
    assert poll(wait, 0.0, smi("nvidia-smi/l40s-1x.xml"), ib=ports("degraded-8x-ndr"), nvswitch=()) == [
        "smi",
        "infiniband",
    ]
    poll(wait, 5.0, ib=ports("degraded-8x-ndr"), nvswitch=())
    check = wait.check(5.0)
    assert check["detail"] == "InfiniBand ports not up after 5 s (mlx5_3:1 DOWN/Polling)"
    assert check["action"] == "hardware_inspection"
    later = SettleWait(5, 0.0, expected_ib_port_count=9)
    poll(later, 0.0, smi("nvidia-smi/l40s-1x.xml"), ib=ports("degraded-8x-ndr"), nvswitch=())
    poll(later, 2.0, ib=ports("healthy-8x-ndr"), nvswitch=())
    assert later.done(2.0) is False  # healthy-8x-ndr has 8 ports
    assert later.facts(2.0)["conditions"]["infiniband"]["detail"] == "8 of 9 ports up"


def test_a_pcie_node_settles_at_the_first_poll():
    wait = SettleWait(300, 0.0)
    assert poll(wait, 0.0, smi("nvidia-smi/l40s-1x.xml"), nvswitch=()) == ["smi"]
    assert wait.done(0.0)
    assert wait.check(0.0) == {
        "name": "settle",
        "status": "pass",
        "detail": "nothing to wait for (no NVSwitch, fabric, NVLink or expected InfiniBand port)",
        "gpu_index": None,
        "pci_bus_id": None,
        "action": "none",
    }


def test_an_nvswitch_node_without_a_fabric_report_still_waits_for_fabric_manager():
    # A100 with NVSwitches: no <fabric> state, but Fabric Manager must run
    wait = SettleWait(300, 0.0)
    assert poll(wait, 0.0, smi("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"), fabricmanager="activating") == [
        "smi",
        "fabricmanager",
    ]
    assert wait.pending() == ["fabricmanager", "nvlink"]


def test_a_failed_fabric_manager_or_no_gpu_ends_the_wait_at_once():
    wait = SettleWait(300, 0.0)
    poll(wait, 0.0, smi(fabric=("In Progress", "N/A")), fabricmanager="failed")
    assert wait.done(0.0)
    assert wait.check(0.0)["status"] == "warn"
    assert wait.check(0.0)["detail"] == "stopped waiting after 0 s: nvidia-fabricmanager failed; judged at once"
    gone = SettleWait(300, 0.0)
    gone.next_poll()
    gone.saw_smi(None, 0.0, error="rc=18: Failed to initialize NVML: Driver/library version mismatch")
    assert gone.done(0.0)
    assert "Driver/library version mismatch" in gone.check(0.0)["detail"]


def test_a_skipped_check_is_not_waited_for():
    wait = SettleWait(300, 0.0, skip=["fabricmanager", "fabric", "nvlink"])
    assert poll(wait, 0.0, smi(fabric=("In Progress", "N/A")), fabricmanager="inactive") == ["smi"]
    assert wait.done(0.0)
    assert wait.check(0.0)["status"] == "pass"


def test_a_negative_bound_is_refused():
    with pytest.raises(ValueError, match="settle_timeout"):
        SettleWait(-1, 0.0)
