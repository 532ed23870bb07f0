# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read ``nvidia-smi nvlink -s`` (link state and speed) and ``nvidia-smi nvlink -e`` (error counters).

``-s`` prints, per GPU, ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` then
``Link 0: 26.562 GB/s`` or ``Link 3: <inactive>``; a GPU without NVLink prints
nothing under its header, or ``NVML: Unable to retrieve NVLink information as
all links are inActive``. ``-e`` prints ``Link 0: Replay Errors: 0`` lines
(also ``Recovery Errors``, ``CRC Errors``; newer drivers add more counters).
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^GPU (?P<index>\d+):\s*(?P<name>.*?)(?:\s*\(UUID:\s*(?P<uuid>[^)]+)\))?\s*$")
_LINK_STATE = re.compile(r"^Link (?P<link>\d+):\s*(?P<state>.*?)\s*$")
_SPEED = re.compile(r"^(?P<speed>\d+(?:\.\d+)?)\s*GB/s$")
_LINK_COUNTER = re.compile(r"^Link (?P<link>\d+):\s*(?P<name>[A-Za-z][A-Za-z0-9 _-]*?):\s*(?P<value>\d+)\s*$")
_ALL_INACTIVE = "all links are inactive"


def _gpu_header(line):
    match = _GPU.match(line)
    if not match:
        return None
    return {"index": int(match.group("index")), "name": match.group("name") or None, "uuid": match.group("uuid")}


def parse_status(text):
    """``{gpus: [{index, name, uuid, links: [{link, active, speed_gbps, state}], all_inactive}], warnings}``."""
    gpus, warnings = [], []
    current = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _gpu_header(line)
        if header is not None:
            current = dict(header, links=[], all_inactive=False)
            gpus.append(current)
            continue
        if current is None:
            warnings.append("line before any GPU header: %s" % line[:160])
            continue
        if _ALL_INACTIVE in line.lower():
            current["all_inactive"] = True
            continue
        match = _LINK_STATE.match(line)
        if not match:
            if ", P2P is supported" in line or "NVSwitch connected" in line:
                continue  # capability lines printed by some drivers
            warnings.append("GPU %d: line not understood: %s" % (current["index"], line[:160]))
            continue
        state = match.group("state")
        speed = _SPEED.match(state)
        current["links"].append(
            {
                "link": int(match.group("link")),
                "active": speed is not None,
                "speed_gbps": float(speed.group("speed")) if speed else None,
                "state": state,
            }
        )
    return {"gpus": gpus, "warnings": warnings}


def _counter_key(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_errors(text):
    """``{gpus: [{index, name, uuid, links: [{link, counters: {name: value}}]}], warnings}``.

    Counter names become snake case: ``replay_errors``, ``recovery_errors``, ``crc_errors``.
    """
    gpus, warnings = [], []
    current = None
    by_link = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _gpu_header(line)
        if header is not None:
            current = dict(header, links=[])
            gpus.append(current)
            by_link = {}
            continue
        if current is None:
            warnings.append("line before any GPU header: %s" % line[:160])
            continue
        # Some builds print several counters on one line, comma separated.
        parts = [part.strip() for part in line.split(",")]
        link_prefix = re.match(r"^Link (\d+):", parts[0])
        if not link_prefix:
            if _ALL_INACTIVE not in line.lower():
                warnings.append("GPU %d: line not understood: %s" % (current["index"], line[:160]))
            continue
        link = int(link_prefix.group(1))
        for position, part in enumerate(parts):
            candidate = part if position == 0 else "Link %d: %s" % (link, part)
            match = _LINK_COUNTER.match(candidate)
            if not match:
                warnings.append("GPU %d: counter not understood: %s" % (current["index"], part[:160]))
                continue
            if link not in by_link:
                by_link[link] = {"link": link, "counters": {}}
                current["links"].append(by_link[link])
            by_link[link]["counters"][_counter_key(match.group("name"))] = int(match.group("value"))
    return {"gpus": gpus, "warnings": warnings}
