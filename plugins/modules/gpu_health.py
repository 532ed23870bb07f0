#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: One GPU health verdict per node from nvidia-smi, kernel log, NVLink, Fabric Manager and InfiniBand
version_added: 0.1.0
description:
  - Reads the node's GPU state with B(one) C(nvidia-smi -q -x) call (not one call per GPU or per field), the kernel log
    (C(journalctl -k) or C(dmesg -T)), C(nvidia-smi nvlink -s) (and C(-e) from O(level=standard)), InfiniBand ports from
    C(/sys/class/infiniband), and C(systemctl is-active nvidia-fabricmanager) on NVSwitch systems.
  - Judges ECC errors, row remapping (Ampere and later) or retired pages (Volta), PCIe link generation and width,
    temperature, clock event (throttle) reasons, recovery actions the driver asks for, NVLink fabric state, Xid and
    NVSwitch SXid events against NVIDIA's Xid catalog, NVLink links and counters, InfiniBand state and rate.
  - Judges whether every installed kernel (C(/lib/modules/<kver>) with an image in C(/boot)) has the NVIDIA module
    (DKMS or a precompiled package; C(modules.dep) lists it). The kernel the node boots next without one fails the
    C(kernel_module) check (fix it before the node reboots), any other warns. The kernel booted next is
    C(grubby --default-kernel) where grubby is installed, else the newest installed kernel (GRUB's default).
    From O(level=standard) C(dkms status) names the fix. Skipped when no driver is installed by DKMS or a package.
  - Judges the CDI specification of the GPUs (C(nvidia.yaml) in C(/var/run/cdi) and C(/etc/cdi), files only) where
    the NVIDIA Container Toolkit is installed. The one runtimes take first must name the loaded driver's release and
    list every GPU (every MIG device where MIG is on), or the C(cdi_spec) check fails with the command that
    regenerates it; a stale one in the other directory warns. Skipped without C(nvidia-ctk).
  - Asks the DCGM Exporter where its unit C(nvidia-dcgm-exporter.service) is installed (the nvidia_stack role
    installs it with DCGM), with one GET of C(http://127.0.0.1:<port>/metrics) (the port of the role's drop-in,
    else 9400) and a 10 s timeout. Every GPU nvidia-smi lists must have a C(DCGM_FI_*) series, or the C(dcgm_exporter)
    check fails; an exporter that does not answer (refused, timed out, an HTTP error) fails with the fix. Skipped
    where the exporter is not installed and in offline triage.
  - Judges GPUDirect RDMA where the node has RDMA HCAs (InfiniBand or RoCE, C(/sys/class/infiniband)), from sysfs
    and C(/proc) alone. The path it has (DMA-BUF or C(nvidia-peermem), see O(gpudirect_rdma)) goes into the facts
    (C(facts.gpudirect_rdma)); the C(gpudirect_rdma) check fails with the fix where the path chosen cannot serve
    (C(nvidia-peermem) not loaded, or without the OFED peer-memory symbols it needs). Skipped without HCAs.
  - O(level=standard) adds C(dcgmi diag -r 1); O(level=extended) runs C(dcgmi diag -r 2) and C(all_reduce_perf)
    against a bus-bandwidth threshold.
  - The verdict fails closed. At the level asked for, a missing tool (no C(dcgmi), no C(all_reduce_perf)), a run
    that timed out or failed, or an empty result (C(dcgmi diag) without results, the host engine did not answer)
    fails its check, with the fix in the detail. Skip a check with O(skip_checks) to not ask for it. A kernel log
    that cannot be read fails the Xid checks; Fabric Manager's state that cannot be read on an NVSwitch node fails
    its check; C(nvidia-smi nvlink -s) failing fails the NVLink check where links are expected.
  - Offline triage, with O(nvidia_smi_xml) set, judges captured files instead and runs no command at all, so a support
    engineer can run C(ansible localhost -m gpuops.cluster.gpu_health -a nvidia_smi_xml=...) on a user's capture.
  - With O(settle_timeout), after a reboot, first waits (bounded) for Fabric Manager, the NVLink fabric, the NVLinks
    and the expected InfiniBand ports to come up, then judges; what did not come up in time fails the C(settle)
    check by name.
  - Never changes the node. The only write is the optional O(prometheus_textfile).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  level:
    description:
      - V(quick) reads state only (seconds). V(standard) adds C(dcgmi diag -r 1), NVLink error counters and
        C(dkms status).
        V(extended) runs C(dcgmi diag -r 2) (minutes) and C(all_reduce_perf) when installed.
    type: str
    choices: [quick, standard, extended]
    default: quick
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). Defaults to the one on the node's C(PATH). Point it at a simulated binary in a lab.
    type: path
  nvidia_smi_xml:
    description:
      - Offline triage. A file holding C(nvidia-smi -q -x) output. When set, no command runs; every other input
        comes from the options below and checks without an input are skipped.
    type: path
  kernel_log:
    description:
      - A file holding a kernel log in C(dmesg -T), C(dmesg), C(journalctl -k) (short or C(-o short-iso)) or raw
        C(/dev/kmsg) format. Used instead of reading the live log, also in live mode.
    type: path
  kernel_log_source:
    description:
      - Where the live kernel log comes from when O(kernel_log) is not set. V(auto) tries C(journalctl) then C(dmesg).
    type: str
    choices: [auto, journalctl, dmesg, none]
    default: auto
  since:
    description:
      - Start of the window for Xid and SXid events. An ISO 8601 time (C(2024-03-12T09:00:00+00:00)) or a duration
        before now (C(2h), C(30m), C(1d)). Default is since the current boot.
    type: str
  nvlink_status:
    description:
      - Offline triage. A file holding C(nvidia-smi nvlink -s) output.
    type: path
  nvlink_errors:
    description:
      - Offline triage. A file holding C(nvidia-smi nvlink -e) output.
    type: path
  infiniband_root:
    description:
      - Root prefixed to C(/sys/class/infiniband). Live mode reads C(/) when unset; offline triage reads InfiniBand
        only when this is set (a captured sysfs tree).
    type: path
  fabricmanager_state:
    description:
      - Offline triage. What C(systemctl is-active nvidia-fabricmanager) printed on the node (C(active), C(inactive),
        C(failed)). Unset in offline mode means the Fabric Manager check is skipped.
    type: str
  dcgm_diag_json:
    description:
      - Offline triage. A file holding C(dcgmi diag -r N -j) output.
    type: path
  nccl_output:
    description:
      - Offline triage. A file holding nccl-tests C(all_reduce_perf) output.
    type: path
  all_reduce_perf_path:
    description:
      - Path of nccl-tests C(all_reduce_perf) for O(level=extended). Defaults to the one on C(PATH) or in
        C(/usr/local/bin) or C(/opt/nccl-tests/build).
    type: path
  expected_gpu_count:
    description:
      - How many GPUs the node must show. Fewer fails the node.
    type: int
  expected_gpu_model:
    description:
      - Text every GPU's product name must contain, case-insensitive (C(H100), C(A100-SXM4-80GB)).
    type: str
  expected_driver_version:
    description:
      - Driver version the node must run. C(550) matches C(550.54.15); C(550.54.15) matches only itself.
    type: str
  expected_ib_ports:
    description:
      - InfiniBand ports that must be C(ACTIVE) and C(LinkUp), as C(mlx5_0) (every port of the device) or C(mlx5_0:1).
        When empty, every InfiniBand port found is checked and a down port only warns.
    type: list
    elements: str
    default: []
  expected_ib_port_count:
    description:
      - How many InfiniBand ports the node must have up (C(ACTIVE), C(LinkUp), at O(expected_ib_rate) when set).
        Fewer fails the node, whichever ports are down; without it and without O(expected_ib_ports) a down port
        only warns (an HCA port nobody cabled).
    type: int
  expected_ib_rate:
    description:
      - Minimum rate of each checked InfiniBand port in Gb/s (C(400) for NDR, C(200) for HDR).
    type: int
  gpudirect_rdma:
    description:
      - The GPUDirect RDMA path a node with RDMA HCAs must have. V(auto) takes DMA-BUF where NVIDIA's prerequisites
        hold (the open kernel modules loaded, Linux 5.12 or later), else C(nvidia-peermem) where the running
        kernel has the MLNX_OFED/DOCA-OFED peer-memory symbols (C(ib_register_peer_memory_client) in
        C(/proc/kallsyms)), and fails where neither serves. V(peermem) and V(dmabuf) require that path; V(none)
        checks nothing. A node without HCAs needs none whatever the setting.
      - The playbooks, the rolling upgrade's gate and C(gpuops-gpu-health) take it from C(gpuops_gpudirect_rdma),
        the setting the nvidia_stack role loads C(nvidia-peermem) by.
    type: str
    choices: [auto, peermem, dmabuf, none]
    default: auto
  expected_nvlinks:
    description:
      - NVLink links every GPU must have active. Default is the GPU model's count (6 V100 SXM2, 12 A100 SXM4,
        8 A800 and H800, 18 H100/H200/B200/GB200 SXM); PCIe and NVL cards need none; a model not in that table
        needs some when the node has NVSwitches or the GPU reports an NVLink fabric. V(0) requires none.
      - A node of one GPU (GPU 0) with no NVSwitch and no NVLink fabric reported needs none whatever its model
        (an SXM GPU passed through alone to a VM, where C(nvidia-smi nvlink -s) prints nothing); the check
        passes, saying so. A node of several GPUs keeps the model's count.
      - A GPU of which C(nvidia-smi nvlink -s) says all links are inactive fails whenever links are expected.
        A failure decided by the model's count names C(gpuops_health_expected_nvlinks), the setting of a
        platform with fewer links or none.
      - The playbooks, the rolling upgrade's gate and C(gpuops-gpu-health) take it from
        C(gpuops_health_expected_nvlinks), as every C(expected_*) option, O(pcie_baseline) and O(thresholds)
        from its C(gpuops_health_*) setting (lookup gpuops.cluster.health_options).
    type: int
  expected_pcie_width:
    description:
      - The PCIe link width (lanes) this platform gives each GPU, for platforms that run GPUs below the
        width the GPU is capable of by design (some cloud VMs, boards wired x8). A narrower link fails;
        the GPU's own maximum is then not required. Unset, the GPU's maximum is required, and a narrower
        link's failure names C(gpuops_health_expected_pcie_width), this option's setting.
      - A per-GPU O(pcie_baseline) wins over it.
    type: int
  expected_pcie_gen:
    description:
      - The PCIe generation this platform gives each GPU (see O(expected_pcie_width)). A lower generation
        under load warns; an idle GPU trains down and is not judged. Unset, the GPU's maximum is the reference,
        and the warning names C(gpuops_health_expected_pcie_gen), this option's setting.
    type: int
  pcie_baseline:
    description:
      - This node's own PCIe baseline, what each GPU trained at when the node was good, keyed by PCI bus id
        (any spelling, V(00000000:18:00.0) or V(0000:18:00)), each a dict of C(width) and C(gen) (lanes and
        generation); C(gen) may be null. The module returns it as C(facts.pcie) for the node to keep. A GPU
        present in it is judged against it, before O(expected_pcie_width) and the GPU's maximum.
    type: dict
    default: {}
  command_timeout:
    description:
      - Seconds each reading command (C(nvidia-smi), C(journalctl), C(dmesg), C(systemctl)) may run. Every command
        runs under coreutils C(timeout) (SIGTERM, SIGKILL 5 s later); a read that times out fails its checks.
    type: int
    default: 60
  settle_timeout:
    description:
      - Seconds to wait, before judging, for what comes up after a reboot - Fabric Manager C(active) (NVSwitch
        nodes), the fabric state C(Completed) in C(nvidia-smi -q -x) (Hopper and later), the NVLinks the GPU model
        needs active in C(nvidia-smi nvlink -s), and the ports of O(expected_ib_ports) and O(expected_ib_port_count)
        C(ACTIVE) and C(LinkUp). Polls every 5 s, one C(nvidia-smi) per poll, each command under
        O(command_timeout); stops as soon as everything is up. What is still not up when the bound runs out fails
        the C(settle) check, named (C(Fabric Manager not active after 300 s (inactive))). A failed Fabric Manager
        or an C(nvidia-smi) that gives no GPU ends the wait at once (waiting does not cure them). A check in
        O(skip_checks) is not waited for.
      - V(0) judges at once. The rolling upgrade's gate sets it from C(gpuops_health_settle_timeout) (default V(300)).
        Ignored in offline triage.
    type: int
    default: 0
  diag_timeout:
    description:
      - Seconds C(dcgmi diag) and C(all_reduce_perf) may run. Default 300 for C(dcgmi diag -r 1), 1800 for C(-r 2),
        900 for C(all_reduce_perf). A run that times out fails its check (the DCGM host engine did not answer).
    type: int
  thresholds:
    description:
      - Limits of the checks. Unset keys keep their defaults.
    type: dict
    default: {}
    suboptions:
      temperature_warn:
        description: GPU temperature (C) at or above which the temperature check warns.
        type: int
        default: 85
      temperature_fail:
        description:
          - GPU temperature (C) at or above which it fails. Default is the GPU's own slowdown threshold, else 90.
        type: int
      ecc_volatile_uncorrectable:
        description: Uncorrectable ECC errors since the driver loaded above which the node fails.
        type: int
        default: 0
      ecc_aggregate_uncorrectable:
        description: Lifetime uncorrectable ECC errors above which the check warns.
        type: int
        default: 0
      ecc_volatile_correctable:
        description: Correctable ECC errors since the driver loaded above which the check warns.
        type: int
        default: 10000
      row_remap_uncorrectable:
        description: Rows remapped for uncorrectable errors at or above which the check warns.
        type: int
        default: 8
      retired_pages:
        description: Retired pages (Volta) at or above which the GPU fails and needs replacing.
        type: int
        default: 62
      nvlink_errors:
        description: NVLink replay, recovery or CRC count above which the check warns.
        type: int
        default: 0
      ib_counter_errors:
        description: InfiniBand port error counter value above which the check warns.
        type: int
        default: 0
      nccl_busbw_gbps:
        description:
          - Minimum all_reduce bus bandwidth in GB/s. Default by model, at 16 GB messages on one node
            (460 H100, 431 H200, 228 A100); other models pass with the figure reported.
        type: float
  node_state:
    description:
      - Directory of the state the node-side command C(gpuops-gpu-health) keeps (V(/var/lib/gpuops-health), role
        gpuops.cluster.gpu_healthcheck). When the state is there, the verdict also judges error rates, fatal Xid
        repeats and the node's own baselines against it (checks C(ecc_rate), C(row_remap_rate), C(infiniband_rate),
        C(xid_repeat), C(nccl_baseline), C(dcgm_baseline)) and marks a failure the command had already found as
        pre-existing (C(pre_existing) in the check), so an upgrade gate tells a regression from a condition that was
        there before. Read only, nothing is stored. Without a stored state a warning says so and nothing more is judged.
    type: path
  rate_thresholds:
    description:
      - Thresholds of the rate and repeat checks with O(node_state) - C(ecc_correctable_per_hour) (10),
        C(ecc_uncorrectable_per_day) (0), C(row_remap_per_day) (0), C(ib_errors_per_hour) (10),
        C(ib_link_downed_per_hour) (0), C(xid_repeat_hours) (24), C(xid_repeat_count) (2), C(xid_episode_minutes)
        (10). More than the threshold within the window fails (warns for rows and link-downs).
    type: dict
    default: {}
  baseline_max_regression:
    description:
      - With O(node_state), the fraction below the node's last good NCCL bus bandwidth or DCGM figure (or below
        O(fleet_nccl_busbw_gbps)) that fails.
    type: float
    default: 0.1
  fleet_nccl_busbw_gbps:
    description:
      - With O(node_state), the fleet's median all_reduce bus bandwidth in GB/s to compare this node with.
    type: float
  skip_checks:
    description:
      - Checks not to judge; each is reported once as skipped. Skipping both NVLink checks also skips the
        C(nvidia-smi nvlink) calls, and skipping C(dcgm_diag) or C(nccl_busbw) skips running them.
    type: list
    elements: str
    default: []
    choices: [nvidia_smi, gpu_count, gpu_model, driver_version, persistence_mode, mig_mode, ecc_mode, ecc_errors,
              row_remap, retired_pages, pcie_link, temperature, clock_events, recovery, fabric, fabricmanager, xid,
              fallen_off_bus, sxid, nvlink, nvlink_errors, infiniband, dcgm_diag, nccl_busbw, kernel_module, cdi_spec,
              dcgm_exporter, gpudirect_rdma, mig_layout,
              ecc_rate, row_remap_rate, infiniband_rate, xid_repeat, nccl_baseline, dcgm_baseline,
              settle]
  mig_profile_set:
    description:
      - The GPU model's MIG profiles as C(gpuops.cluster.gpu_mig) takes them (C(gpuops.cluster.mig_profile_set)).
        C(nvidia-smi -q -x) names no profile; with the set, RV(facts) and the C(mig_mode) check name each GPU
        instance's profile from its memory and engines, without it its id and memory.
    type: dict
  mig_declared:
    description:
      - The MIG layout declared for the node, as C(gpuops.cluster.mig_declared) gives it from C(gpuops_mig), with
        C(config) (its name) and C(entries) (its mig-parted v1 entries). Each GPU's entry is found by its index and
        PCI device id, as C(gpuops.cluster.gpu_mig) finds it; the C(mig_layout) check fails a GPU whose MIG mode
        (current or pending) or GPU instance profiles differ from it, naming the GPU and the difference. Give
        O(mig_profile_set) too, else the instances cannot be named and the check warns. Unset, C(mig_layout) is
        skipped.
    type: dict
  fail_on_unhealthy:
    description:
      - Fail the task when any check fails. The result still carries every check.
    type: bool
    default: false
  prometheus_textfile:
    description:
      - Write the verdict to this file for node_exporter's textfile collector (one gauge per check and GPU, labelled
        C(check), C(gpu), C(pci_bus_id)), through a temporary file in the same directory and a rename, mode C(0644).
        The directory must exist.
    type: path
  gate_needs:
    description:
      - Also say, for each level listed, which tools a check at that level would run that the node lacks
        (C(dcgmi) from V(standard), nccl-tests C(all_reduce_perf) at V(extended); none for a check in
        O(skip_checks)), in RV(gate_needs). Looks the tools up only; runs nothing more. The rolling upgrade's survey
        uses it to name, before anything moves, the nodes whose gate would fail for a missing tool.
    type: list
    elements: str
    choices: [quick, standard, extended]
    default: []
  gate_tools_provided:
    description:
      - Tools that the run itself installs before its gate (C(dcgmi) where the target stack carries DCGM), which
        RV(gate_needs) never reports as lacking.
    type: list
    elements: str
    choices: [dcgmi, all_reduce_perf]
    default: []
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.attributes.platform
attributes:
  check_mode:
    support: full
    details: Every check runs; the textfile is not written.
  diff_mode:
    support: full
    details: The diff is the Prometheus textfile before and after.
