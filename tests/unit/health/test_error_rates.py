"""Error rates and fatal Xid repeats against the node's own earlier samples.

The samples are built from the real captures in tests/fixtures: the 8x H100 ``nvidia-smi -q -x`` (every ECC
counter 0 there) with the counts of one GPU changed in the XML text (``with_counts``), so the parser reads
them as on a node; and the healthy 8x NDR InfiniBand sysfs tree, copied and a counter changed.
"""

from __future__ import annotations

import re
import shutil

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    error_rates,
    infiniband,
    kernel_log,
    nvidia_smi_xml,
)

from .conftest import FIXTURES

H100 = (FIXTURES / "nvidia-smi" / "h100-sxm-8x-healthy.xml").read_text(encoding="utf-8")
HOUR = 3600.0


def with_counts(text, gpu, correctable=None, uncorrectable=None, remapped=None):
    """The capture with GPU ``gpu``'s volatile DRAM ECC counts (and remapped rows) set: one sample of a changed node."""
    blocks = re.split(r"(?=    <gpu id=)", text)
    block = blocks[gpu + 1]
    volatile = re.search(r"<volatile>.*?</volatile>", block, re.S)
    part = volatile.group(0)
    if correctable is not None:
        part = re.sub(r"<dram_correctable>\d+<", "<dram_correctable>%d<" % correctable, part)
    if uncorrectable is not None:
        part = re.sub(r"<dram_uncorrectable>\d+<", "<dram_uncorrectable>%d<" % uncorrectable, part)
    block = block[: volatile.start()] + part + block[volatile.end() :]
    if remapped is not None:
        block = re.sub(r"<remapped_row_corr>\d+<", "<remapped_row_corr>%d<" % remapped, block)
    blocks[gpu + 1] = block
    return "".join(blocks)


def sample(now, text=H100, boot="boot-a", ib=None):
    inputs = {"smi": nvidia_smi_xml.parse(text), "infiniband": ib}
    return error_rates.take_sample(inputs, now, boot)


def failing(checks):
    return [check for check in checks if check["status"] == "fail"]


def test_the_changed_capture_parses_with_the_new_counts():
    smi = nvidia_smi_xml.parse(with_counts(H100, 3, correctable=12, uncorrectable=2, remapped=1))
    assert smi["gpus"][3]["ecc_errors"]["volatile"] == {"correctable": 12, "uncorrectable": 2}
    assert smi["gpus"][3]["remapped_rows"]["correctable"] == 1
    assert smi["gpus"][2]["ecc_errors"]["volatile"] == {"correctable": 0, "uncorrectable": 0}


def test_first_run_sets_the_baseline_and_says_so():
    checks, notes = error_rates.judge([], sample(1000.0))
    assert not failing(checks)
    assert notes == ["first run: baseline set (8 GPUs, 0 InfiniBand ports); rates are judged from the next run"]
    assert {check["name"] for check in checks} == {"ecc_rate", "row_remap_rate", "infiniband_rate"}


def test_eleven_correctable_errors_within_the_hour_isolate_the_gpu():
    before = sample(0.0)
    after = sample(20 * 60.0, with_counts(H100, 3, correctable=11))
    checks, _notes = error_rates.judge([before], after)
    [bad] = failing(checks)
    assert (bad["name"], bad["gpu_index"], bad["pci_bus_id"], bad["action"]) == (
        "ecc_rate", 3, "00000000:5D:00.0", "hardware_inspection",
    )  # fmt: skip
    assert bad["detail"].startswith("11 correctable (single-bit) ECC errors in 20 min, above 10 per hour: isolate")


def test_ten_within_the_hour_is_the_limit_not_above_it():
    checks, _notes = error_rates.judge([sample(0.0)], sample(1800.0, with_counts(H100, 3, correctable=10)))
    assert not failing(checks)
    gpu3 = next(c for c in checks if c["name"] == "ecc_rate" and c["gpu_index"] == 3)
    assert gpu3["detail"] == "10 correctable (single-bit) ECC errors in 30 min"


