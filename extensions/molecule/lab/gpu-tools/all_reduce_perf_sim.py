#!/usr/bin/env python3
"""Stand-in nccl-tests ``all_reduce_perf`` for the gpuops lab (never shipped by a role).

``extensions/molecule/lab/gpu_tools.yml`` installs it as
``/opt/nccl-tests/build/all_reduce_perf`` (where a build of NVIDIA/nccl-tests puts it, and
where ``gpu_health`` looks). ``all_reduce_perf -b SIZE -e SIZE -f FACTOR -g GPUS`` prints the
report in the layout of ``tests/fixtures/nccl-tests/all_reduce_perf-h100-8x.txt``: the
``# nThread ...`` header, ``# Using devices`` with one rank per GPU, one row per message
size (out-of-place then in-place: time, algbw, busbw, #wrong), ``# Out of bounds values``
and ``# Avg bus bandwidth``. The bus bandwidth rises with the message size towards a peak
per GPU model (H100 460.37 GB/s at 16 GB as in that fixture; L40S over PCIe Gen4 about
24 GB/s); algbw = busbw / (2 (n - 1) / n), as nccl-tests computes it for all_reduce.

The GPUs are those the node's ``nvidia-smi`` lists (the lab's simulated one reads
``/etc/gpuops-lab/gpus.json``). When nvidia-smi fails (driver/library mismatch, no driver),
or ``-g`` asks for more GPUs than there are, it fails as nccl-tests does: a ``Cuda failure``
line and exit 1.

Fault switch: ``/etc/gpuops-lab/all_reduce_perf.fault`` (absent: healthy), one word:
``hang`` (never finishes), ``empty`` (prints nothing, exit 0), ``fail`` (an NCCL failure,
exit 1), ``slow`` (half the bus bandwidth, as in ``all_reduce_perf-h100-8x-slow.txt``),
``wrong`` (one wrong element per row).

``GPUOPS_LAB_ROOT`` prefixes ``/etc/gpuops-lab``; ``GPUOPS_LAB_NVIDIA_SMI`` overrides the
nvidia-smi command.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time

# Out-of-place bus bandwidth at 16 GB messages per GPU model (H100: the fixture's 460.37, just above the 460 GB/s
# the health check asks of an H100 node); smaller messages get less, as on real nodes.
BUSBW_AT_16G_GBPS = (("H200", 470.0), ("H100", 460.37), ("A100", 235.0), ("L40S", 24.0))
DEFAULT_AT_16G = 20.0
REFERENCE_SIZE = 16 * 1024**3
IN_PLACE_SKEW = 460.73 / 460.37  # in-place a hair faster than out-of-place, as in the fixture's 16 GB row
HALF_SIZE = 64 * 1024 * 1024  # bytes at which the bus bandwidth reaches half its peak
UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def lab_path(path: str) -> str:
    return os.environ.get("GPUOPS_LAB_ROOT", "") + path


def read_fault() -> str:
    try:
        with open(lab_path("/etc/gpuops-lab/all_reduce_perf.fault"), encoding="utf-8") as handle:
            words = handle.read().split()
    except FileNotFoundError:
        return ""
    return words[0] if words else ""


def size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError("invalid size %r" % text)
    return int(match.group(1)) * UNITS[match.group(2)]


def list_gpus() -> tuple[list[dict], str]:
    command = os.environ.get("GPUOPS_LAB_NVIDIA_SMI", "nvidia-smi").split()
    try:
        done = subprocess.run(
            [*command, "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], str(error)
    if done.returncode != 0:
        return [], (done.stdout + done.stderr).strip() or "nvidia-smi exited %d" % done.returncode
    gpus = []
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            bus = fields[2].split(":")
            gpus.append(
                {"index": int(fields[0]), "name": fields[1], "bus": "0x" + (bus[1].lower() if len(bus) > 1 else "0")}
            )
    return gpus, ""


def render(args, gpus: list[dict], fault: str) -> str:
    n = args.ngpus
    at_16g = next((value for model, value in BUSBW_AT_16G_GBPS if model in gpus[0]["name"].upper()), DEFAULT_AT_16G)
    peak = at_16g * (REFERENCE_SIZE + HALF_SIZE) / REFERENCE_SIZE
    if fault == "slow":
        peak /= 2
    factor = 2 * (n - 1) / n
    sizes = []
    current = args.minbytes
    while current <= args.maxbytes:
        sizes.append(current)
        current = current * args.stepfactor if args.stepfactor > 1 else args.maxbytes + 1
    host = socket.gethostname()
    lines = [
        "# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0" % (n, args.minbytes, args.maxbytes, args.stepfactor),
        "#",
        "# Using devices",
    ]
    pid = os.getpid()
    for rank, gpu in enumerate(gpus[:n]):
        lines.append(
            "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s"
            % (rank, pid, host, gpu["index"], gpu["bus"], gpu["name"])
        )
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    wrong = 1 if fault == "wrong" else 0
    total = 0.0
    for nbytes in sizes:
        cells = []
        for skew in (1.0, IN_PLACE_SKEW):
            busbw = peak * nbytes / (nbytes + HALF_SIZE) * skew
            algbw = busbw / factor if factor else nbytes / 1e3 / 10.0
            micros = nbytes / (algbw * 1e3) if algbw else 0.0
            cells.append("%8.1f  %6.2f  %6.2f  %5d" % (micros, algbw, busbw if factor else 0.0, wrong))
            if skew == 1.0:
                total += busbw if factor else 0.0
        lines.append("%12d  %12d     float     sum      -1 %s %s" % (nbytes, nbytes // 4, cells[0], cells[1]))
    lines.append("# Out of bounds values : %d %s" % (wrong, "OK" if not wrong else "FAILED"))
    lines.append("# Avg bus bandwidth    : %.3f " % (total / len(sizes) if sizes else 0.0))
    lines.append("#")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="all_reduce_perf", description="gpuops lab stand-in nccl-tests all_reduce_perf"
    )
    parser.add_argument("-b", "--minbytes", type=size, default=size("32M"))
    parser.add_argument("-e", "--maxbytes", type=size, default=size("32M"))
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-g", "--ngpus", type=int, default=1)
    args = parser.parse_args(argv)

    fault = read_fault()
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault == "empty":
        return 0
    if fault == "fail":
        print(
            "%s: Test NCCL failure common.cu:1005 'unhandled system error "
            "(run with NCCL_DEBUG=INFO for details)'" % socket.gethostname()
        )
        print(" .. %s pid %d: Test failure common.cu:891" % (socket.gethostname(), os.getpid()))
        return 1
    gpus, error = list_gpus()
    if error or args.ngpus < 1 or args.ngpus > len(gpus):
        cause = error or "invalid device ordinal (%d GPUs asked, %d present)" % (args.ngpus, len(gpus))
        print(
            "%s: Test CUDA failure common.cu:892 '%s'" % (socket.gethostname(), cause.splitlines()[0] if cause else "")
        )
        return 1
    sys.stdout.write(render(args, gpus, fault))
    return 1 if fault == "wrong" else 0


if __name__ == "__main__":
    sys.exit(main())
