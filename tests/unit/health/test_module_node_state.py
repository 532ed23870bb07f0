"""gpuops.cluster.gpu_health with node_state: the node-side command's stored state, read only (rates, pre-existing)."""

from __future__ import annotations

import time

from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    health_state,
    node_history,
    nvidia_smi_xml,
)
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module

from .test_error_rates import H100, with_counts


def stored_state(tmp_path, text, when):
    """The state the node-side command would have stored after a run on ``text`` at ``when``."""
    inputs = {"smi": nvidia_smi_xml.parse(text)}
    verdict = health_checks.evaluate(inputs)
    _verdict, state, _notes = node_history.judge(inputs, verdict, health_state.empty(), when)
    store = health_state.HealthState(str(tmp_path / "state"))
    store.save(state)
    return store


def test_node_state_judges_the_rate_since_the_command_last_ran_and_stores_nothing(harness, tmp_path):
    store = stored_state(tmp_path, H100, time.time() - 600)
    before = (tmp_path / "state" / "state.json").read_text()
    capture = tmp_path / "now.xml"
    capture.write_text(with_counts(H100, 3, correctable=30))
    result = harness.run(module, {"nvidia_smi_xml": str(capture), "node_state": store.directory})
    [bad] = [c for c in result["checks"] if c["status"] == "fail"]
    assert (bad["name"], bad["gpu_index"], bad["action"]) == ("ecc_rate", 3, "hardware_inspection")
    assert (tmp_path / "state" / "state.json").read_text() == before


def test_node_state_marks_a_failure_found_before_as_pre_existing(harness, tmp_path):
    broken = with_counts(H100, 2, uncorrectable=1)
    store = stored_state(tmp_path, broken, time.time() - 3600)
    capture = tmp_path / "now.xml"
    capture.write_text(broken)
    result = harness.run(module, {"nvidia_smi_xml": str(capture), "node_state": store.directory})
    ecc = [c for c in result["checks"] if c["name"] == "ecc_errors" and c["status"] == "fail"]
    assert [c["gpu_index"] for c in ecc] == [2]
    assert "pre_existing" in ecc[0]
    assert "(pre-existing, failing since " in ecc[0]["detail"]


def test_without_a_stored_state_a_warning_says_so(harness, tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, message: warned.append(message))
    capture = tmp_path / "now.xml"
    capture.write_text(H100)
    result = harness.run(module, {"nvidia_smi_xml": str(capture), "node_state": str(tmp_path / "none")})
    assert result["healthy"] is True
    assert not [c for c in result["checks"] if c["name"] in node_history.CHECKS]
    assert warned == [
        "node_state: no stored state in %s: error rates, Xid repeats and baselines not judged" % (tmp_path / "none")
    ]