notes:
  - Run live as root (or with read access to the kernel log) so the Xid checks see the log.
  - O(prometheus_textfile) reports C(changed) only when a gauge changes; the run-time gauge alone does not count.
seealso:
  - name: NVIDIA Xid catalog
    description: The source of the Xid severities and actions.
    link: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
"""

EXAMPLES = r"""
- name: Quick health gate before a job
  gpuops.cluster.gpu_health:
    expected_gpu_count: 8
    expected_gpu_model: H100
    expected_ib_ports: [mlx5_0, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_9, mlx5_10, mlx5_11]
    expected_ib_rate: 400
    fail_on_unhealthy: true
  register: gpu_health_result

- name: Standard check with DCGM, Xid events of the last two hours, into Prometheus
  gpuops.cluster.gpu_health:
    level: standard
    since: 2h
    prometheus_textfile: /var/lib/node_exporter/textfile_collector/gpuops_gpu_health.prom

- name: Triage a user's capture on the controller (no command runs)
  gpuops.cluster.gpu_health:
    nvidia_smi_xml: /tmp/case-1234/nvidia-smi-q-x.xml
    kernel_log: /tmp/case-1234/dmesg-T.txt
    nvlink_status: /tmp/case-1234/nvlink-s.txt
    expected_gpu_count: 8
  delegate_to: localhost
