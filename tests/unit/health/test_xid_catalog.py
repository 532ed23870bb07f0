"""xid_catalog: severities and actions, application faults, unknown codes."""

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [
        (79, "critical", "reboot_node"),
        (48, "critical", "reset_gpu"),
        (119, "critical", "reset_gpu"),
        (64, "critical", "reset_gpu"),
        (63, "warning", "none"),
        (74, "critical", "reset_gpu"),
        (92, "warning", "none"),
        (94, "warning", "restart_application"),
        (95, "critical", "reset_gpu"),
        (109, "critical", "reset_gpu"),
        (120, "critical", "reset_gpu"),
        (54, "critical", "hardware_inspection"),
        (151, "critical", "reboot_node"),
        (13, "warning", "restart_application"),
        (31, "warning", "restart_application"),
        (43, "info", "none"),
        (45, "info", "none"),
    ],
)
def test_known_codes(code, severity, action):
    info = xid_catalog.lookup(code)
    assert (info["severity"], info["action"], info["known"]) == (severity, action, True)
    assert info["source"].startswith("https://docs.nvidia.com/deploy/xid-errors/")


def test_application_faults_are_not_node_faults():
    for code in (13, 31):
        info = xid_catalog.lookup(code)
        assert info["application_fault"] is True
        assert info["severity"] != "critical"
    assert xid_catalog.lookup(79)["application_fault"] is False


def test_unknown_code_is_reported_not_dropped():
    info = xid_catalog.lookup(9999)
    assert info["known"] is False
    assert info["severity"] == "warning"
    assert "9999" in info["name"]


@pytest.mark.parametrize(
    ("text", "action", "severity"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "reset_gpu", "critical"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "reboot_node", "critical"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "none", "info"),
    ],
)
def test_xid_154_follows_its_text(text, action, severity):
    info = xid_catalog.lookup(154, text)
    assert (info["action"], info["severity"]) == (action, severity)


def test_every_row_uses_a_known_action_and_severity():
    for code, (name, severity, action, bucket) in xid_catalog.XID_CATALOG.items():
        assert action in xid_catalog.ACTIONS, code
        assert severity in ("info", "warning", "critical"), code
        assert name, code
        assert bucket, code


# NVIDIA's immediate-action buckets in this collection's words (the table in xid_catalog's docstring).
_BUCKET_ACTIONS = {
    "IGNORE": {"none"},
    "RESTART_APP": {"restart_application"},
    "RESET_GPU": {"reset_gpu"},
    "RESTART_BM": {"reboot_node"},
    "RESTART_VM": {"reboot_node"},
    "CONTACT_SUPPORT": {"hardware_inspection"},
    "CHECK_MECHANICALS": {"hardware_inspection"},
    "WORKFLOW_XID_45": {"none"},
    "WORKFLOW_XID_48": {"reset_gpu"},
    "WORKFLOW_NVLINK_ERR": {"reset_gpu"},
    "WORKFLOW_NVLINK5_ERR": {"reset_gpu"},
    "XID_154": {"reset_gpu"},
}


def test_every_action_follows_its_nvidia_bucket():
    for code, (_name, severity, action, bucket) in xid_catalog.XID_CATALOG.items():
        assert action in _BUCKET_ACTIONS[bucket], code
        if bucket == "RESTART_APP":
            assert severity == "warning", code
        if bucket == "IGNORE":
            assert severity != "critical", code


def test_codes_without_a_bucket_are_reported_as_unknown():
    # 78 (UPDATE_SWFW) and 162+ (no bucket in NVIDIA's spreadsheet yet) are not tabulated.
    for code in (78, 162, 172):
        info = xid_catalog.lookup(code)
        assert (info["known"], info["severity"]) == (False, "warning")


def test_strongest():
    assert xid_catalog.strongest([]) == "none"
    assert xid_catalog.strongest(["reset_gpu", "restart_application", "reboot_node"]) == "reboot_node"
    assert xid_catalog.strongest(["hardware_inspection", "reboot_node"]) == "hardware_inspection"


@pytest.mark.parametrize(
    ("text", "severity", "action"),
    [
        ("Fatal, Link 48 LTSSM Fault Up", "critical", "reboot_node"),
        ("Non-fatal, Link 04 RX Short Error Rate", "warning", "none"),
    ],
)
def test_sxid_severity_from_its_line(text, severity, action):
    info = xid_catalog.lookup_sxid(20034, text)
    assert (info["severity"], info["action"]) == (severity, action)
