"""gpuops.cluster.gpu_health's settle_timeout through the argument spec: commands answered from fixtures, time faked."""

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module

from tests.unit.module_harness import FakeBins, FakeCommands

from .conftest import FIXTURES

TOOLS = ("nvidia-smi", "journalctl", "systemctl")


class Clock:
    """``time.monotonic`` and ``time.sleep`` of the module: sleeping moves the clock, nothing waits."""

    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(module.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(module.time, "sleep", fake.sleep)
    return fake


def h100_xml(state="Completed", status="Success"):
    text = (FIXTURES / "nvidia-smi/h100-sxm-8x-healthy.xml").read_text()
    return text.replace("<state>Completed</state>", "<state>%s</state>" % state).replace(
        "<status>Success</status>", "<status>%s</status>" % status
    )


@pytest.fixture
def node(harness, clock):
    """An 8x H100 node whose Fabric Manager becomes active at ``fm_at`` and whose fabric completes at ``fabric_at``
    (seconds after the module started; None: never)."""

    def install(fm_at=0, fabric_at=0):
        def up(at):
            return at is not None and clock.now - 1000.0 >= at

        def smi_answer(argv):
            return h100_xml() if up(fabric_at) else h100_xml("In Progress", "N/A")

        def systemctl_answer(argv):
            return (0, "active\n", "") if up(fm_at) else (3, "activating\n", "")

        harness.commands = FakeCommands(
            {
                "nvidia-smi -q -x": smi_answer,
                "nvidia-smi nvlink -s": (FIXTURES / "nvlink/h100-8x-status-healthy.txt").read_text(),
                "journalctl": (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(),
                "systemctl": systemctl_answer,
            }
        )
        harness.bins = FakeBins(set(TOOLS))
        return harness.commands

    return install


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


def test_settle_timeout_0_judges_at_once_as_before(harness, node, tmp_path):
    fake = node(fm_at=None, fabric_at=None)
    result = harness.run(module, {"infiniband_root": str(tmp_path)})
    assert "settle" not in result
    assert by_name(result, "settle") == []
    assert len([c for c in fake.calls if c[1:] == ["-q", "-x"]]) == 1
    assert result["healthy"] is False


def test_the_gate_waits_for_the_fabric_then_judges_healthy(harness, node, clock, tmp_path):
    fake = node(fm_at=7, fabric_at=18)
    result = harness.run(module, {"infiniband_root": str(tmp_path), "settle_timeout": 300})
    assert result["healthy"] is True, result["summary"]
    settle = by_name(result, "settle")[0]
    assert settle["status"] == "pass"
    assert settle["detail"] == (
        "settled in 25 s: Fabric Manager active after 10 s, fabric Completed after 20 s, NVLinks up after 25 s"
    )
    assert result["settle"]["settled"] is True
    assert result["settle"]["waited_s"] == 25
    assert clock.slept == [5] * 5
    # one nvidia-smi a poll: -q -x while the fabric trains, then nvlink -s, then the judgement's own reads
    smi_calls = [" ".join(c[1:]) for c in fake.calls if c[0].endswith("nvidia-smi")]
    assert smi_calls == ["-q -x"] * 5 + ["nvlink -s"] + ["-q -x", "nvlink -s"]
    assert result["commands"] == [" ".join(call) for call in fake.calls]


def test_the_gate_fails_naming_fabric_manager_when_the_bound_runs_out(harness, node, clock, tmp_path):
    node(fm_at=None, fabric_at=None)
    result = harness.fail(module, {"infiniband_root": str(tmp_path), "settle_timeout": 300, "fail_on_unhealthy": True})
    settle = by_name(result, "settle")[0]
    assert settle["status"] == "fail"
    assert settle["detail"].startswith("Fabric Manager not active after 300 s (activating); ")
    assert "NVLink fabric not Completed after 300 s (In Progress on GPU 0, 1, 2, 3, 4, 5, 6, 7)" in settle["detail"]
    assert "recommended action reboot_node: settle: Fabric Manager not active after 300 s" in result["msg"]
    assert result["checks"][0]["name"] == "settle"
    assert result["settle"]["settled"] is False
    assert sum(clock.slept) == 300
    assert max(clock.slept) == 5


def test_commands_of_the_wait_run_under_timeout(harness, node, clock, tmp_path):
    fake = node(fm_at=0, fabric_at=5)
    harness.bins = FakeBins(set(TOOLS) | {"timeout"})
    answer = fake.answer
    fake.fallback = lambda argv: answer(argv[4:])
    result = harness.run(module, {"infiniband_root": str(tmp_path), "settle_timeout": 60, "command_timeout": 20})
    assert all(call[:4] == ["/usr/bin/timeout", "-k", "5", "20"] for call in fake.calls)
    assert result["settle"]["polls"] == 3


def test_settle_skipped_or_offline_does_not_wait(harness, node, clock, tmp_path):
    node(fm_at=None, fabric_at=None)
    skipped = harness.run(module, {"infiniband_root": str(tmp_path), "settle_timeout": 300, "skip_checks": ["settle"]})
    assert "settle" not in skipped
    assert clock.slept == []
    offline = harness.run(module, {"nvidia_smi_xml": str(FIXTURES / "nvidia-smi/l40s-1x.xml"), "settle_timeout": 300})
    assert "settle" not in offline
    assert clock.slept == []


def test_a_negative_settle_timeout_is_refused(harness, node):
    node()
    result = harness.fail(module, {"settle_timeout": -5})
    assert result["msg"].startswith("settle_timeout: -5 is below 0")
