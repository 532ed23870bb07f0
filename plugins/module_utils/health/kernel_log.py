# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find NVIDIA Xid and NVSwitch SXid events in a kernel log.

Reads the formats operators have at hand, line by line (a file may mix them):

- ``dmesg -T``:              ``[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, ...``
- ``dmesg`` (monotonic):     ``[ 1108.858286] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, ...``
- ``journalctl -k -o short-iso``: ``2024-08-30T11:43:09+0000 node kernel: NVRM: Xid ...``
- ``journalctl -k`` (short, also /var/log/messages): ``Aug 30 11:43:09 node kernel: NVRM: Xid ...``
- raw ``/dev/kmsg``:         ``4,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=...``

Besides Xid and SXid lines it finds the other messages in which NVIDIA's driver says a GPU is gone,
whatever their wording, as ``fallen_off_bus`` events attributed by PCI address (the driver often
prints them without any Xid line; strings from NVIDIA/open-gpu-kernel-modules, see
:data:`FALLEN_OFF_BUS` and tests/fixtures/kernel-log/README.md):

- ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`` (``NV_DEV_PRINTF``, osinit.c)
- ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` (older drivers)
- ``NVRM: GPU at PCI:0000:01:00: GPU has fallen off the bus.``
- ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` /
  ``NVRM: fallen off the bus and is not responding to commands.`` (one message over three lines,
  osapi.c; the address is on the first line; older drivers print it on one or two lines)
- ``NVRM: GPU 0000:3b:00.0: GPU is lost, skipping nv_pci_probe`` and ``NVRM: GPU is lost, skipping ...``
- ``... GPU lost from the bus [NV_ERR_GPU_IS_LOST] ...`` (the status string of nvstatuscodes.h)

A message that names no address (and follows no ``The NVIDIA GPU <address>`` line) is an event
with ``pci_bus_id`` None.

Events are bounded to a window: since boot (the default) or since a given time.

Only the driver's own messages count, never a message that merely contains the words: a job can put text in
the kernel log (the kernel's segfault line starts with the task's name and names the crashing file, both the
job's choice; tests/fixtures/kernel-log/forged-xid-segfault-dmesg-T.log is one captured on a real kernel), so

- every pattern is anchored at the start of the kernel message (``NVRM: Xid (PCI:...``,
  ``nvidia-nvswitchN: SXid (...``, ``NVRM: ...``), where the driver's ``printk`` puts it;
- a message shaped like the kernel's task messages (``<name>[<pid>]: ...``, ``<name> (<pid>): ...``, the name
  being at most 15 characters) is never an event, whatever follows;
- lines that carry their facility are kept only from the kernel's: ``/dev/kmsg`` records of facility 0, and
  journal or syslog lines whose identifier is ``kernel``.
"""

from __future__ import annotations

import datetime
import re

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(?P<code>\d+),\s*(?P<text>.*)$"
)
_SXID = re.compile(
    r"(?P<device>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?\): (?P<code>\d+),\s*(?P<text>.*)$"
)
_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_DMESG_T = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<msg>.*)$")
_DMESG = re.compile(r"^\[\s*(?P<uptime>\d+\.\d+)\]\s?(?P<msg>.*)$")
_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) (?P<host>\S+) (?P<ident>[^:\s]+): "
    r"(?P<msg>.*)$"
)
_SHORT = re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>\S+) (?P<ident>[^:\s]+): (?P<msg>.*)$")
# Every wording in which the NVIDIA driver says a GPU no longer answers on PCIe (a class, not a list
# of sentences): "fallen off the bus" (also "fallen off of the bus"), "GPU is lost", "GPU lost from
# the bus" and the status name NV_ERR_GPU_IS_LOST.
FALLEN_OFF_BUS = re.compile(
    r"fallen\s+off\s+(?:of\s+)?the\s+bus|\bGPU\s+is\s+lost\b|\bGPU\s+lost\s+from\s+the\s+bus|NV_ERR_GPU_IS_LOST",
    re.IGNORECASE,
)
_NVRM = re.compile(r"NVRM:\s*")  # at the start of the message (``match``)
# The kernel's messages about a task start with its name (TASK_COMM_LEN 16: at most 15 characters, the job's
# choice), then "[pid]: " (the segfault and trap lines) or " (pid): ": never a driver message.
_TASK_MESSAGE = re.compile(r"^.{1,15}(?:\[\d+\]| \(\d+\)):")
KERNEL_FACILITY = 0  # /dev/kmsg: <facility * 8 + level>; the kernel's own messages are facility 0 (LOG_KERN)
KERNEL_IDENT = "kernel"  # journal and syslog lines: what journald and rsyslog print for the kernel's messages
_PCI_ADDRESS = re.compile(
    r"(?<![0-9a-fA-F:])(?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?(?![0-9a-fA-F])"
)
_THE_NVIDIA_GPU = re.compile(
    r"NVRM: The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
)
_CONTINUATION_LINES = 3  # lines after "The NVIDIA GPU <address>" that may finish its message
_BOOT_MARKER = re.compile(r"^-- (?:Boot|Reboot) ")
_KERNEL_TIME_PREFIX = re.compile(r"^\[\s*(?P<uptime>\d+\.\d+)\]\s?")

FORMATS = ("dmesg_t", "dmesg", "journal_iso", "journal_short", "kmsg")


def parse_since(value, now=None):
    """``2h``/``30m``/``1d``/``90s`` before ``now``, or an ISO 8601 time; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return value
    text = str(value).strip()
    match = re.match(r"^(\d+)\s*([smhd])$", text)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        base = now or datetime.datetime.now(datetime.timezone.utc)
        return base - datetime.timedelta(seconds=seconds)
    return _parse_iso(text)


def _parse_iso(text):
    text = text.replace(",", ".")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    match = re.match(r"^(.*[T ]\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d)(\d\d)$", text)
    if match:
        text = "%s%s:%s" % match.groups()
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "not a time: %r (use ISO 8601 such as 2024-08-30T11:00:00+00:00, or 2h / 30m / 1d)" % text
        ) from None


def _comparable(a, b):
    """Make two datetimes comparable: an aware one meets a naive (local) one in local time."""
    if (a.tzinfo is None) == (b.tzinfo is None):
        return a, b
    if a.tzinfo is not None:
        return a.astimezone().replace(tzinfo=None), b
    return a, b.astimezone().replace(tzinfo=None)


def _short_time(text, now):
    reference = now or datetime.datetime.now()
    if reference.tzinfo is not None:
        reference = reference.astimezone().replace(tzinfo=None)
    parsed = datetime.datetime.strptime("%d %s" % (reference.year, " ".join(text.split())), "%Y %b %d %H:%M:%S")
    if parsed > reference + datetime.timedelta(days=1):
        parsed = parsed.replace(year=parsed.year - 1)  # December lines read in January
    return parsed


def _split(line, now):
    """``(format, time, uptime, message, from_kernel)`` of one line, or None when it is no kernel log line.

    ``from_kernel`` is False for a line whose facility (``/dev/kmsg``) or identifier (journal, syslog) says
    that a program, not the kernel, wrote it; ``dmesg`` lines carry neither and are the kernel's.
    """
    match = _KMSG.match(line)
    if match:
        facility = int(match.group("prio")) >> 3
        return "kmsg", None, int(match.group("usec")) / 1e6, match.group("msg"), facility == KERNEL_FACILITY
    match = _DMESG_T.match(line)
    if match:
        ts = datetime.datetime.strptime(" ".join(match.group("ts").split()), "%a %b %d %H:%M:%S %Y")
        return "dmesg_t", ts, None, match.group("msg"), True
    match = _DMESG.match(line)
    if match:
        return "dmesg", None, float(match.group("uptime")), match.group("msg"), True
    match = _ISO.match(line)
    if match:
        ident = match.group("ident")
        return "journal_iso", _parse_iso(match.group("ts")), None, match.group("msg"), ident == KERNEL_IDENT
    match = _SHORT.match(line)
    if match:
        ident = match.group("ident")
        return "journal_short", _short_time(match.group("ts"), now), None, match.group("msg"), ident == KERNEL_IDENT
    return None


def parse(text, since=None, boot_time=None, now=None):
    """Xid and SXid events of ``text`` inside the window.

    ``since``: a datetime (or see :func:`parse_since`); None means since boot.
    ``boot_time``: when the running kernel booted (datetime); it converts
    monotonic timestamps (``dmesg``, ``/dev/kmsg``) to times and, with
    ``since`` None, drops events of earlier boots. Without it, journal boot
    markers (``-- Boot ... --``) and a restarting monotonic clock still
    separate boots.

    Returns ``{events, formats, warnings, lines, boots_seen}``; each event is
    ``{kind: xid|sxid, code, pci_bus_id, device, text, time, uptime, line}``
    with ``time`` an ISO string or None.
    """
    warnings = []
    if isinstance(since, str):
        since = parse_since(since, now=now)
    candidates = []  # (boot number, event, datetime or None)
    formats = set()
    boot = 0
    last_uptime = None
    lines = 0
    relative_without_boot = False
    # the "The NVIDIA GPU <address>" line whose message may end on a later line
    pending = {"bus": None, "left": 0, "boot": 0, "when": None, "uptime": None, "text": ""}
    last_from_kernel = True
    for raw in (text or "").splitlines():
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        lines += 1
        if _BOOT_MARKER.match(line):
            boot += 1
            continue
        try:
            split = _split(line, now)
        except ValueError as error:
            warnings.append("line %d: time not understood (%s): %s" % (lines, error, line[:160]))
            continue
        if split is None:
            message = line.strip()  # a continuation line of a multi-line message (dmesg, journalctl indent them)
            fmt, when, uptime = None, None, None
            from_kernel = last_from_kernel
        else:
            fmt, when, uptime, message, from_kernel = split
            formats.add(fmt)
        last_from_kernel = from_kernel
        prefix = _KERNEL_TIME_PREFIX.match(message)
        if prefix:  # rsyslog/journal lines that carry the kernel's own [uptime]
            if uptime is None:
                uptime = float(prefix.group("uptime"))
            message = message[prefix.end() :]
        if uptime is not None and fmt in ("dmesg", "kmsg"):
            if last_uptime is not None and uptime + 1.0 < last_uptime:
                boot += 1  # the monotonic clock restarted: a new boot
            last_uptime = uptime
            if when is None and boot_time is not None:
                when = boot_time + datetime.timedelta(seconds=uptime)
        for part in _message_parts(message, fmt):
            if not from_kernel or _TASK_MESSAGE.match(part):
                continue  # a program's line, or the kernel's line about a task (its name is the job's choice)
            event = _event(part, line)
            event_boot, event_when, event_uptime = boot, when, uptime
            if event is None:
                event = _fallen_off_bus(part, line, pending)
                if event is not None and event.pop("continues", False):
                    event_boot, event_when, event_uptime = pending["boot"], pending["when"], pending["uptime"]
            if event is not None and event.get("kind") == "fallen_off_bus":
                pending["left"] = 0  # the message is complete: a later line has no address of its own
            started = _THE_NVIDIA_GPU.match(part)
            if started and event is None:
                pending.update(
                    bus=_short_bus(started.group("bus")), left=_CONTINUATION_LINES + 1, boot=boot, when=when,
                    uptime=uptime, text=part[started.start() + len("NVRM: ") :].strip(),
                )  # fmt: skip
            if event is None:
                continue
            event["uptime"] = event_uptime
            if event_when is None and since is not None:
                relative_without_boot = True
            candidates.append((event_boot, event, event_when))
        pending["left"] = max(pending["left"] - 1, 0)
    events = []
    for event_boot, event, when in candidates:
        if since is None:
            if boot_time is not None and when is not None:
                left, right = _comparable(when, boot_time)
                if left < right:
                    continue
            elif event_boot != boot:
                continue
        elif when is not None:
            left, right = _comparable(when, since)
            if left < right:
                continue
        event["time"] = when.isoformat() if when is not None else None
        events.append(event)
    if relative_without_boot:
        warnings.append("some lines carry only time since boot and no boot time was given: kept regardless of since")
    return {
        "events": events,
        "formats": sorted(formats),
        "warnings": warnings,
        "lines": lines,
        "boots_seen": boot + 1,
    }


def _event(message, line):
    match = _XID.match(message)
    if match:
        return {
            "kind": "xid",
            "code": int(match.group("code")),
            "pci_bus_id": _short_bus(match.group("bus")),
            "device": None,
            "text": match.group("text").strip(),
            "line": line,
        }
    match = _SXID.match(message)
    if match:
        text = match.group("text").strip()
        if not text.lower().startswith(("fatal", "non-fatal")):
            return None  # "Severity 1 Engine instance ..." / "Data {...}" follow the event line
        return {
            "kind": "sxid",
            "code": int(match.group("code")),
            "pci_bus_id": _short_bus(match.group("bus")),
            "device": match.group("device"),
            "text": text,
            "line": line,
        }
    return None


def _message_parts(message, fmt):
    """The lines of one message: ``/dev/kmsg`` escapes the newlines of a multi-line printk as ``\\x0a``."""
    if fmt == "kmsg" and "\\x0a" in message:
        return [part.strip() for part in message.split("\\x0a") if part.strip()]
    return [message]


def _fallen_off_bus(message, line, pending):
    """A ``fallen_off_bus`` event when an NVRM message says a GPU is gone, else None.

    The address is the message's own, else the one of a ``The NVIDIA GPU <address>`` line just
    before it (``continues`` True: the event takes that line's time), else None.
    """
    nvrm = _NVRM.match(message)
    if not nvrm or not FALLEN_OFF_BUS.search(message):
        return None
    text = message[nvrm.end() :].strip()
    address = _PCI_ADDRESS.search(text)
    event = {"kind": "fallen_off_bus", "code": None, "pci_bus_id": None, "device": None, "text": text, "line": line}
    if address:
        event["pci_bus_id"] = _short_bus(address.group("bus"))
    elif pending["left"] > 0 and pending["bus"]:
        event["pci_bus_id"] = pending["bus"]
        event["text"] = "%s ... %s" % (pending["text"], text) if pending["text"] != text else text
        event["continues"] = True
    return event


def _short_bus(bus):
    domain, rest = bus.split(":", 1)
    return ("%04x:%s" % (int(domain, 16) & 0xFFFF, rest)).lower()