def test_a_slow_trickle_sampled_every_five_minutes_is_counted_over_the_hour():
    """3 new errors every 5 minutes never exceed 10 per sample, but do within one hour."""
    history = [sample(i * 300.0, with_counts(H100, 1, correctable=3 * i)) for i in range(4)]
    checks, _notes = error_rates.judge(history, sample(4 * 300.0, with_counts(H100, 1, correctable=12)))
    [bad] = failing(checks)
    assert bad["gpu_index"] == 1
    assert bad["detail"].startswith("12 correctable")


def test_samples_older_than_the_window_scale_the_count():
    """60 errors over 6 hours is 10 per hour: not above; 66 is."""
    assert not failing(error_rates.judge([sample(0.0)], sample(6 * HOUR, with_counts(H100, 0, correctable=60)))[0])
    assert failing(error_rates.judge([sample(0.0)], sample(6 * HOUR, with_counts(H100, 0, correctable=66)))[0])


def test_a_reboot_resets_volatile_counters_and_what_they_hold_counts():
    before = sample(0.0, with_counts(H100, 5, correctable=40), boot="boot-a")
    after = sample(1800.0, with_counts(H100, 5, correctable=40), boot="boot-b")
    [bad] = failing(error_rates.judge([before], after)[0])
    assert "(counter reset since)" in bad["detail"]
    lower = sample(1800.0, with_counts(H100, 5, correctable=4), boot="boot-a")  # a driver reload, same boot
    assert not failing(error_rates.judge([before], lower)[0])


def test_a_new_uncorrectable_error_fails_with_a_reset():
    checks, _notes = error_rates.judge([sample(0.0)], sample(HOUR, with_counts(H100, 6, uncorrectable=1)))
    [bad] = failing(checks)
    assert bad["action"] == "reset_gpu"
    assert bad["detail"].startswith("1 uncorrectable (double-bit) ECC errors in 60 min")


def test_a_new_remapped_row_warns():
    checks, _notes = error_rates.judge([sample(0.0)], sample(HOUR, with_counts(H100, 2, remapped=1)))
    warned = [c for c in checks if c["status"] == "warn"]
    assert [(c["name"], c["gpu_index"]) for c in warned] == [("row_remap_rate", 2)]


def test_thresholds_are_configurable_and_checked():
    limits = error_rates.thresholds({"ecc_correctable_per_hour": 50})
    checks, _notes = error_rates.judge([sample(0.0)], sample(600.0, with_counts(H100, 3, correctable=40)), limits)
    assert not failing(checks)
    with pytest.raises(ValueError, match="unknown 'ecc_per_hour'"):
        error_rates.thresholds({"ecc_per_hour": 1})
    with pytest.raises(ValueError, match="must be a number"):
        error_rates.thresholds({"xid_repeat_count": "two"})


def test_a_replaced_gpu_starts_its_own_baseline():
    replaced = H100.replace("GPU-1c7a6f02-8d2e-4b71-9a55-0e4f3b7c2d10", "GPU-00000000-0000-0000-0000-000000000000")
    checks, _notes = error_rates.judge([sample(0.0)], sample(600.0, with_counts(replaced, 0, correctable=500)))
    gpu0 = next(c for c in checks if c["name"] == "ecc_rate" and c["gpu_index"] == 0)
    assert gpu0["status"] == "pass"
    assert "baseline set" in gpu0["detail"]


@pytest.fixture
def ib_tree(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "infiniband" / "healthy-8x-ndr", root)
    return root


