"""xid_catalog: severities and actions, application faults, unknown codes."""

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import xid_catalog


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [
        (79, "critical", "reboot_node"),
        (48, "critical", "reset_gpu"),
        (119, "critical", "reset_gpu"),
        (64, "critical", "hardware_inspection"),
        (13, "warning", "restart_application"),
        (31, "warning", "restart_application"),
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