"""

RETURN = r"""
started_at:
  description:
    - When the check began, epoch seconds on the node's clock (before any settle wait); the rolling upgrade's record
      times its gate by it and RV(ended_at).
  returned: success
  type: float
  sample: 1796280060.2
ended_at:
  description: When the verdict was reached, epoch seconds on the node's clock.
  returned: success
  type: float
  sample: 1796280071.8
healthy:
  description: True when no check failed.
  returned: always
  type: bool
  sample: false
checks:
  description: Every check, one per GPU for per-GPU checks.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Check name (see O(skip_checks)).
      type: str
      sample: row_remap
    status:
      description: Outcome.
      type: str
      sample: fail
      choices: [pass, warn, fail, skip]
    detail:
      description: What was found, or why the check was skipped.
      type: str
      sample: "row remapping pending: reset the GPU to apply it"
    gpu_index:
      description: nvidia-smi index of the GPU, null for node-level checks.
      type: int
      sample: 3
    pci_bus_id:
      description: PCI bus id of the GPU (or NVSwitch, or the bus named in the kernel log), null when none applies.
      type: str
      sample: "00000000:4E:00.0"
    action:
      description: Recommended action for this finding.
      type: str
      sample: reset_gpu
      choices: [none, restart_application, reset_gpu, reboot_node, hardware_inspection]
    pre_existing:
      description: With O(node_state), when a failure was first found by the node-side command (UTC).
      type: str
      returned: when the failure was already found before
      sample: "2026-01-01 00:00 UTC"