def test_infiniband_error_counters_rising_fail_and_a_link_down_warns(ib_tree):
    before = sample(0.0, ib=infiniband.read_ports(str(ib_tree)))
    counters = ib_tree / "sys/class/infiniband/mlx5_0/ports/1/counters"
    (counters / "symbol_error").write_text("%d\n" % (int((counters / "symbol_error").read_text()) + 25))
    (counters / "link_downed").write_text("%d\n" % (int((counters / "link_downed").read_text()) + 1))
    after = sample(900.0, ib=infiniband.read_ports(str(ib_tree)))
    checks, _notes = error_rates.judge([before], after)
    port = [c for c in checks if c["name"] == "infiniband_rate" and c["detail"].startswith("mlx5_0:1:")]
    assert [c["status"] for c in port] == ["fail"]
    assert "25 InfiniBand port errors in 15 min" in port[0]["detail"]
    assert "1 InfiniBand link-down events" in port[0]["detail"]


def test_history_keeps_the_last_hour_and_one_sample_per_hour_for_a_day():
    history = []
    for step in range(0, 30 * 12):  # 30 h every 5 min
        history = error_rates.keep_history(history, {"time": step * 300.0, "gpus": {}, "ib": {}})
    ages = [history[-1]["time"] - entry["time"] for entry in history]
    assert max(ages) <= 25 * HOUR
    assert sum(1 for age in ages if age <= HOUR) == 13
    assert len(history) <= 13 + 25


# --- fatal Xid repeats ------------------------------------------------------------------------------

XID79 = "2024-03-12T%s+0000 gpu-a01 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.\n"
XID13 = "2024-03-12T%s+0000 gpu-a01 kernel: NVRM: Xid (PCI:0000:5d:00): 13, pid=1, Graphics Exception\n"


def events(*lines):
    return kernel_log.parse("".join(lines))


def epoch(clock):
    return error_rates._epoch("2024-03-12T%s+00:00" % clock, 0)


def test_fatal_xids_keep_only_reset_or_worse():
    found = error_rates.fatal_xids(events(XID79 % "10:00:00", XID13 % "10:00:01"), 0)
    assert [(x["code"], x["bus"]) for x in found] == [(79, "0000:5d:00")]


def test_a_fatal_xid_once_passes_and_is_kept():
    gpus = nvidia_smi_xml.parse(H100)["gpus"]
    now = epoch("12:00:00")
    checks, kept = error_rates.judge_xids([], error_rates.fatal_xids(events(XID79 % "10:00:00"), now), now, gpus)
    assert [(c["status"], c["gpu_index"]) for c in checks] == [("pass", 3)]
    assert len(kept) == 1


def test_a_fatal_xid_repeated_within_a_day_escalates_to_inspection():
    gpus = nvidia_smi_xml.parse(H100)["gpus"]
    first_run = epoch("10:05:00")
    _checks, stored = error_rates.judge_xids([], error_rates.fatal_xids(events(XID79 % "10:00:00"), 0), first_run, gpus)
    now = epoch("22:00:00")
    later = error_rates.fatal_xids(events(XID79 % "21:59:00", XID79 % "21:59:01"), now)
    checks, kept = error_rates.judge_xids(stored, later, now, gpus)
    [bad] = failing(checks)
    assert (bad["name"], bad["gpu_index"], bad["action"]) == ("xid_repeat", 3, "hardware_inspection")
    assert "2 times in 24 h" in bad["detail"]  # the two lines a second apart are one episode
    assert len(kept) == 3


def test_lines_of_one_fault_and_occurrences_older_than_a_day_do_not_repeat():
    now = epoch("23:00:00")
    burst = error_rates.fatal_xids(events(XID79 % "22:00:00", XID79 % "22:03:00"), now)
    assert not failing(error_rates.judge_xids([], burst, now)[0])
    old = [{"code": 79, "bus": "0000:5d:00", "time": now - 25 * HOUR}]
    checks, kept = error_rates.judge_xids(old, burst, now)
    assert not failing(checks)
    assert len(kept) == 2


def test_the_same_occurrence_read_twice_is_stored_once():
    now = epoch("23:00:00")
    once = error_rates.fatal_xids(events(XID79 % "22:00:00"), now)
    checks, kept = error_rates.judge_xids(once, once, now)
    assert not failing(checks)
    assert len(kept) == 1
