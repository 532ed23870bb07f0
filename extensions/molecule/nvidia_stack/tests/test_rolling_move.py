"""The changed request moved through playbooks/rolling_upgrade.yml: one window over every node of the scenario.

side_effect.yml ran rolling_move.yml with the settings an operator gives on the command line: no scheduler
(``gpuops_upgrade_drain`` none), two nodes out at a time, quick gates, ns-rocky (dnf, presenting Rocky 9) the canary
of the group canary, then the Debian 12 nodes and ns-ubuntu (apt, presenting Ubuntu 22.04). Its audit report and its
output are kept in molecule's ephemeral directory (rolling-move.json, rolling-move.log); what each node runs after
the move is checked by test_nvidia_stack.py and test_rocky_dnf.py from the ``upgraded`` snapshots.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ""))
NODES = ["ns-h100", "ns-h200", "ns-l40s", "ns-rocky", "ns-ubuntu"]
CANARY = "ns-rocky"
# what each node presents (os-release ID) and the driver its changed request resolves to (lab_upgrade_stack)
PRESENTS = {"ns-h100": "debian", "ns-h200": "debian", "ns-l40s": "debian", "ns-ubuntu": "ubuntu", "ns-rocky": "rocky"}
MOVED_TO = {
    "ns-h100": "580.65.06",
    "ns-h200": "550.127.08",
    "ns-l40s": "550.127.08",
    "ns-ubuntu": "580.126.20",
    "ns-rocky": "580.126.20",
}


@pytest.fixture(scope="module", name="audit")
def fixture_audit():
    return json.loads((EPHEMERAL / "rolling-move.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", name="output")
def fixture_output():
    return (EPHEMERAL / "rolling-move.log").read_text(encoding="utf-8")


def test_one_window_upgraded_every_node_of_every_os(audit):
    assert audit["result"] == "completed", audit["counts"]
    assert {node["host"]: node["status"] for node in audit["nodes"]} == dict.fromkeys(NODES, "upgraded")
    assert sorted({host for host, _start, _end in audit["window"]["timeline"]}) == NODES


def test_the_window_held_debian_ubuntu_and_rocky_and_each_reached_its_target(audit):
    for node in NODES:
        release = subprocess.run(
            ["podman", "exec", node, "cat", "/etc/os-release"], capture_output=True, text=True, check=True, timeout=120
        )
        fields = dict(line.split("=", 1) for line in release.stdout.splitlines() if "=" in line)
        assert fields["ID"].strip('"') == PRESENTS[node], release.stdout
    after = {node["host"]: node["after"] for node in audit["nodes"]}
    assert after == {host: {"driver_version": version, "loaded_version": version} for host, version in MOVED_TO.items()}


def test_the_dnf_canary_went_first_and_alone(audit):
    spans = {host: (start, end) for host, start, end in audit["window"]["timeline"]}
    canary_end = spans[CANARY][1]
    assert all(start >= canary_end for host, (start, _end) in spans.items() if host != CANARY), spans


def test_never_more_than_two_out_and_no_rule_broken(audit):
    events = sorted([(start, 1) for _h, start, _e in audit["window"]["timeline"]])
    events += sorted([(end, -1) for _h, _s, end in audit["window"]["timeline"]])
    out = peak = 0
    for _time, step in sorted(events, key=lambda event: (event[0], event[1])):
        out += step
        peak = max(peak, out)
    assert peak <= 2
    assert audit["window"]["violations"] == []


def test_the_run_said_what_it_did_per_node(output):
    for node in NODES:
        assert "gpuops upgrade window: admitted %s" % node in output