actions:
  description: The strongest recommended action for the node and for each GPU.
  returned: always
  type: dict
  sample:
    node: reset_gpu
    gpus:
      - {gpu_index: 3, pci_bus_id: "00000000:4E:00.0", action: reset_gpu}
facts:
  description: What was read. C(gpus[].mig) is the GPU's MIG mode (C(current), C(pending), null without MIG) and
    its GPU instances (C(id), C(profile), C(compute_instances), C(memory_mib), C(multiprocessors)).
  returned: always
  type: dict
  sample:
    driver_version: 550.54.15
    cuda_version: "12.4"
    gpu_count: 8
    gpu_models: [NVIDIA H100 80GB HBM3]
    gpus:
      - {index: 0, pci_bus_id: "00000000:18:00.0", product_name: NVIDIA H100 80GB HBM3, serial: "1652923023310",
         mig: {current: true, pending: true, gpu_instances: [{id: 2, profile: 3g.40gb, compute_instances: [0]}]}}
    parse_warnings: []
    kernel_log_formats: [journal_iso]
    kernel_events: 0
    pcie:
      "00000000:18:00.0": {width: 16, gen: 5}
summary:
  description: Count of checks per status and one line per failed check.
  returned: always
  type: dict
  sample:
    counts: {pass: 97, warn: 0, fail: 1, skip: 12}
    failed: ["row_remap[gpu3]: row remapping pending: reset the GPU to apply it"]
