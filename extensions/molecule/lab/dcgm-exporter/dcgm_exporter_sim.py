#!/usr/bin/env python3
"""Stand-in ``dcgm-exporter`` for the gpuops lab (never shipped by a role).

The stand-in ``datacenter-gpu-manager-exporter`` package installs this file as ``/usr/bin/dcgm-exporter`` with the
unit ``nvidia-dcgm-exporter.service`` of the real package. It serves ``/metrics`` from the simulated GPUs: one
``nvidia-smi --query-gpu`` call per scrape (the lab's simulated nvidia-smi, which reads
``/etc/gpuops-lab/gpus.json`` and the injected faults), rendered as dcgm-exporter 4.8.x renders a GPU metric
(NVIDIA/dcgm-exporter tag 4.5.3-4.8.2, internal/pkg/rendermetrics/render_metrics.go, gpuMetricsFormat):

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="00000000:18:00.0",device="nvidia0",
    modelName="NVIDIA H100 80GB HBM3",Hostname="node"} 32    (one line)

Flags as the real binary takes them (pkg/cmd/app.go): ``-f``/``--collectors`` (only the fields of that file that
the lab can feed are served), ``-a``/``--address`` (``[host]:port``, default ``:9400``), ``-r``/
``--remote-hostengine-info`` (connect to the node's nv-hostengine instead of embedding one).

With ``-r``, as a real exporter bound to a host engine: it needs the host engine running when it starts
(``/run/gpuops-lab/nv-hostengine-ready``, written by the stand-in nv-hostengine with its pid), and once that
host engine restarts (another pid) or stops, every scrape answers 503 without a GPU metric: the stale exporter
an operator sees until the exporter is restarted too.

``GPUOPS_LAB_ROOT`` prefixes the lab paths (unit tests point it at a temp dir); ``GPUOPS_LAB_NVIDIA_SMI``
names the nvidia-smi to run (default ``/usr/bin/nvidia-smi``).
"""

from __future__ import annotations

import argparse
import csv
import http.server
import io
import os
import socket
import subprocess
import sys
import time

# The fields the lab can feed: DCGM field -> (nvidia-smi --query-gpu field, type, help as default-counters.csv has it).
FIELDS = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature.gpu", "gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("power.draw", "gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_FB_USED": ("memory.used", "gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization.gpu", "gauge", "GPU utilization (in %)."),
}
QUERY = ("index", "uuid", "pci.bus_id", "name")


def lab_path(path: str) -> str:
    return os.environ.get("GPUOPS_LAB_ROOT", "") + path


def collectors(path: str) -> list[str]:
    """The fields of a collectors CSV (``field, type, help`` lines, ``#`` comments) the lab can feed, in order."""
    wanted = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name = line.split(",", 1)[0].strip()
            if name and not name.startswith("#") and name in FIELDS and name not in wanted:
                wanted.append(name)
    return wanted


def hostengine_pid() -> str | None:
    try:
        with open(lab_path("/run/gpuops-lab/nv-hostengine-ready"), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def gpu_rows(fields: list[str]) -> list[dict]:
    smi = os.environ.get("GPUOPS_LAB_NVIDIA_SMI", "/usr/bin/nvidia-smi")
    names = list(QUERY) + [FIELDS[field][0] for field in fields]
    done = subprocess.run(
        [smi, "--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError("nvidia-smi failed (rc=%d): %s" % (done.returncode, (done.stderr or done.stdout).strip()))
    rows = []
    for values in csv.reader(io.StringIO(done.stdout), skipinitialspace=True):
        if len(values) == len(names):
            rows.append(dict(zip(names, values)))
    return rows


def render(fields: list[str], rows: list[dict], hostname: str) -> str:
    out = []
    for field in fields:
        query, kind, text = FIELDS[field]
        out.append("# HELP %s %s" % (field, text))
        out.append("# TYPE %s %s" % (field, kind))
        for row in rows:
            labels = 'gpu="%s",UUID="%s",pci_bus_id="%s",device="nvidia%s",modelName="%s",Hostname="%s"' % (
                row["index"],
                row["uuid"],
                row["pci.bus_id"],
                row["index"],
                row["name"],
                hostname,
            )
            out.append("%s{%s} %s" % (field, labels, row[query]))
    return "\n".join(out) + "\n"


def serve(args) -> int:
    fields = collectors(args.collectors)
    bound_pid = None
    if args.remote_hostengine_info:
        # a host engine started a moment ago (Type=simple) writes its ready file just after: wait for it briefly
        for _attempt in range(20):
            bound_pid = hostengine_pid()
            if bound_pid is not None:
                break
            time.sleep(0.5)
        if bound_pid is None:
            print(
                "dcgm-exporter (gpuops lab): cannot connect to the host engine at %s: nv-hostengine is not running"
                % args.remote_hostengine_info,
                file=sys.stderr,
            )
            return 1
    host, _sep, port = args.address.rpartition(":")
    hostname = socket.gethostname()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            if bound_pid is not None and hostengine_pid() != bound_pid:
                body = "host engine connection lost (it restarted or stopped): restart nvidia-dcgm-exporter\n"
                self.send_response(503)
            else:
                try:
                    body = render(fields, gpu_rows(fields), hostname)
                    self.send_response(200)
                except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                    body = "failed to collect metrics: %s\n" % error
                    self.send_response(500)
            data = body.encode()
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):
            return

    server = http.server.ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    print("dcgm-exporter (gpuops lab stand-in) serving %s on %s" % (", ".join(fields), args.address), flush=True)
    server.serve_forever()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dcgm-exporter", description="gpuops lab stand-in dcgm-exporter")
    parser.add_argument("-f", "--collectors", default=os.environ.get("DCGM_EXPORTER_COLLECTORS",
                        "/etc/dcgm-exporter/default-counters.csv"))  # fmt: skip
    parser.add_argument("-a", "--address", default=os.environ.get("DCGM_EXPORTER_LISTEN", ":9400"))
    parser.add_argument("-r", "--remote-hostengine-info", default=os.environ.get("DCGM_REMOTE_HOSTENGINE_INFO"))
    parser.add_argument("-c", "--collect-interval", type=int, default=30000)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
