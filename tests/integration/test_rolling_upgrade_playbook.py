"""rolling_upgrade.yml end to end where no lab is needed: validation, survey, plan and report.

The inventory's nodes are this machine (local connection) without nvidia-smi, so the
survey finds every node unhealthy: the plan must leave them all out, no node may be
changed, and the report must say why. The waves themselves need the lab
(molecule/rolling_upgrade, see the report of issue 6).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.playbook_run import run_playbook

pytestmark = pytest.mark.integration


def test_unhealthy_nodes_are_reported_and_left_out(tmp_path, monkeypatch):
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))  # the default report path is $PWD/gpuops-upgrade-<run id>.json
    run = run_playbook("rolling_upgrade.yml", "tests/integration/inventories/valid/hosts.yml", tmp_path / "runner")
    assert run.rc == 0, run.stdout[-3000:]
    assert run.plays_started[:4] == [
        "Validate the controller, the inventory and the requested stack",
        "Survey the fleet before the rolling upgrade",
        "Plan the waves",
        "Upgrade wave by wave",
    ]
    # no task of the upgrade play ran on any node, and nothing changed on the nodes
    assert run.results_for(play="Upgrade wave by wave") == []
    assert [r.host for r in run.changed] == ["localhost"]
    plan = run.results_for(play="Plan the waves", task="Print the plan before any node moves")[0].result["msg"]
    assert "nothing to upgrade" in plan
    reports = list(report_dir.glob("gpuops-upgrade-*.json"))
    assert len(reports) == 1
    audit = json.loads(reports[0].read_text())
    assert audit["result"] == "nothing_to_do"
    assert audit["counts"] == {"excluded": 2}
    assert {node["host"] for node in audit["nodes"]} == {"gpu-h100", "gpu-l40s"}
    assert all("nvidia-smi not found" in node["reason"] for node in audit["nodes"])
    assert audit["plan"]["waves"] == []
