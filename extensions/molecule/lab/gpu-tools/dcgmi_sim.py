#!/usr/bin/env python3
"""Stand-in ``dcgmi`` for the gpuops lab (never shipped by a role).

``extensions/molecule/lab/gpu_tools.yml`` installs it as ``/usr/bin/dcgmi`` (where
datacenter-gpu-manager puts the real one) on the nodes of the scenarios that import it.
What it answers:

``dcgmi diag -r 1|2|3|4 [-j]``
    the report of the diagnostic at that run level. ``-j`` prints JSON in the layout of
    ``tests/fixtures/dcgm/dcgmi-diag-r1-pass.json`` and ``dcgmi-diag-r2-pcie-fail.json``
    (``{"DCGM GPU Diagnostic": {"test_categories": [{category, tests: [{name, results}]}],
    "version"}}``): level 1 the Deployment category only, level 2 adds Integration (PCIe),
    Hardware (GPU Memory) and Stress (Targeted Power) with one result per GPU
    (``gpu_ids`` as a string); levels 3 and 4 are answered as level 2. Without ``-j`` a
    short table. Exit 0 when every test passes, 1 when one fails.
``dcgmi discovery -l``
    the GPUs, one line each.

The GPUs are those the node's ``nvidia-smi`` lists (the lab's simulated one reads
``/etc/gpuops-lab/gpus.json``); when nvidia-smi fails (no driver loaded, a
driver/library version mismatch after an upgrade without reboot), the ``NVML Library``
test fails with its message, as DCGM's deployment checks do.

Fault switch: ``/etc/gpuops-lab/dcgmi.fault`` (absent: healthy), one line:

``no-hostengine``
    the host engine does not answer: the connection error on stderr, nothing on stdout,
    exit 255 (what a node shows while nv-hostengine is stopped or still starting);
``hang``
    never answers (a host engine that accepted the connection and stalls): sleeps until killed;
``empty``
    prints nothing and exits 0;
``fail``
    prints the connection error and exits 1;
``fail-test NAME [GPU]``
    the report with test ``NAME`` (``PCIe``, ``GPU Memory``, ``Targeted Power``, or a
    Deployment test) failing on GPU ``GPU`` (default 0), with a warning and error id.

``GPUOPS_LAB_ROOT`` prefixes ``/etc/gpuops-lab`` (unit tests point it at a temp dir);
``GPUOPS_LAB_NVIDIA_SMI`` overrides the nvidia-smi command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

VERSION = "4.5.2"  # the lab's datacenter-gpu-manager-4-core stand-in
DEPLOYMENT = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
# Level 2 categories and their per-GPU tests, in the order of dcgmi-diag-r2-pcie-fail.json.
PER_GPU = (("Integration", "PCIe"), ("Hardware", "GPU Memory"), ("Stress", "Targeted Power"))
HOSTENGINE_ERROR = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)


def lab_path(path: str) -> str:
    return os.environ.get("GPUOPS_LAB_ROOT", "") + path


def read_fault() -> list[str]:
    try:
        with open(lab_path("/etc/gpuops-lab/dcgmi.fault"), encoding="utf-8") as handle:
            return handle.read().split()
    except FileNotFoundError:
        return []


def list_gpus() -> tuple[list[dict], str]:
    """``([{index, name, bus_id}], error)`` from nvidia-smi; error is its message when it failed."""
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
            gpus.append({"index": int(fields[0]), "name": fields[1], "bus_id": fields[2]})
    return gpus, ""


def report(level: int, gpus: list[dict], smi_error: str, fault: list[str]) -> dict:
    failing = None
    if fault[:1] == ["fail-test"] and len(fault) >= 2:
        words = fault[1:]
        gpu = int(words[-1]) if len(words) > 1 and words[-1].isdigit() else 0
        failing = (" ".join(words[:-1]) if len(words) > 1 and words[-1].isdigit() else " ".join(words), gpu)

    def result(test: str, gpu: int | None) -> dict:
        entry = {} if gpu is None else {"gpu_ids": str(gpu)}
        if test == "NVML Library" and smi_error:
            entry.update(status="Fail", warnings=[{"warning": "Cannot initialize NVML: %s" % smi_error, "error_id": 2}])
        elif failing and failing[0] == test and (gpu is None or gpu == failing[1]):
            where = "GPU %d" % failing[1]
            entry.update(
                status="Fail", warnings=[{"warning": "%s: %s failed (lab fault)" % (where, test), "error_id": 12}]
            )
        else:
            entry["status"] = "Pass"
        return entry

    categories = [{"category": "Deployment", "tests": [{"name": t, "results": [result(t, None)]} for t in DEPLOYMENT]}]
    if level >= 2 and not smi_error:
        for category, test in PER_GPU:
            results = [result(test, gpu["index"]) for gpu in gpus]
            categories.append({"category": category, "tests": [{"name": test, "results": results}]})
    return {"DCGM GPU Diagnostic": {"test_categories": categories, "version": VERSION}}


def failed(document: dict) -> bool:
    return any(
        result["status"] == "Fail"
        for category in document["DCGM GPU Diagnostic"]["test_categories"]
        for test in category["tests"]
        for result in test["results"]
    )


def table(document: dict) -> str:
    lines = [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
    ]
    lines.append("| Diagnostic                | Result                                         |")
    lines.append("+===========================+================================================+")
    for category in document["DCGM GPU Diagnostic"]["test_categories"]:
        lines.append("|-----  %-19s  -----+------------------------------------------------|" % category["category"])
        for test in category["tests"]:
            statuses = sorted({result["status"] for result in test["results"]})
            lines.append("| %-25s | %-46s |" % (test["name"], "Fail" if "Fail" in statuses else "/".join(statuses)))
    lines.append("+---------------------------+------------------------------------------------+")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dcgmi", description="gpuops lab stand-in dcgmi: diag -r N [-j], discovery -l"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    diag = commands.add_parser("diag")
    diag.add_argument("-r", "--run", required=True, choices=["1", "2", "3", "4", "short", "medium", "long", "xlong"])
    diag.add_argument("-j", "--json", action="store_true")
    discovery = commands.add_parser("discovery")
    discovery.add_argument("-l", "--list", action="store_true")
    args = parser.parse_args(argv)

    fault = read_fault()
    mode = fault[0] if fault else ""
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode in ("no-hostengine", "fail"):
        sys.stderr.write(HOSTENGINE_ERROR)
        return 255 if mode == "no-hostengine" else 1
    if mode == "empty":
        return 0

    gpus, smi_error = list_gpus()
    if args.command == "discovery":
        print("%d GPU%s found." % (len(gpus), "" if len(gpus) == 1 else "s"))
        for gpu in gpus:
            print("GPU ID: %d  Name: %s  PCI Bus ID: %s" % (gpu["index"], gpu["name"], gpu["bus_id"]))
        return 0
    level = {"short": 1, "medium": 2, "long": 3, "xlong": 4}.get(args.run) or int(args.run)
    document = report(level, gpus, smi_error, fault)
    sys.stdout.write(json.dumps(document, indent=4) + "\n" if args.json else table(document))
    return 1 if failed(document) else 0


if __name__ == "__main__":
    sys.exit(main())
