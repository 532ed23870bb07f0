"""kernel_log.parse: the same events read from every log format, bounded to a window."""

import datetime

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import kernel_log

UTC = datetime.timezone.utc
EXPECTED = [
    ("xid", 13, "0000:18:00"),
    ("xid", 13, "0000:18:00"),
    ("xid", 31, "0000:2a:00"),
    ("xid", 48, "0000:5d:00"),
    ("xid", 63, "0000:5d:00"),
    ("xid", 119, "0000:ab:00"),
    ("xid", 79, "0000:9a:00"),
    ("fallen_off_bus", None, "0000:9a:00"),  # "NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus." after the Xid
    ("sxid", 20034, "0000:06:00"),
    ("sxid", 20009, "0000:05:00"),
]
FILES = {
    "xid-dmesg-T.log": "dmesg_t",
    "xid-dmesg.log": "dmesg",
    "xid-kmsg.log": "kmsg",
    "xid-journal-short-iso.log": "journal_iso",
    "xid-journal-short.log": "journal_short",
}
NOW = datetime.datetime(2024, 3, 12, 12, 0, 0)


@pytest.mark.parametrize(("name", "fmt"), sorted(FILES.items()))
def test_every_format_yields_the_same_events(fixture_text, name, fmt):
    parsed = kernel_log.parse(fixture_text("kernel-log/" + name), now=NOW)
    assert parsed["formats"] == [fmt]
    assert [(e["kind"], e["code"], e["pci_bus_id"]) for e in parsed["events"]] == EXPECTED
    assert parsed["warnings"] == []


def test_event_fields(fixture_text):
    events = kernel_log.parse(fixture_text("kernel-log/xid-kmsg.log"))["events"]
    xid79 = next(e for e in events if e["code"] == 79)
    assert xid79["text"].endswith("GPU has fallen off the bus.")
    assert xid79["uptime"] == pytest.approx(894.113917)
    assert xid79["time"] is None  # no boot time given
    sxid = next(e for e in events if e["code"] == 20034)
    assert sxid["device"] == "nvidia-nvswitch1"
    assert sxid["text"].startswith("Fatal")


def test_previous_boot_is_outside_the_default_window(fixture_text):
    parsed = kernel_log.parse(fixture_text("kernel-log/xid-journal-short-iso.log"))
    assert parsed["boots_seen"] == 2
    assert 94 not in {e["code"] for e in parsed["events"]}


def test_since_reaches_into_the_previous_boot(fixture_text):
    since = datetime.datetime(2024, 3, 11, 22, 0, tzinfo=UTC)
    parsed = kernel_log.parse(fixture_text("kernel-log/xid-journal-short-iso.log"), since=since)
    assert parsed["events"][0]["code"] == 94
    assert parsed["events"][0]["time"] == "2024-03-11T22:14:03+00:00"


def test_since_cuts_earlier_events(fixture_text):
    since = datetime.datetime(2024, 3, 12, 9, 12, 0, tzinfo=UTC)
    codes = [
        e["code"] for e in kernel_log.parse(fixture_text("kernel-log/xid-journal-short-iso.log"), since=since)["events"]
    ]
    assert codes == [119, 79, None, 20034, 20009]  # None: the "GPU has fallen off the bus." line


def test_naive_times_meet_naive_since(fixture_text):
    since = datetime.datetime(2024, 3, 12, 9, 12, 0)
    codes = [e["code"] for e in kernel_log.parse(fixture_text("kernel-log/xid-dmesg-T.log"), since=since)["events"]]
    assert codes == [119, 79, None, 20034, 20009]  # None: the "GPU has fallen off the bus." line


def test_monotonic_times_use_boot_time(fixture_text):
    boot = datetime.datetime(2024, 3, 12, 8, 58, 11, tzinfo=UTC)
    since = datetime.datetime(2024, 3, 12, 9, 12, 0, tzinfo=UTC)
    parsed = kernel_log.parse(fixture_text("kernel-log/xid-dmesg.log"), since=since, boot_time=boot)
    assert [e["code"] for e in parsed["events"]] == [119, 79, None, 20034, 20009]
    assert parsed["events"][1]["time"].startswith("2024-03-12T09:13:05")


def test_monotonic_times_without_boot_time_are_kept_with_a_warning(fixture_text):
    since = datetime.datetime(2024, 3, 12, 9, 12, 0, tzinfo=UTC)
    parsed = kernel_log.parse(fixture_text("kernel-log/xid-kmsg.log"), since=since)
    assert len(parsed["events"]) == len(EXPECTED)
    assert parsed["warnings"]


