#!/usr/bin/python
# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_stack_facts
short_description: Report the NVIDIA stack a node runs and how it drifts from the requested one
version_added: 0.1.0
description:
  - Sets the C(gpu_stack) fact with the installed version, pin, hold and unattended-upgrades state of every
    requested package, the loaded kernel module version, the NVML driver version and GPU models from nvidia-smi,
    NVSwitch presence, drift flags and whether a reboot is needed.
  - Runs at most five commands; one package query for all names (C(dpkg-query) or C(rpm -q)), one index query
    with O(index), one C(nvidia-smi --query-gpu), one C(lspci -n -d 10de:) (none when O(nvswitch) is set) and one
    C(systemctl show) for O(services) and O(wanted_services).
  - Never changes the node.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  requested:
    description:
      - The requested stack, as the stack resolver returns it. Drift is computed against it.
      - Packages with O(requested[].component=driver) give the installed driver version that the loaded kernel
        module is compared with.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Package name.
        type: str
        required: true
      version:
        description: Exact requested version (Debian, or RPM C([epoch:]version-release)).
        type: str
        required: true
      component:
        description: Stack component (C(driver), C(fabricmanager), C(nccl), ...).
        type: str
        default: ''
      spec:
        description:
          - The install spec (C(name=version)); accepted so a resolved list can be passed as is, and not used.
        type: str
      follows_driver:
        description: The package's version is the driver release (see O(index)).
        type: bool
        default: false
  container_toolkit_auto:
    description:
      - The resolved stack's C(container_toolkit.mode) is C(auto) (gpuops_stack.container_toolkit), so the NVIDIA
        Container Toolkit's packages and pins (O(requested[].component=container_toolkit)) stay out of this read on a
        node where no container runtime (containerd, dockerd, crio, enroot in C(/usr/bin), C(/usr/sbin) or
        C(/usr/local/bin)) is present. C(gpu_stack.container_runtimes) lists those found either way.
    type: bool
    default: false
  container_runtime:
    description:
      - Where O(requested) has the NVIDIA Container Toolkit, whether the runtimes present and the CDI specification
        need C(gpuops.cluster.nvidia_container_runtime) this pass, read from files only (no command), in
        C(gpu_stack.container_runtime.reasons) (empty when nothing is to do).
    type: dict
    suboptions:
      runtimes:
        description: The runtimes the role configures.
        type: list
        elements: str
        default: [containerd, docker, crio, enroot]
      cdi:
        description: CDI is enabled in containerd and Docker.
        type: bool
        default: true
      set_as_default:
        description: The nvidia runtime is the default one.
        type: bool
        default: false
  packages:
    description: More package names to report, without a requested version (no drift for them).
    type: list
    elements: str
    default: []
  loaded_version_path:
    description:
      - File that shows the loaded kernel module version. A missing file means no NVIDIA module is loaded.
      - The lab points this at a per-node file, since containers cannot load kernel modules.
    type: path
    default: /proc/driver/nvidia/version
  kernel_modules:
    description:
      - The kernel module flavour the stack wants. When the loaded module is of the other flavour,
        C(drift.reboot_reasons) lists C(loaded_flavor_differs). Unset, the flavour is not compared.
    type: str
    choices: [open, proprietary]
  nvidia_smi:
    description: Query nvidia-smi for the NVML driver version and the GPU models.
    type: bool
    default: true
  nvswitch:
    description:
      - Set to say whether the node has NVSwitches (inventory override); no C(lspci) call is made then.
      - Unset, NVSwitches are detected from C(lspci) with O(nvswitch_pci_ids).
    type: bool
  services:
    description:
      - systemd services to report as C(services.<name>.active) and C(services.<name>.enabled), read with one
        C(systemctl show) call (none when the list is empty or the node has no systemctl).
    type: list
    elements: str
    default: []
  wanted_services:
    description:
      - The systemd services the stack runs (the nvidia_stack role passes C(nvidia-persistenced),
        C(nvidia-fabricmanager) and C(nvidia-dcgm) per its switches). Read with O(services), in the same call.
      - C(plan.start) lists those to (re)start - every one when packages move, otherwise those not already active
        and enabled.
    type: list
    elements: str
    default: []
  kernel_headers:
    description:
      - Whether the pass installs the running kernel's headers, returned as C(plan.kernel_headers). V(auto) wants them
        when a O(requested) package is built by DKMS (its name says C(dkms)).
    type: raw
    default: auto
  before:
    description:
      - This read is the pass's read before any change (the nvidia_stack role's first read of a pass). The facts are
        also returned as C(gpu_stack_before), which later reads (without O(before)) leave as they are, so the whole
        pass acts on the plan and the exact versions of its first read.
    type: bool
    default: false
  index:
    description:
      - Resolve the exact version of every O(requested) package from the node's package index, in this same
        execution, with one C(apt-cache madison) call (apt) or one C(dnf repoquery --showduplicates) call (dnf) for all
        names, with a timeout.
      - O(requested[].version) is then an upstream version (C(580.126.09) matches C(580.126.09-1ubuntu1),
        C(580.126.09-0ubuntu1) and C(3:580.126.09-1.el9)) or a pattern with C(*); the packages with
        O(requested[].follows_driver) take the driver release chosen by O(index.driver).
      - The result is C(gpu_stack.index); drift is computed against its exact versions. Unset, O(requested) holds
        exact versions and no index is read.
    type: dict
    suboptions:
      driver:
        description:
          - The resolved stack's C(driver_request) (C(branch), C(exact), C(floor), C(skip), C(upgrade)).
          - A branch request takes the release the node runs when it is of that branch (and allowed), otherwise the
            newest release of the branch for which every package following the driver exists; C(upgrade=true)
            always takes the newest; C(exact) takes that release or reports what the index lacks.
        type: dict
        required: true
      pins:
        description: The resolved stack's pins; returned with the exact versions the index holds.
        type: list
        elements: dict
        default: []
      timeout:
        description: Seconds the index query may take.
        type: int
        default: 120
      os_id:
        description:
          - The resolved stack's C(os_id) (C(debian12), C(rhel9)). Set, the module also says which OS repositories
            NVIDIA's packages depend on the node lacks, in C(gpu_stack.index.os_repositories) - Debian's C(contrib)
            component (read with one C(apt-cache policy) call), EPEL and CRB on the RHEL family (read from the
            C(.repo) files of O(index.repos_dir)). Ubuntu needs none.
        type: str
      repos_dir:
        description: Where dnf's C(.repo) files are (dnf nodes, with O(index.os_id)).
        type: path
        default: /etc/yum.repos.d
      apt_dir:
        description:
          - Where apt's C(sources.list) and C(sources.list.d) are (Debian nodes, with O(index.os_id)). Their
            C(Signed-By) for the Debian archive is the one C(contrib) is added with, so apt sees no conflicting
            values.
        type: path
        default: /etc/apt
  command_timeout:
    description:
      - Seconds each command other than the index query may take (C(dpkg-query) or C(rpm -q), C(nvidia-smi),
        C(lspci), C(systemctl)); every command runs under coreutils C(timeout).
      - A command that does not answer in time fails the module, naming it (a hung GPU fails the read, it is never
        reported as a node without GPUs).
    type: int
    default: 60
  nvswitch_pci_ids:
    description:
      - NVIDIA (vendor C(10de)) PCI device ids that are NVSwitch functions.
      - C(1af1) is the A100-generation NVSwitch, C(22a3) the H100-generation one (pciutils C(pci.ids)).
    type: list
    elements: str
    default: ['1af1', '22a3']
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.attributes.platform
  - gpuops.cluster.attributes.facts
  - gpuops.cluster.stack_files
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode returns the same facts.
  diff_mode:
    support: none
