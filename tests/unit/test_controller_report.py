"""controller_report: a run's JSON report written on the controller (check, diff, idempotence, bad input)."""

from __future__ import annotations

import json
import stat
from unittest.mock import MagicMock

import pytest
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible_collections.gpuops.cluster.plugins.action.controller_report import ActionModule

DATA = {"nodes": [{"host": "gpu001", "healthy": True}], "unhealthy": [], "level": "quick"}


def action(args: dict, check_mode=False, diff=False) -> ActionModule:
    task = MagicMock(Task)
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    task.diff = diff
    connection = MagicMock()
    connection._shell = MagicMock()
    return ActionModule(task, connection, PlayContext(), loader=None, templar=None, shared_loader_obj=None)


def test_check_then_write_then_nothing_to_do(tmp_path):
    path = tmp_path / "report.json"
    checked = action({"path": str(path), "data": DATA}, check_mode=True, diff=True).run(task_vars={})
    assert checked["changed"] is True
    assert json.loads(checked["diff"]["after"]) == DATA
    assert not path.exists()
    written = action({"path": str(path), "data": DATA}).run(task_vars={})
    assert written["changed"] is True
    assert not written.get("failed")
    assert json.loads(path.read_text()) == DATA
    assert path.read_text().endswith("}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    again = action({"path": str(path), "data": DATA}, diff=True).run(task_vars={})
    assert again["changed"] is False
    assert "diff" not in again
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_new_data_or_mode_rewrites(tmp_path):
    path = tmp_path / "report.json"
    action({"path": str(path), "data": DATA}).run(task_vars={})
    changed = action({"path": str(path), "data": dict(DATA, unhealthy=["gpu001"]), "mode": 0o600}).run(task_vars={})
    assert changed["changed"] is True
    assert json.loads(path.read_text())["unhealthy"] == ["gpu001"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"data": DATA}, "path is required"),
        ({"path": "REPORT"}, "data is required"),
        ({"path": "REPORT", "data": DATA, "mode": "0666"}, "not world-writable"),
        ({"path": "REPORT", "data": DATA, "mode": "rw"}, "give an octal string"),
        ({"path": "REPORT", "data": {"when": object()}}, "cannot be written as JSON"),
        ({"path": "MISSING/report.json", "data": DATA}, "does not exist on the controller"),
    ],
)
def test_bad_input_fails_and_writes_nothing(tmp_path, args, message):
    args = {
        key: (
            value.replace("REPORT", str(tmp_path / "r.json")).replace("MISSING", str(tmp_path / "no"))
            if isinstance(value, str)
            else value
        )
        for key, value in args.items()
    }
    result = action(args).run(task_vars={})
    assert result["failed"] is True
    assert message in result["msg"]
    assert list(tmp_path.iterdir()) == []
