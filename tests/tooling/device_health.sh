#!/usr/bin/env bash
# On a lent GPU machine (read-only: no MIG change, no reset, no setting written): the node-side command
# gpuops-gpu-health and playbooks/health_check.yml from this tree, idle and under a bf16 matmul load, and a job
# program of uid 65534 named like an Xid message that crashes. Needs the controller's ansible-core for the node's
# Python under .cache/device-ansible (carried). Results in $OUT/device-health.tgz.
set -u
OUT=${OUT:-./device-out}
mkdir -p "$OUT"
work=$(mktemp -d)
mkdir -p "$work/coll/ansible_collections/gpuops" "$work/out"
ln -sfn "$PWD" "$work/coll/ansible_collections/gpuops/cluster"
echo '{"state_dir": "'"$work"'/state", "slurm_node_name": "gpu-device"}' >"$work/config.json"
health() { PYTHONPATH="$work/coll" timeout 70 python3 -I -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_command import main; sys.exit(main())' "$work/coll" -c "$work/config.json" "$@"; }
play() { ANSIBLE_COLLECTIONS_PATH="$work/coll" ANSIBLE_CONFIG="$PWD/ansible.cfg" PYTHONPATH="$PWD/.cache/device-ansible" \
  timeout 150 python3 .cache/device-ansible/bin/ansible-playbook -i tests/tooling/device_inventory.yml playbooks/health_check.yml \
  -e ansible_become=false -e "gpuops_health_report_path=$work/out/$1-report.json"; }
{ health --json; echo "rc=$?"; } >"$work/out/command-idle-1.json" 2>&1
{ health --json; echo "rc=$?"; } >"$work/out/command-idle-2.json" 2>&1
# the forgery, as uid 65534, then a run of the command (its state in place: reads since the last run)
python3 tests/tooling/device_programs.py crash /tmp/forge >"$work/out/forge-rc.txt" 2>&1
sleep 1
dmesg | grep -a segfault | tail -2 >"$work/out/forge-dmesg.txt" 2>&1
{ health --json; echo "rc=$?"; } >"$work/out/command-after-forgery.json" 2>&1
{ health --json --no-state --since boot; echo "rc=$?"; } >"$work/out/command-whole-boot.json" 2>&1
{ play idle; echo "rc=$?"; } >"$work/out/playbook-idle.txt" 2>&1
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  timeout 120 python3 tests/tooling/device_programs.py load 70 &
  sleep 20
  nvidia-smi --query-gpu=utilization.gpu,power.draw,temperature.gpu,clocks.sm --format=csv >"$work/out/load.csv" 2>&1
  { health --json; echo "rc=$?"; } >"$work/out/command-load.json" 2>&1
  { play load; echo "rc=$?"; } >"$work/out/playbook-load.txt" 2>&1
  nvidia-smi --query-gpu=utilization.gpu,power.draw,temperature.gpu,clocks.sm --format=csv,noheader >>"$work/out/load.csv" 2>&1
  wait
else
  echo "no torch with CUDA: no load" >"$work/out/load.csv"
fi
cp "$work/state/state.json" "$work/out/" 2>/dev/null
tar czf "$OUT/device-health.tgz" -C "$work" out