seealso:
  - module: gpuops.cluster.package_pin
"""

EXAMPLES = r"""
- name: Read the stack against the resolved request
  gpuops.cluster.gpu_stack_facts:
    requested: "{{ nvidia_stack_resolved.packages }}"
    nvswitch: "{{ gpuops_nvswitch | default(omit) }}"

- name: Reboot only when the loaded module differs from the installed driver
  ansible.builtin.reboot:
  when: ansible_facts.gpu_stack.reboot_required
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpu_stack:
      description: The node's NVIDIA stack.
      returned: always
      type: dict
      contains:
        package_manager:
          description: V(apt) or V(dnf).
          type: str
          returned: always
          sample: apt
        packages:
          description:
            - Per package name, C(installed) version (null when not installed), C(pinned) version (null when
              unpinned), C(held) (apt hold; on dnf the versionlock is the hold), C(blacklisted) for
              unattended-upgrades (null on dnf), C(requested) version and C(component).
          type: dict
          returned: always
          sample:
            nvidia-driver-550:
              installed: 550.127.08-1
              pinned: 550.127.08-1
              held: true
              blacklisted: true
              requested: 550.127.08-1
              component: driver
        loaded:
          description: The loaded kernel module (C(version), C(flavor) C(open) or C(proprietary), C(arch)), or null.
          type: dict
          returned: always
          sample: {"version": "550.127.08", "flavor": "open", "arch": "x86_64"}
        loaded_reason:
          description: Why C(loaded) is null.
          type: str
          returned: when loaded is null
          sample: /proc/driver/nvidia/version does not exist (no NVIDIA kernel module loaded)
        nvml:
          description: NVML driver version and GPUs from nvidia-smi, or null.
          type: dict
          returned: always
          sample:
            driver_version: 550.127.08
            gpus: [{"name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0"}]
        nvml_reason:
          description: Why C(nvml) is null (nvidia-smi missing, disabled or failing, with its first output line).
          type: str
          returned: when nvml is null
          sample: "Failed to initialize NVML: Driver/library version mismatch"
        gpu_models:
          description: Sorted distinct GPU names from nvidia-smi.
          type: list
          elements: str
          returned: always
          sample: ["NVIDIA H100 80GB HBM3"]
        nvswitch:
          description: C(present) (null when unknown), C(source) (C(override), C(lspci) or C(unavailable)), C(devices).
          type: dict
          returned: always
          sample: {"present": true, "source": "lspci", "devices": [{"slot": "c7:00.0", "device_id": "22a3"}]}
        drift:
          description:
            - C(installed_differs) (list of name, requested, installed), C(pin_missing), C(hold_missing),
              C(installed_driver_version), C(loaded_driver_version), C(loaded_differs), C(driver_packages_disagree),
              C(drifted), C(reboot_required), C(reboot_reasons) (C(driver_not_loaded), C(loaded_differs_from_installed),
              C(loaded_flavor_differs)).
          type: dict
          returned: always
        services:
          description:
            - Per service of O(services) and O(wanted_services), whether it is C(active) and C(enabled); empty
              without systemctl.
          type: dict
          returned: always
          sample: {"nvidia-fabricmanager": {"active": true, "enabled": true}}
        container_runtime:
          description: With O(container_runtime), C(reasons) the runtimes or the CDI specification need configuring.
          type: dict
          returned: when O(container_runtime) is set and the requested stack has the NVIDIA Container Toolkit
          sample: {"reasons": ["docker: no runtimes.nvidia"]}
        container_runtimes:
          description: The container runtimes present on the node (C(containerd), C(crio), C(docker), C(enroot)).
          type: list
          elements: str
          returned: always
          sample: [containerd]
        index:
          description:
            - With O(index) only. C(packages) and C(pins) with the exact versions the index holds (each package
              with its install C(spec)), C(driver_version) chosen, C(kept_installed) (the node runs a release of the
              requested branch and keeps it), C(newer_available) (a newer allowed release the index holds),
              C(repositories) the versions came from, and C(problems), one line a package with what was looked for
              and what the repository holds (empty when everything was found).
            - With O(index.os_id), C(os_repositories.missing) lists the OS repositories the node lacks, each
              C({id, kind, message, ...}) (plugins/module_utils/stack/os_repositories.py); empty when it lacks none.
          type: dict
          returned: when O(index) is set
          sample:
            driver_version: 580.126.09
            kept_installed: false
            newer_available: null
            problems: []
            repositories: ["https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"]
        reboot_required:
          description:
            - True when the loaded kernel module differs from the installed driver, or a requested driver is
              installed but no module is loaded.
          type: bool
          returned: always
          sample: false
        plan:
          description:
            - What a pass of the nvidia_stack role does on the node, decided from this read
              (plugins/module_utils/stack/stack_plan.py).
          type: dict
          returned: always
          contains:
            move:
              description: The requested packages whose installed version differs, to be moved.
              type: list
              elements: str
              returned: always
              sample: ["nvidia-driver-580"]
            reboot_reasons:
              description: Why the loaded kernel module is not the installed driver (as C(drift.reboot_reasons)).
              type: list
              elements: str
              returned: always
              sample: ["loaded_differs_from_installed"]
            start:
              description:
                - The O(wanted_services) to (re)start - every one when C(move) is not empty, otherwise those not
                  both active and enabled.
              type: list
              elements: str
              returned: always
              sample: ["nvidia-dcgm"]
            load:
              description: Whether anything is to be done after the packages and pins (C(move), C(reboot_reasons) or
                C(start) not empty).
              type: bool
              returned: always
              sample: false
            dkms:
              description: Whether a package of the stack is built by DKMS (its name says C(dkms)).
              type: bool
              returned: always
              sample: false
            kernel_headers:
              description: Whether the pass installs the running kernel's headers (O(kernel_headers)).
              type: bool
              returned: always
              sample: false
    gpu_stack_before:
      description: With O(before) only. The same facts as C(gpu_stack), kept for the pass by later reads.
      returned: when O(before) is true
      type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import (
    READ_LIMIT,
    first_line,
    run_bounded,
    use_c_locale,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    apt_pinning,
    container_runtime_state,
    container_toolkit,
    index_read,
    installed_packages,
    package_index,
    rpm_versionlock,
    stack_facts,
    stack_plan,
)


