"""Time of the node-side health command (gpuops-gpu-health) per level, with the lab's simulated tools (a plain script).

    .venv/bin/python tests/benchmarks/bench_health_command.py [runs]
    .venv/bin/python tests/benchmarks/bench_health_command.py --lab NODE [runs]

``--lab NODE``: the command as the role installed it on a running lab node (podman container NODE, e.g. s22-gpu2
while the slurm_22_05 scenario is up, or a ``make lab`` node after playbooks/gpu_healthcheck.yml): ``podman exec
NODE gpuops-gpu-health --level L --json --no-state``, the node's own configuration and simulated tools; prints per
level the command's own ``duration_s`` and the wall time including ``podman exec``.

Lays out a node in a temporary directory: the lab's simulated ``nvidia-smi`` (extensions/molecule/lab/nvidia-smi,
8x H100 SXM behind NVSwitch, Fabric Manager up), ``systemctl`` answering ``active``, ``dcgmi`` and
``all_reduce_perf`` printing the captured fixtures, the captured 8-port NDR InfiniBand sysfs tree and a kernel
log file. The command runs as the role installs it: a launcher under the system ``python3 -IS`` (no
site-packages), the collection's module_utils on its path, every tool under coreutils ``timeout``, state
stored between runs. Prints, per level, the median and worst wall time of whole runs (goal for quick: <= 2 s on an
8-GPU node) and, for quick, what the simulated tools themselves take (each is a Python process here).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SIMULATOR = ROOT / "extensions" / "molecule" / "lab" / "nvidia-smi"
PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin") or sys.executable
GOAL_MS = {"quick": 2000}


def lay_out(base: Path) -> dict:
    bin_dir, lab = base / "bin", base / "lab"
    bin_dir.mkdir()
    (lab / "etc/gpuops-lab").mkdir(parents=True)
    (lab / "usr/share/gpuops-lab").mkdir(parents=True)
    (lab / "run/gpuops-lab").mkdir(parents=True)
    (lab / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H100-SXM", "count": 8, "nvswitch": True}))
    (lab / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
    for name in ("fabricmanager-ready", "persistenced-ready", "persistence-mode"):
        (lab / "run/gpuops-lab" / name).write_text("1\n")
    tools = {
        "nvidia-smi": "#!%s\nimport sys\nsys.path.insert(0, %r)\nimport nvidia_smi_sim\n"
        "sys.exit(nvidia_smi_sim.main(prog='nvidia-smi'))\n" % (PYTHON, str(SIMULATOR)),
        "systemctl": "#!/bin/sh\necho active\n",
        "dcgmi": "#!/bin/sh\ncat %s\n" % (FIXTURES / "dcgm/dcgmi-diag-r1-pass.json"),
        "all_reduce_perf": "#!/bin/sh\ncat %s\n" % (FIXTURES / "nccl-tests/all_reduce_perf-h100-8x.txt"),
        "gpuops-gpu-health": "#!%s -IS\nimport sys\nsys.path.insert(0, %r)\n"
        "from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_command import main\n"
        "sys.exit(main())\n" % (PYTHON, str(ROOT / ".collections")),
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    config = {
        "nvidia_smi_path": str(bin_dir / "nvidia-smi"),
        "all_reduce_perf_path": str(bin_dir / "all_reduce_perf"),
        "kernel_log": str(FIXTURES / "kernel-log/clean-journal-short-iso.log"),
        "infiniband_root": str(FIXTURES / "infiniband/healthy-8x-ndr"),
        "expected_gpu_count": 8,
        "state_dir": str(base / "state"),
        "prometheus_textfile": str(base / "gpuops_gpu_health.prom"),
    }
    (base / "gpu-health.json").write_text(json.dumps(config))
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir, GPUOPS_LAB_ROOT=str(lab))
    return {"bin": bin_dir, "config": base / "gpu-health.json", "env": env}


def wall(argv, env, runs):
    samples, last = [], None
    for _unused in range(runs):
        start = time.perf_counter()
        last = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples), last


def on_lab_node(node, runs):
    """Per level, the command's own duration_s and the wall time of ``podman exec`` on a running lab node."""
    print("lab node %s, %d runs per figure, %d CPUs here, load %.1f" % (node, runs, os.cpu_count(), os.getloadavg()[0]))
    for level in ("quick", "standard", "extended"):
        argv = ["podman", "exec", node, "gpuops-gpu-health", "--level", level, "--json", "--no-state"]
        durations, walls, payload = [], [], {}
        for _unused in range(runs):
            start = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            walls.append((time.perf_counter() - start) * 1000)
            payload = json.loads(done.stdout)
            durations.append(payload["duration_s"] * 1000)
        print(
            "%-9s command median %7.1f ms  max %7.1f ms  (podman exec wall median %7.1f ms), exit %d, %d commands"
            % (level, statistics.median(durations), max(durations), statistics.median(walls), done.returncode,
               len(payload.get("commands") or []))
        )  # fmt: skip


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--lab":
        on_lab_node(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 10)
        return
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as tmp:
        node = lay_out(Path(tmp))
        command = [str(node["bin"] / "gpuops-gpu-health"), "-c", str(node["config"])]
        print("python %s, %d runs per figure, %d CPUs, load %.1f" % (PYTHON, runs, os.cpu_count(), os.getloadavg()[0]))
        for level in ("quick", "standard", "extended"):
            median, worst, done = wall([*command, "--level", level, "--json"], node["env"], runs)
            payload = json.loads(done.stdout)
            goal = GOAL_MS.get(level)
            verdict = "" if goal is None else "  (goal <= %d ms: %s)" % (goal, "met" if median <= goal else "MISSED")
            print(
                "%-9s median %7.1f ms  max %7.1f ms  exit %d, %d commands, %d checks%s"
                % (level, median, worst, done.returncode, len(payload["commands"]), len(payload["checks"]), verdict)
            )
            for line in payload["commands"]:
                print("          %s" % line)
        smi = str(node["bin"] / "nvidia-smi")
        for argv, what in (
            ([smi, "-q", "-x"], "simulated nvidia-smi -q -x"),
            ([smi, "nvlink", "-s"], "simulated nvidia-smi nvlink -s"),
            ([PYTHON, "-IS", "-c", "pass"], "python3 -IS start alone"),
            ([*command, "--help"], "launcher start and imports (--help)"),
        ):
            median, worst, _done = wall(argv, node["env"], runs)
            print("%-36s median %7.1f ms  max %7.1f ms" % (what, median, worst))


if __name__ == "__main__":
    main()
