# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the report of nccl-tests ``all_reduce_perf``.

Rows are ``size count type redop root time algbw busbw #wrong`` for the
out-of-place then the in-place run; the report ends with
``# Avg bus bandwidth    : 123.456``. The health figure is the bus bandwidth
at the largest message size (what Azure's checks compare at 16 GB).
"""

from __future__ import annotations

import re

_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+(.*)$")


def parse(text):
    """``{max_size_bytes, busbw_gbps (at the largest size), avg_busbw_gbps, wrong, warnings}``."""
    result = {"max_size_bytes": None, "busbw_gbps": None, "avg_busbw_gbps": None, "wrong": 0, "warnings": []}
    for line in (text or "").splitlines():
        avg = _AVG.match(line)
        if avg:
            result["avg_busbw_gbps"] = float(avg.group(1))
            continue
        row = _ROW.match(line)
        if not row:
            continue
        fields = row.group(3).split()
        # out-of-place: time algbw busbw #wrong, then in-place: time algbw busbw #wrong
        try:
            busbw = [float(fields[2])] + ([float(fields[6])] if len(fields) >= 8 else [])
            wrong = [fields[3]] + ([fields[7]] if len(fields) >= 8 else [])
        except (IndexError, ValueError):
            result["warnings"].append("row not understood: %s" % line.strip()[:160])
            continue
        result["wrong"] += sum(int(value) for value in wrong if value.isdigit())
        size = int(row.group(1))
        if result["max_size_bytes"] is None or size >= result["max_size_bytes"]:
            result["max_size_bytes"] = size
            result["busbw_gbps"] = max(busbw)
    if result["busbw_gbps"] is None:
        result["warnings"].append("no all_reduce_perf result rows")
    return result