def loaded_module(path):
    text = read_value(path)
    if text is None:
        reason = f"cannot read {path}" if os.path.exists(path) else f"{path} does not exist"
        return None, f"{reason} (no NVIDIA kernel module loaded)"
    try:
        parsed = stack_facts.parse_proc_driver_version(text)
    except stack_facts.StackFactsError as exc:
        return None, f"cannot parse {path}: {exc}"
    return {key: parsed[key] for key in ("version", "flavor", "arch")}, None


def nvml(module):
    if not module.params["nvidia_smi"]:
        return None, "nvidia_smi is false"
    smi = module.get_bin_path("nvidia-smi")
    if not smi:
        return None, "nvidia-smi not found (driver utilities not installed)"
    argv = [smi, f"--query-gpu={stack_facts.NVIDIA_SMI_QUERY}", "--format=csv,noheader"]
    rc, out, err = run_bounded(
        module,
        argv,
        "read the GPUs with nvidia-smi --query-gpu",
        module.params["command_timeout"],
        hint="a GPU or the driver may be hung: run nvidia-smi on the node, and drain or reboot it",
    )
    if rc != 0:
        return None, first_line(out, err) or f"nvidia-smi exited with {rc}"
    try:
        gpus = stack_facts.parse_nvidia_smi_query(out)
    except stack_facts.StackFactsError as exc:
        return None, str(exc)
    if not gpus:
        return None, "nvidia-smi listed no GPUs"
    versions = sorted({gpu["driver_version"] for gpu in gpus})
    return {
        "driver_version": versions[0] if len(versions) == 1 else None,
        "gpus": [{"name": gpu["name"], "pci_bus_id": gpu["pci_bus_id"]} for gpu in gpus],
    }, None


