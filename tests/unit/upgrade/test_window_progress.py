"""What a plan-only run says about jobs and the deadline, and the line a running window prints (window_preview)."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_preview
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window

from .test_window import node

DAY = 86400


def fleet():
    return [
        node("a"),
        node("b", rack="r2", state="busy", job_end=2 * DAY),  # a two-day training job
        node("c", rack="r3", state="busy"),  # no time limit
    ]


def test_the_plan_names_who_waits_in_service_who_is_deferred_and_until_when():
    preview = window_preview.plan(Window(fleet(), {"max_unavailable": 1}, 0), 0)
    assert preview["deadline"] == 2 * DAY
    assert list(preview["to_defer"]) == ["c"]
    assert preview["jobs_end_by"] == 2 * DAY
    lines = window_preview.describe(preview)
    assert any(
        line.startswith("waits for its job, in service: b (its job ends at 1970-01-03T00:00:00Z") for line in lines
    )
    assert any(line.startswith("deferred, for a later run: c (its job has no known end") for line in lines)
    assert (
        "the run waits for jobs until about 1970-01-03T00:00:00Z (their latest EndTime); it stops waiting at its "
        "deadline 1970-01-03T00:00:00Z" in lines
    )


def test_with_deadline_zero_the_plan_defers_every_busy_node_and_waits_for_none():
    preview = window_preview.plan(Window(fleet(), {"max_unavailable": 1, "deadline": 0}, 0), 0)
    assert sorted(preview["to_defer"]) == ["b", "c"]
    assert preview["jobs_end_by"] is None
    assert not any("waits for jobs until" in line for line in window_preview.describe(preview))


def test_a_progress_line_per_admission_and_release():
    window = Window(fleet(), {"max_unavailable": 1}, now=0)
    (canary,) = window.admit(0)
    state = window_preview.progress(window, 0)
    assert state == {"done": 0, "in_flight": 1, "waiting": 2, "deferred": 0, "failed": 0, "jobs_end_by": 2 * DAY}
    assert window_preview.progress_line("admitted", canary, state) == (
        "admitted a: 0 done, 1 in flight, 2 waiting, 0 deferred; waiting for jobs until about 1970-01-03T00:00:00Z"
    )
    window.finish(canary, True)
    window.defer_waiting(10)
    state = window_preview.progress(window, 10)
    assert window_preview.progress_line("back, upgraded", canary, state) == (
        "back, upgraded a: 1 done, 0 in flight, 1 waiting, 1 deferred; "
        "waiting for jobs until about 1970-01-03T00:00:00Z"
    )