def test_boot_time_drops_older_journal_lines(fixture_text):
    boot = datetime.datetime(2024, 3, 12, 8, 58, 11, tzinfo=UTC)
    text = fixture_text("kernel-log/xid-journal-short-iso.log").replace(
        "-- Boot 5c9d2e7f0a1b4c3d8e6f9a0b1c2d3e4f --\n", ""
    )
    parsed = kernel_log.parse(text, boot_time=boot)
    assert 94 not in {e["code"] for e in parsed["events"]}


def test_restarting_monotonic_clock_is_a_new_boot():
    text = "[ 9000.100000] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
    text += "[    5.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception\n"
    assert [e["code"] for e in kernel_log.parse(text)["events"]] == [13]


def test_clean_log_has_no_events(fixture_text):
    parsed = kernel_log.parse(fixture_text("kernel-log/clean-journal-short-iso.log"))
    assert parsed["events"] == []
    assert parsed["lines"] == 5


def test_older_xid_form_without_pci_prefix():
    events = kernel_log.parse("[  41.2] NVRM: Xid (0000:03:00): 14, Channel 00000001\n")["events"]
    assert [(e["code"], e["pci_bus_id"]) for e in events] == [(14, "0000:03:00")]


def test_short_format_in_january_reads_december_as_last_year():
    text = "Dec 31 23:59:58 n1 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE\n"
    event = kernel_log.parse(text, since=datetime.datetime(2023, 12, 1), now=datetime.datetime(2024, 1, 1, 0, 5))[
        "events"
    ][0]
    assert event["time"].startswith("2023-12-31T23:59:58")


def test_rsyslog_line_with_kernel_uptime_prefix():
    text = "2024-03-12T09:13:05.113917+00:00 n1 kernel: [  894.113917] NVRM: Xid (PCI:0000:9a:00): 79, pid=0, lost\n"
    (event,) = kernel_log.parse(text)["events"]
    assert event["code"] == 79
    assert event["uptime"] == pytest.approx(894.113917)


def test_unreadable_lines_are_ignored():
    assert kernel_log.parse("garbage\n\x00\x01 more garbage\n")["events"] == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2h", datetime.datetime(2024, 3, 12, 10, 0, tzinfo=UTC)),
        ("30m", datetime.datetime(2024, 3, 12, 11, 30, tzinfo=UTC)),
        ("1d", datetime.datetime(2024, 3, 11, 12, 0, tzinfo=UTC)),
        ("2024-03-12T09:00:00Z", datetime.datetime(2024, 3, 12, 9, 0, tzinfo=UTC)),
        ("2024-03-12T09:00:00+0000", datetime.datetime(2024, 3, 12, 9, 0, tzinfo=UTC)),
        (None, None),
    ],
)
def test_parse_since(value, expected):
    assert kernel_log.parse_since(value, now=datetime.datetime(2024, 3, 12, 12, 0, tzinfo=UTC)) == expected


def test_parse_since_rejects_nonsense():
    with pytest.raises(ValueError, match="not a time"):
        kernel_log.parse_since("yesterday-ish")


# --- a GPU that fell off the bus, in any of the driver's wordings, with or without an Xid line ---


def fallen(parsed):
    return [(e["pci_bus_id"], e["uptime"]) for e in parsed["events"] if e["kind"] == "fallen_off_bus"]


def test_fallen_off_bus_without_xid_in_dmesg(fixture_text):
    parsed = kernel_log.parse(fixture_text("kernel-log/fallen-off-bus-dmesg.log"))
    assert [e["kind"] for e in parsed["events"]] == ["fallen_off_bus"] * 3
    # the three-line probe message is one event, at the time of its first line, with the address of its first line
    assert fallen(parsed) == [("0000:9a:00", 5.006212), ("0000:ab:00", 7214.550921), (None, 7214.551207)]
    first = parsed["events"][0]
    assert first["text"].startswith("The NVIDIA GPU 0000:9a:00.0")
    assert first["text"].endswith("fallen off the bus and is not responding to commands.")
    assert parsed["warnings"] == []


def test_fallen_off_bus_in_kmsg_with_escaped_newlines(fixture_text):
    parsed = kernel_log.parse(fixture_text("kernel-log/fallen-off-bus-kmsg.log"))
    assert fallen(parsed) == [
        ("0000:9a:00", pytest.approx(5.006212)),
        ("0000:ab:00", pytest.approx(7214.550921)),
        (None, pytest.approx(7214.551207)),
    ]


def test_fallen_off_bus_older_driver_wordings(fixture_text):
    parsed = kernel_log.parse(fixture_text("kernel-log/fallen-off-bus-older-drivers-journal-short.log"), now=NOW)
    assert [bus for bus, _uptime in fallen(parsed)] == [
        "0000:1a:00",
        "0000:1a:00",
        "0000:3d:00",
        "0000:88:00",
        "0000:b2:00",
        None,
    ]
    assert all(e["time"].startswith("2024-03-12T10:") for e in parsed["events"])