def nvswitch(module):
    override = module.params["nvswitch"]
    if override is not None:
        return {"present": override, "source": "override", "devices": []}
    lspci = module.get_bin_path("lspci")
    if not lspci:
        return {"present": None, "source": "unavailable", "devices": [], "reason": "lspci not found (pciutils)"}
    argv = [lspci, "-n", "-d", f"{stack_facts.NVIDIA_VENDOR_ID}:"]
    rc, out, err = run_bounded(module, argv, "list the NVSwitches with lspci", module.params["command_timeout"])
    if rc != 0:
        return {"present": None, "source": "unavailable", "devices": [], "reason": first_line(err, out)}
    ids = {
        device_id.lower(): stack_facts.NVSWITCH_PCI_IDS.get(device_id.lower(), "NVSwitch")
        for device_id in module.params["nvswitch_pci_ids"]
    }
    devices = stack_facts.parse_lspci_nvswitch(out, ids)
    return {"present": bool(devices), "source": "lspci", "devices": devices}


def services(module, names):
    """``{name: {active, enabled}}`` of the systemd services ``names``, from one systemctl call."""
    systemctl = module.get_bin_path("systemctl")
    if not names or not systemctl:
        return {}
    argv = [systemctl, "show", "--property=Id,ActiveState,UnitFileState", "--", *names]
    rc, out, err = run_bounded(module, argv, "read the services with systemctl show", module.params["command_timeout"])
    if rc != 0:
        module.fail_json(
            msg="systemctl show failed: %s" % first_line(err, out), rc=rc, stdout=out, stderr=err, cmd=argv
        )
    return stack_facts.parse_systemctl_show(out)


