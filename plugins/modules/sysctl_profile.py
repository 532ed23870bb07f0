#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysctl_profile
short_description: Own one sysctl drop-in holding a whole dict of keys, reload once, report drift
version_added: 0.1.0
description:
  - Renders a whole dict of sysctl keys into one file under C(/etc/sysctl.d), sorted and deterministic.
  - Reads the live value of every key from C(/proc/sys) and returns per-key drift between live and desired.
  - Applies the keys that drift with one C(sysctl) call (C(sysctl -p FILE)), never one call per key;
    when nothing drifts no command runs.
  - Under a O(root) other than C(/) no command ever runs (it would act on the machine running the module);
    with O(apply_live=always) the values are written to C(ROOT/proc/sys) directly.
  - In a container the host-global keys (C(vm.*), C(kernel.numa_balancing), host-only C(net.core.*))
    are persisted but not written live unless O(apply_live=always); keys that belong to the container's
    own network, IPC or UTS namespace are applied with one C(sysctl -w) call. What was not applied live is
    listed in RV(not_applied_live).
  - Unlike M(ansible.posix.sysctl) (one key and one reload per task) this module sets the whole profile at once.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  sysctls:
    description:
      - Keys and values. Lists and runs of whitespace in multi-value keys such as C(net.ipv4.tcp_rmem)
        are normalised to single spaces; booleans become C(1) and C(0).
      - Required when O(state=present).
    type: dict
  name:
    description:
      - File name of the drop-in without the C(.conf) suffix. The number orders it among other drop-ins.
    type: str
    default: 90-gpuops-tuning
  directory:
    description:
      - Directory of the drop-in, below O(root).
    type: path
    default: /etc/sysctl.d
  state:
    description:
      - V(present) writes the drop-in and applies drift; V(absent) removes the drop-in (live values stay until reboot).
    type: str
    choices: [present, absent]
    default: present
  apply_live:
    description:
      - V(auto) applies every drifting key live on a host, only namespaced keys in a container, and nothing
        when O(root) is not C(/).
      - V(always) applies every drifting key live, even host-global keys in a container (this writes the HOST's values).
      - V(never) only persists the drop-in.
    type: str
    choices: [auto, always, never]
    default: auto
  root:
    description:
      - Root directory prefixed to C(/etc) and C(/proc) paths. For tests and chroots; leave C(/) on real nodes.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the drop-in file before and after.
seealso:
  - module: ansible.posix.sysctl
"""

EXAMPLES = r"""
- name: Apply the training sysctl profile in one drop-in and one reload
  gpuops.cluster.sysctl_profile:
    name: 90-gpuops-tuning
    sysctls:
      kernel.numa_balancing: 0
      vm.swappiness: 1
      net.core.rmem_max: 268435456
      net.ipv4.tcp_rmem: [4096, 87380, 134217728]
  register: kernel_tuning_sysctl_result

- name: Persist only, never write live
  gpuops.cluster.sysctl_profile:
    sysctls:
      vm.max_map_count: 1048576
    apply_live: never

- name: Remove the drop-in
  gpuops.cluster.sysctl_profile:
    name: 90-gpuops-tuning
    state: absent
"""

RETURN = r"""
path:
  description: The drop-in file.
  returned: always
  type: str
  sample: /etc/sysctl.d/90-gpuops-tuning.conf
drift:
  description: Keys whose live value differed from the desired value before this run, with both values.
  returned: always
  type: dict
  sample: {"kernel.numa_balancing": {"live": "1", "desired": "0"}}
drift_after:
  description: Keys whose live value still differs after this run (in check mode, those that would).
  returned: always
  type: dict
  sample: {"vm.nr_hugepages": {"live": "0", "desired": "1024"}}
applied_live:
  description: Keys written live by this run (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["kernel.numa_balancing"]
not_applied_live:
  description: Drifting keys not written live, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "vm.nr_hugepages", "reason": "host-global key in a container (podman)"}]
file_changed:
  description: Whether the drop-in content changed (or would change in check mode).
  returned: always
  type: bool
  sample: true
reloaded:
  description: Whether the drift was applied live in one pass (one sysctl command under root C(/)).
  returned: always
  type: bool
  sample: true
command:
  description: The sysctl command run (or that would run in check mode); empty when none.
  returned: always
  type: list
  elements: str
  sample: ["/usr/sbin/sysctl", "-p", "/etc/sysctl.d/90-gpuops-tuning.conf"]
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: podman
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import sysctl_profile