commands:
  description: Every command run, in order, with its C(timeout) wrapper (empty in offline triage).
  returned: always
  type: list
  elements: str
  sample:
    - /usr/bin/timeout -k 5 60 /usr/bin/nvidia-smi -q -x
    - /usr/bin/timeout -k 5 60 /usr/bin/journalctl -k -b 0 -o short-iso --no-pager
    - /usr/bin/timeout -k 5 60 /usr/bin/nvidia-smi nvlink -s
settle:
  description: What the wait of O(settle_timeout) did - the bound, seconds waited, polls, whether everything came up,
    why it stopped early, and per condition (C(fabricmanager), C(fabric), C(nvlink), C(infiniband)) its state
    (C(up), C(pending), C(unknown), C(none)), what was not up and after how many seconds it was.
  returned: when O(settle_timeout) is above 0 in live mode
  type: dict
  sample:
    timeout: 300
    waited_s: 21.4
    polls: 5
    settled: true
    stopped: null
    conditions:
      fabricmanager: {state: up, detail: null, up_after_s: 0.4}
      fabric: {state: up, detail: null, up_after_s: 20.6}
      nvlink: {state: up, detail: null, up_after_s: 21.0}
      infiniband: {state: none, detail: null, up_after_s: null}
mode:
  description: V(live) or V(offline).
  returned: always
  type: str
  sample: live