def main():
    module = AnsibleModule(
        argument_spec={
            "requested": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": stack_facts.PACKAGE_OPTIONS,
            },
            "container_toolkit_auto": {"type": "bool", "default": False},
            "container_runtime": {
                "type": "dict",
                "options": {
                    "runtimes": {
                        "type": "list",
                        "elements": "str",
                        "default": ["containerd", "docker", "crio", "enroot"],
                    },
                    "cdi": {"type": "bool", "default": True},
                    "set_as_default": {"type": "bool", "default": False},
                },
            },
            "packages": {"type": "list", "elements": "str", "default": []},
            "loaded_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "nvidia_smi": {"type": "bool", "default": True},
            "nvswitch": {"type": "bool"},
            "kernel_modules": {"type": "str", "choices": ["open", "proprietary"]},
            "nvswitch_pci_ids": {"type": "list", "elements": "str", "default": ["1af1", "22a3"]},
            "services": {"type": "list", "elements": "str", "default": []},
            "wanted_services": {"type": "list", "elements": "str", "default": []},
            "kernel_headers": {"type": "raw", "default": "auto"},
            "before": {"type": "bool", "default": False},
            "preferences_path": {"type": "path", "default": "/etc/apt/preferences.d/gpuops-nvidia.pref"},
            "unattended_upgrades_path": {
                "type": "path",
                "default": "/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist",
            },
            "versionlock_path": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
            "package_manager": {"type": "str", "default": "auto", "choices": ["auto", "apt", "dnf"]},
            "command_timeout": {"type": "int", "default": READ_LIMIT},
            "index": {
                "type": "dict",
                "options": {
                    "driver": {"type": "dict", "required": True},
                    "pins": {"type": "list", "elements": "dict", "default": []},
                    "timeout": {"type": "int", "default": 120},
                    "os_id": {"type": "str"},
                    "repos_dir": {"type": "path", "default": "/etc/yum.repos.d"},
                    "apt_dir": {"type": "path", "default": "/etc/apt"},
                },
            },
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    manager = params["package_manager"]
    if manager == "auto":
        if module.get_bin_path("dpkg-query"):
            manager = "apt"
        elif module.get_bin_path("rpm"):
            manager = "dnf"
        else:
            module.fail_json(msg="neither dpkg-query nor rpm found: this module supports the apt and dnf families")
    if params["command_timeout"] < 1 or (params["index"] is not None and params["index"]["timeout"] < 1):
        module.fail_json(msg="command_timeout and index.timeout must be at least 1 second")
    for device_id in params["nvswitch_pci_ids"]:
        if len(device_id) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in device_id):
            module.fail_json(msg=f"nvswitch_pci_ids: {device_id!r} is not a 4-digit hex PCI device id (like 22a3)")

    runtimes = container_toolkit.present_runtimes(os.path.exists)
    requested_list, index_pins = container_toolkit.for_node(
        params["requested"],
        params["index"]["pins"] if params["index"] is not None else [],
        container_toolkit.AUTO if params["container_toolkit_auto"] else None,
        runtimes,
    )
    requested = {item["name"]: item for item in requested_list}
    names = sorted(set(requested) | set(params["packages"]))
    query = installed_packages.query_apt if manager == "apt" else installed_packages.query_dnf
    installed, pins, holds, blacklisted = query(module, names, params)
    version_equal = rpm_versionlock.evr_matches if manager == "dnf" else None

    packages = {}
    for name in names:
        item = requested.get(name, {})
        pinned = apt_pinning.pin_for(name, pins)
        packages[name] = {
            "installed": installed.get(name),
            "pinned": pinned,
            "held": (name in holds) if holds is not None else pinned is not None,
            "blacklisted": blacklisted.get(name),
            "requested": item.get("version"),
            "component": item.get("component") or None,
        }

    wanted = list(requested.values())
    index = None
    if params["index"] is not None:
        available = (
            index_read.read_index(module, manager, sorted(requested), params["index"]["timeout"]) if requested else {}
        )
        index = package_index.resolve(wanted, index_pins, params["index"]["driver"], available, installed, manager)
        if params["index"]["os_id"]:
            index["os_repositories"] = index_read.read_os_repositories(
                module, manager, params["index"]["os_id"], params["index"]
            )
        if not index["problems"]:
            wanted = index["packages"]
            for item in wanted:
                packages[item["name"]]["requested"] = item["version"]

    loaded, loaded_reason = loaded_module(params["loaded_version_path"])
    nvml_facts, nvml_reason = nvml(module)
    drift = stack_facts.drift(
        wanted,
        installed,
        loaded["version"] if loaded else None,
        pins,
        holds,
        version_equal=version_equal,
        loaded_flavor=loaded["flavor"] if loaded else None,
        kernel_modules=params["kernel_modules"],
    )
    switches = nvswitch(module)
    service_states = services(module, list(dict.fromkeys(params["services"] + params["wanted_services"])))
    facts = {
        "package_manager": manager,
        "packages": packages,
        "loaded": loaded,
        "nvml": nvml_facts,
        "gpu_models": sorted({gpu["name"] for gpu in (nvml_facts or {}).get("gpus", [])}),
        "nvswitch": switches,
        "services": service_states,
        "container_runtimes": runtimes,
        "drift": drift,
        "reboot_required": drift["reboot_required"],
        "plan": stack_plan.plan(drift, service_states, params["wanted_services"]),
    }
    try:
        headers_setting = params["kernel_headers"]
        headers_setting = headers_setting if headers_setting == "auto" else boolean(headers_setting, strict=True)
        facts["plan"]["dkms"] = stack_plan.uses_dkms(item["name"] for item in wanted)
        facts["plan"]["kernel_headers"] = stack_plan.kernel_headers(headers_setting, facts["plan"]["dkms"])
    except (TypeError, ValueError) as exc:
        module.fail_json(msg=f"kernel_headers: {exc}; set it to true, false or auto")
    if index is not None:
        facts["index"] = index
    wanted_runtime = params["container_runtime"]
    if wanted_runtime is not None and any(item.get("component") == "container_toolkit" for item in requested_list):
        reasons = container_runtime_state.reasons(
            runtimes, wanted_runtime["runtimes"], wanted_runtime["cdi"], wanted_runtime["set_as_default"], nvml_facts
        )
        facts["container_runtime"] = {"reasons": reasons}
    if loaded is None:
        facts["loaded_reason"] = loaded_reason
    if nvml_facts is None:
        facts["nvml_reason"] = nvml_reason
    returned = {"gpu_stack": facts, "gpu_stack_before": facts} if params["before"] else {"gpu_stack": facts}
    module.exit_json(changed=False, ansible_facts=returned)


if __name__ == "__main__":
    main()
