#!/usr/bin/env bash
# Captures fixtures on a real GPU machine (read-only: no MIG change, no reset, no setting written) and runs the
# node-side health command from this tree against it. Everything lands in $OUT (default ./device-out).
set -u
OUT=${OUT:-./device-out}
mkdir -p "$OUT"
cap() { local name=$1; shift; { echo "# $ $*"; timeout 60 "$@"; echo "# rc=$?"; } >"$OUT/$name" 2>&1; }
cap uname.txt uname -a
cap os-release.txt cat /etc/os-release
cap nvidia-smi-q-x.xml nvidia-smi -q -x
cap nvidia-smi-q.txt nvidia-smi -q
cap nvlink-s.txt nvidia-smi nvlink -s
cap nvlink-e.txt nvidia-smi nvlink -e
cap topo-m.txt nvidia-smi topo -m
cap query-gpu.csv nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version,mig.mode.current,mig.mode.pending --format=csv,noheader
cap mig-lgi.txt nvidia-smi mig -lgi
cap mig-lgip.txt nvidia-smi mig -lgip
cap dkms-status.txt dkms status
cap modinfo-nvidia.txt modinfo nvidia
cap lsmod.txt sh -c 'lsmod | grep -E "^nvidia|peermem|ib_|mlx"'
cap packages.txt sh -c 'dpkg-query -W -f "\${Package} \${Version}\n" 2>/dev/null | grep -Ei "nvidia|cuda|nccl|dcgm|libnvidia|linux-(image|headers)" || rpm -qa | grep -Ei "nvidia|cuda|nccl|dcgm"'
cap cdi.txt sh -c 'ls -l /etc/cdi /var/run/cdi 2>&1; command -v nvidia-ctk && nvidia-ctk --version'
cap ib.txt sh -c 'ls /sys/class/infiniband 2>&1'
cap id.txt id
cap dmesg-nvrm.txt sh -c 'dmesg -T 2>&1 | grep -E "NVRM|nvidia|segfault" | tail -40'
cap dmesg-facility.txt sh -c 'dmesg -f kern -T 2>&1 | tail -3; dmesg --version'
# A job's program named like a driver message that crashes (the forgery of issue 25), as uid 65534.
if [ "$(uname -m)" = x86_64 ]; then
  python3 tests/tooling/device_programs.py crash /tmp/gpuops-forge >"$OUT/forge-run.txt" 2>&1
  sleep 1
  cap dmesg-forge.txt sh -c 'dmesg 2>&1 | grep -a segfault | tail -3; dmesg -T 2>&1 | grep -a segfault | tail -3; journalctl -k -o short-iso --no-pager 2>&1 | grep -a segfault | tail -3'
fi
# The health command from this tree, idle, then under load when torch is there.
echo "{}" >/tmp/gpuops-empty.json
mkdir -p /tmp/gpuops-tree/ansible_collections/gpuops && ln -sfn "$PWD" /tmp/gpuops-tree/ansible_collections/gpuops/cluster
health() { PYTHONPATH=/tmp/gpuops-tree timeout 70 python3 -c 'import sys; from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_command import main; sys.exit(main())' "$@"; }
{ health --json --no-state -c /tmp/gpuops-empty.json; echo "rc=$?"; } >"$OUT/health-idle.json" 2>&1
{ health --json --no-state -c /tmp/gpuops-empty.json --level standard; echo "rc=$?"; } >"$OUT/health-idle-standard.json" 2>&1
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  timeout 120 python3 tests/tooling/device_programs.py load 75 &
  sleep 25
  cap smi-under-load.xml nvidia-smi -q -x
  { health --json --no-state -c /tmp/gpuops-empty.json; echo "rc=$?"; } >"$OUT/health-load.json" 2>&1
  wait
else
  echo "no torch with CUDA" >"$OUT/health-load.json"
fi
ls -la "$OUT"