def _write_proc(root, keys, desired):
    errors = []
    for key in keys:
        target = os.path.join(root, "proc", "sys", sysctl_profile.key_to_path(key))
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(desired[key] + "\n")
        except OSError as exc:
            errors.append(f"{key}: {exc.strerror}")
    return (1 if errors else 0), "", "\n".join(errors)


def _live_keys(apply_live, container, root, drifting):
    """Split drifting keys into those to write live and (key, reason) pairs that are not."""
    if apply_live == "never":
        return [], [(k, "apply_live is never") for k in drifting]
    if apply_live == "auto" and not container_detection.is_running_system(root):
        return [], [(k, f"root is {root}, not the running system") for k in drifting]
    if container_detection.should_apply_live(apply_live, container):
        return list(drifting), []
    namespaced, host_global = sysctl_profile.split_by_scope(drifting)
    return namespaced, [(k, f"host-global key in a container ({container})") for k in host_global]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysctls=dict(type="dict"),
            name=dict(type="str", default="90-gpuops-tuning"),
            directory=dict(type="path", default="/etc/sysctl.d"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
            root=dict(type="path", default="/"),
        ),
        required_if=[("state", "present", ("sysctls",))],
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    root = params["root"]
    if "/" in params["name"] or not params["name"]:
        module.fail_json(
            msg=f"name {params['name']!r} must be a plain file name without .conf, such as 90-gpuops-tuning"
        )
    path = os.path.join(root, params["directory"].lstrip("/"), params["name"] + ".conf")
    before = managed_file.read_text(path)
    container = container_detection.detect(module, root)
    result = dict(
        changed=False,
        path=path,
        drift={},
        drift_after={},
        applied_live=[],
        not_applied_live=[],
        file_changed=False,
        reloaded=False,
        command=[],
        container=container,
    )

    if params["state"] == "absent":
        result["file_changed"] = before is not None
        if before is not None and not module.check_mode:
            os.unlink(path)
        result["changed"] = result["file_changed"]
        if module._diff:
            result["diff"] = dict(before=before or "", after="", before_header=path, after_header=path)
        module.exit_json(**result)

    try:
        desired = sysctl_profile.normalise(params["sysctls"])
        content = sysctl_profile.render(desired)
    except ValueError as exc:
        module.fail_json(msg=f"cannot render the sysctl profile: {exc}; fix the sysctls dict")
    live = sysctl_profile.read_live(root, desired)
    drift = sysctl_profile.drift(live, desired)
    result["drift"] = drift
    result["file_changed"] = before != content
    to_apply, skipped = _live_keys(params["apply_live"], container, root, drift)
    result["not_applied_live"] = [dict(name=k, reason=r) for k, r in skipped]

    if to_apply and container_detection.is_running_system(root):
        sysctl = module.get_bin_path("sysctl", required=True)
        if len(to_apply) == len(drift) and not skipped:
            command = [sysctl, "-p", path]
        else:
            command = [sysctl, "-w"] + [f"{k}={desired[k]}" for k in to_apply]
        result["command"] = command

    if module.check_mode:
        result["applied_live"] = list(to_apply)
        result["drift_after"] = {k: v for k, v in drift.items() if k not in to_apply}
        result["changed"] = result["file_changed"] or bool(to_apply)
    else:
        if result["file_changed"]:
            managed_file.write_atomic(module, path, content, create_parent=True)
        if to_apply:
            if result["command"]:
                rc, out, err = module.run_command(result["command"])
            else:
                # apply_live=always under another root (a chroot with its own /proc mounted): write its
                # /proc/sys directly. sysctl itself would act on the machine running this module.
                rc, out, err = _write_proc(root, to_apply, desired)
            result["reloaded"] = True
            after = sysctl_profile.drift(sysctl_profile.read_live(root, desired), desired)
            result["drift_after"] = after
            result["applied_live"] = [k for k in to_apply if k not in after]
            failed = [k for k in to_apply if k in after]
            if failed and container is None:
                module.fail_json(
                    msg=(
                        f"sysctl could not set {', '.join(failed)} (rc={rc}); check the key names exist on this "
                        f"kernel (a missing module?) and the values are valid, or drop them from the profile"
                    ),
                    rc=rc,
                    stdout=out,
                    stderr=err,
                    **result,
                )
            for key in failed:
                result["not_applied_live"].append(dict(name=key, reason=f"write refused in container ({container})"))
            if failed:
                module.warn(f"sysctl keys not applied live in this container: {', '.join(failed)}")
        else:
            result["drift_after"] = drift
        result["changed"] = result["file_changed"] or bool(result["applied_live"])

    if module._diff:
        result["diff"] = dict(before=before or "", after=content, before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