def test_older_kernels_print_the_probe_message_as_three_records():
    text = (
        "[    5.006212] NVRM: The NVIDIA GPU 0000:9a:00.0\n"
        "[    5.006213] NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "[    5.006214] NVRM: fallen off the bus and is not responding to commands.\n"
    )
    assert fallen(kernel_log.parse(text)) == [("0000:9a:00", 5.006212)]


@pytest.mark.parametrize(
    "line",
    [
        "[ 10.0] nvidia 0000:9a:00.0: enabling device (0000 -> 0003)",
        "[ 10.0] usb 1-1: USB disconnect, device number 2 fell off the bus",  # not the NVIDIA driver
        "[ 10.0] NVRM: GPU at PCI:0000:9a:00: GPU-2f9c7e15-6d4b-4a83-b2f0-8c5e1a7d3b54",
        "[ 10.0] NVRM: The NVIDIA probe routine failed for 1 device(s).",
    ],
)
def test_other_driver_lines_are_not_a_lost_gpu(line):
    assert kernel_log.parse(line)["events"] == []


# --- issue 25: a job cannot write the evidence --------------------------------------------------------------
# Each driver message beside a forgery of it. The forgeries are what a job can put in the kernel log: the
# kernel's segfault and trap lines start with the task's name (at most 15 characters) and name the crashing file
# after " in ", both the job's choice; a program's own lines (logger, /dev/kmsg writes) carry another facility
# or identifier. The first is real: the kernel printed it when uid 65534 ran a program so named (fixture).
FORGED_SEGFAULT = (
    "NVRM: Xid (PCI:[537]: segfault at 0 ip 0000000000400078 sp 00007ffc107c9ab0 error 6 in NVRM: Xid "
    "(PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus[78,400000+1000] likely on CPU 12 "
    "(core 12, socket 0)"
)
REAL_AND_FORGED = [
    (
        "xid",
        "[ 7214.550921] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "[ 7214.550921] %s" % FORGED_SEGFAULT,
    ),
    (
        "xid",
        "[ 7214.550921] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "[ 7214.550921] traps: NVRM: Xid (PCI:0000:18:00): 79,[12] general protection fault ip:1 sp:2",
    ),
    (
        "xid",
        "2024-03-12T09:00:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, off the bus",
        "2024-03-12T09:00:00+0000 node job: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, off the bus",
    ),
    (
        "xid",
        "Mar 12 09:00:00 node kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, off the bus",
        "Mar 12 09:00:00 node logger: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, off the bus",
    ),
    (
        "xid",
        "3,1013,5006212,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "11,1013,5006212,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    ),
    (
        "sxid",
        "[ 1108.858286] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 44 sourcetrack timeout",
        "[ 1108.858286] nvidia-nvswitc[99]: segfault at 0 ip 0 sp 0 error 6 in nvidia-nvswitch0: SXid "
        "(PCI:0000:c3:00.0): 24007, Fatal, Link 44[78,400000+1000]",
    ),
    (
        "fallen_off_bus",
        "[ 7214.550921] NVRM: GPU 0000:ab:00.0: GPU has fallen off the bus.",
        "[ 7214.550921] NVRM: GPU 0000[77]: segfault at 0 ip 0 sp 0 error 6 in NVRM: GPU 0000:ab:00.0: GPU has "
        "fallen off the bus[78,400000+1000]",
    ),
    (
        "fallen_off_bus",
        "[ 7214.551207] NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]",
        "[ 7214.551207] NVRM: a (4242): drop_caches: GPU lost from the bus [NV_ERR_GPU_IS_LOST]",
    ),
    (
        "fallen_off_bus",
        "[ 7214.551207] NVRM: GPU is lost, skipping nv_pci_probe",
        "[ 7214.551207] python3[4242]: NVRM: GPU is lost, skipping nv_pci_probe",
    ),
]


@pytest.mark.parametrize(("kind", "real", "forged"), REAL_AND_FORGED)
def test_a_driver_message_is_an_event_and_its_forgery_is_not(kind, real, forged):
    found = kernel_log.parse(real, now=NOW)["events"]
    assert [event["kind"] for event in found] == [kind]
    assert kernel_log.parse(forged, now=NOW)["events"] == []


def test_the_captured_forgery_of_a_real_kernel_is_no_event(fixture_text):
    """A program named like an Xid 79 message, crashed as uid 65534 on a real H200 node (driver 580.159.04)."""
    for name in ("forged-xid-segfault-dmesg-T.log", "forged-xid-segfault-dmesg.log"):
        text = fixture_text("kernel-log/" + name)
        assert "NVRM: Xid (PCI:0000:18:00): 79" in text
        parsed = kernel_log.parse(text, now=datetime.datetime(2026, 12, 4, 15, 0, 0))
        assert parsed["events"] == [], name