gate_needs:
  description: For each level in O(gate_needs), the tools the node lacks for a check at that level, each with its fix.
  returned: when O(gate_needs) is set, live
  type: dict
  sample:
    standard: []
    extended:
      - "all_reduce_perf not installed, a gate at level=extended runs it: build nccl-tests into /opt/nccl-tests/build
        (or set gpuops_health_all_reduce_perf_path), or skip nccl_busbw"
level:
  description: The level run.
  returned: always
  type: str
  sample: quick
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    gate_needs,
    health_checks,
    kernel_log,
    metrics_file,
    node_history,
    prometheus_textfile,
    settle_wait,
    thresholds,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_reader import NodeReader
from ansible_collections.gpuops.cluster.plugins.module_utils.health.settle_poll import wait_to_settle
from ansible_collections.gpuops.cluster.plugins.module_utils.health.stored_history import judge_history


def argument_spec():
    return dict(
        level=dict(type="str", default="quick", choices=["quick", "standard", "extended"]),
        nvidia_smi_path=dict(type="path"),
        nvidia_smi_xml=dict(type="path"),
        kernel_log=dict(type="path"),
        kernel_log_source=dict(type="str", default="auto", choices=["auto", "journalctl", "dmesg", "none"]),
        since=dict(type="str"),
        nvlink_status=dict(type="path"),
        nvlink_errors=dict(type="path"),
        infiniband_root=dict(type="path"),
        fabricmanager_state=dict(type="str"),
        dcgm_diag_json=dict(type="path"),
        nccl_output=dict(type="path"),
        all_reduce_perf_path=dict(type="path"),
        expected_gpu_count=dict(type="int"),
        expected_gpu_model=dict(type="str"),
        expected_driver_version=dict(type="str"),
        expected_ib_ports=dict(type="list", elements="str", default=[]),
        expected_ib_port_count=dict(type="int"),
        expected_ib_rate=dict(type="int"),
        expected_nvlinks=dict(type="int"),
        gpudirect_rdma=dict(type="str", default="auto", choices=["auto", "peermem", "dmabuf", "none"]),
        expected_pcie_width=dict(type="int"),
        expected_pcie_gen=dict(type="int"),
        pcie_baseline=dict(type="dict", default={}),
        thresholds=dict(type="dict", default={}, options=thresholds.argument_spec()),
        command_timeout=dict(type="int", default=60),
        settle_timeout=dict(type="int", default=0),
        diag_timeout=dict(type="int"),
        node_state=dict(type="path"),
        rate_thresholds=dict(type="dict", default={}),
        baseline_max_regression=dict(type="float", default=0.1),
        fleet_nccl_busbw_gbps=dict(type="float"),
        skip_checks=dict(
            type="list",
            elements="str",
            default=[],
            choices=list(health_checks.CHECKS) + list(node_history.CHECKS) + list(settle_wait.CHECKS),
        ),
        mig_profile_set=dict(type="dict"),
        mig_declared=dict(type="dict"),
        fail_on_unhealthy=dict(type="bool", default=False),
        prometheus_textfile=dict(type="path"),
        gate_needs=dict(type="list", elements="str", default=[], choices=list(gate_needs.LEVELS)),
        gate_tools_provided=dict(type="list", elements="str", default=[], choices=list(gate_needs.TOOLS)),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    started_at = time.time()
    use_c_locale(module)
    params = module.params
    offline = bool(params["nvidia_smi_xml"])
    try:
        since = kernel_log.parse_since(params["since"])
    except ValueError as error:
        module.fail_json(msg="since: %s" % error)

    if params["settle_timeout"] < 0:
        module.fail_json(msg="settle_timeout: %d is below 0; give the seconds to wait, or 0 to judge at once"
                         % params["settle_timeout"])  # fmt: skip

    reader = NodeReader(module)
    settle = None
    if params["settle_timeout"] and not offline and "settle" not in params["skip_checks"]:
        settle = wait_to_settle(module, reader)
    inputs = reader.read_all(offline, since)
    for note in reader.notes:
        module.warn(note)
    keys = (
        "expected_gpu_count", "expected_gpu_model", "expected_driver_version", "expected_ib_ports",
        "expected_ib_port_count", "expected_ib_rate", "expected_nvlinks", "expected_pcie_width", "expected_pcie_gen",
        "pcie_baseline", "skip_checks", "gpudirect_rdma", "mig_profile_set", "mig_declared",
    )  # fmt: skip
    options = dict({key: params[key] for key in keys}, thresholds=params["thresholds"] or {})
    try:
        verdict = health_checks.evaluate(inputs, options)
        if params["node_state"]:
            verdict = judge_history(module, inputs, verdict, offline)
        if settle:
            verdict = settle_wait.with_settle(verdict, settle[0], (inputs.get("smi") or {}).get("gpus") or [])
    except ValueError as error:
        module.fail_json(msg=str(error))
    result = dict(
        changed=False,
        healthy=verdict["healthy"],
        checks=verdict["checks"],
        actions=verdict["actions"],
        facts=verdict["facts"],
        summary=verdict["summary"],
        commands=reader.commands,
        mode="offline" if offline else "live",
        level=params["level"],
        started_at=started_at,
    )
    if settle:
        result["settle"] = settle[1]
    if params["gate_needs"] and not offline:
        result["gate_needs"] = gate_needs.lacking(
            params["gate_needs"], params["skip_checks"], reader.gate_tools(), params["gate_tools_provided"]
        )
    if params["prometheus_textfile"]:
        content = prometheus_textfile.render_prometheus(verdict, time.time())
        changed, before = metrics_file.write_textfile(module, params["prometheus_textfile"], content)
        result["changed"] = changed
        if module._diff:
            result["diff"] = {
                "before": before or "",
                "after": content,
                "before_header": params["prometheus_textfile"],
                "after_header": params["prometheus_textfile"],
            }
    result["ended_at"] = time.time()
    if params["fail_on_unhealthy"] and not verdict["healthy"]:
        failed = verdict["summary"]["failed"]
        module.fail_json(
            msg="GPU health: %d check(s) failed, recommended action %s: %s"
            % (len(failed), verdict["actions"]["node"], "; ".join(failed[:5])),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
