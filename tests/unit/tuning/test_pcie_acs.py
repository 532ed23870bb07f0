"""pcie_acs: lspci -vvv parsing, the redirect decision and the module's report/disable paths."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import pcie_acs
from ansible_collections.gpuops.cluster.plugins.modules import pcie_acs as module

from tests.unit.module_harness import FakeCommands, ModuleHarness, set_module_args, unbounded

LSPCI = """0000:15:01.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- SERR+ FastB2B- DisINTx+
\tCapabilities: [1d0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-

0000:15:02.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tCapabilities: [1d0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-

0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
"""


def test_parse_lspci_and_enabled():
    devices = pcie_acs.parse_lspci(LSPCI)
    assert [d["address"] for d in devices] == ["0000:15:01.0", "0000:15:02.0"]
    assert devices[0]["acs_ctl"]["ReqRedir"] is True
    assert devices[1]["acs_ctl"]["SrcValid"] is False
    assert pcie_acs.enabled(devices) == ["0000:15:01.0"]
    assert pcie_acs.disable_argv("/usr/bin/setpci", "0000:15:01.0") == [
        "/usr/bin/setpci",
        "-s",
        "0000:15:01.0",
        "ECAP_ACS+0x6.w=0000",
    ]


def lspci(argv):
    return (0, LSPCI, "") if argv[0].endswith("lspci") else (0, "", "")


def test_module_report_changes_nothing(run_module):
    result = run_module(module, {}, run_command=lspci, bins={"lspci": "/usr/bin/lspci"})
    assert result["changed"] is False
    assert result["enabled"] == ["0000:15:01.0"]
    assert result["_commands"] == [["/usr/bin/lspci", "-D", "-vvv"]]


def test_module_disable_runs_setpci_and_check_mode_does_not(run_module):
    bins = {"lspci": "/usr/bin/lspci", "setpci": "/usr/bin/setpci"}
    args = {"state": "disabled", "apply_live": "always"}
    checked = run_module(module, args, run_command=lspci, bins=bins, check_mode=True)
    assert checked["changed"] is True
    assert len(checked["_commands"]) == 1
    done = run_module(module, args, run_command=lspci, bins=bins)
    assert done["_commands"][1] == ["/usr/bin/setpci", "-s", "0000:15:01.0", "ECAP_ACS+0x6.w=0000"]


def test_module_disable_never_lists_not_applied(run_module):
    bins = {"lspci": "/usr/bin/lspci", "setpci": "/usr/bin/setpci"}
    result = run_module(module, {"state": "disabled", "apply_live": "never"}, run_command=lspci, bins=bins)
    assert result["changed"] is False
    assert result["not_applied_live"] == [{"name": "acs 0000:15:01.0", "reason": "apply_live is never"}]


def test_module_without_lspci_warns(run_module):
    result = run_module(module, {}, bins={})
    assert result["devices"] == []
    assert result["_commands"] == []


@pytest.mark.parametrize("check_mode", [True, False])
@pytest.mark.parametrize(
    "args",
    [{}, {"state": "disabled", "apply_live": "always"}, {"state": "disabled", "apply_live": "never"}],
)
def test_run_as_a_part_returns_what_the_module_returns(monkeypatch, run_module, args, check_mode):
    bins = {"lspci": "/usr/bin/lspci", "setpci": "/usr/bin/setpci"}
    expected = run_module(module, args, run_command=lspci, bins=bins, check_mode=check_mode)
    commands = FakeCommands(fallback=lambda argv: lspci(unbounded(argv)), default=(0, "", ""))
    ModuleHarness(monkeypatch, commands=commands, bins=dict(bins, timeout="/usr/bin/timeout"))
    with set_module_args({}, check_mode=check_mode):
        outer = AnsibleModule(argument_spec={}, supports_check_mode=True)
    use_c_locale(outer)
    params, errors = validate(pcie_acs.MODULE_KWARGS, args)
    assert errors == []
    result = json.loads(json.dumps(pcie_acs.run(Part(outer, params))))
    assert result == {key: value for key, value in expected.items() if not key.startswith("_")}
    assert [unbounded(call) for call in commands.calls] == expected["_commands"]
    assert all(call[:4] == ["/usr/bin/timeout", "-k", "5", "60"] for call in commands.calls)
