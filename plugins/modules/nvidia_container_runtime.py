#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_container_runtime
short_description: Configure containerd, Docker, CRI-O and enroot for the NVIDIA Container Toolkit; keep CDI true
version_added: 0.4.0
description:
  - For each runtime of O(runtimes) present on the node (C(containerd), C(dockerd), C(crio) or C(enroot) in C(/usr/bin),
    C(/usr/sbin) or C(/usr/local/bin)), runs C(nvidia-ctk runtime configure) on a scratch copy of the runtime's
    configuration, compares what it wrote with the node's files and replaces only the files that differ, so check
    mode predicts the run and a re-run changes nothing. Then checks what the tool wrote holds the NVIDIA runtime
    (and CDI); a file without it fails the module before it is written.
  - containerd with config version 2 or 3 gets the drop-in O(containerd_drop_in) (nvidia-ctk copies the whole CRI
    plugin section into it, as containerd before 2.1 does not merge plugin tables) and its directory in the main
    file's C(imports), every other import kept; version 1 (a config.toml without C(version)) has no drop-ins and
    its main file is edited. CRI-O gets O(crio_drop_in); Docker O(docker_config) (no drop-in exists).
  - enroot (Slurm with pyxis) reads no CDI and has nothing for nvidia-ctk to write; its GPU support is the hook
    C(98-nvidia.sh) enroot ships in C(hooks.d) of its configuration directory (C(/etc/enroot), C(/usr/local/etc/enroot)
    for a source install, or C(ENROOT_SYSCONF_PATH) of C(enroot.conf)), which calls C(nvidia-container-cli)
    (libnvidia-container-tools). A hook made non-executable (enroot then skips it and GPU containers start without
    GPUs) is made executable again (mode 0755, as enroot installs it); a missing hook or a missing
    C(nvidia-container-cli) fails the module with the fix, nothing changed. enroot has no service to restart.
  - RV(restart) names the runtimes whose configuration changed; restart each once (the C(nvidia_stack) role's
    handlers). A runtime that is not present is left alone.
  - With O(cdi_output), runs C(nvidia-ctk cdi generate) into a scratch file and replaces O(cdi_output) when it
    differs (a driver change). Where the toolkit ships the C(nvidia-cdi-refresh) units (v1.18.0 on), enables
    C(nvidia-cdi-refresh.service) (it regenerates the spec at boot) and C(nvidia-cdi-refresh.path) (after a driver
    module change of the running kernel).
  - Every command runs under coreutils C(timeout), as an argument list.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  runtimes:
    description: The runtimes to configure where they are present.
    type: list
    elements: str
    choices: [containerd, docker, crio, enroot]
    default: [containerd, docker, crio, enroot]
  cdi:
    description: Enable CDI in containerd (C(enable_cdi)) and Docker (C(features.cdi)); CRI-O always has it.
    type: bool
    default: true
  set_as_default:
    description: Make C(nvidia) the default runtime (Kubernetes without a RuntimeClass for it).
    type: bool
    default: false
  nvidia_ctk:
    description: The C(nvidia-ctk) binary (package nvidia-container-toolkit-base).
    type: path
    default: /usr/bin/nvidia-ctk
  containerd_config:
    description: containerd's main configuration.
    type: path
    default: /etc/containerd/config.toml
  containerd_drop_in:
    description: The drop-in written for config version 2 and 3; its directory is added to C(imports).
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  crio_config:
    description: CRI-O's main configuration (read by nvidia-ctk; not changed).
    type: path
    default: /etc/crio/crio.conf
  crio_drop_in:
    description: The CRI-O drop-in written.
    type: path
    default: /etc/crio/crio.conf.d/99-nvidia.toml
  docker_config:
    description: Docker's daemon configuration.
    type: path
    default: /etc/docker/daemon.json
  enroot_sysconf:
    description:
      - enroot's configuration directory (its C(hooks.d) holds the GPU hook); unset to find it as enroot does
        (C(ENROOT_SYSCONF_PATH) of C(enroot.conf), else C(/etc/enroot), or C(/usr/local/etc/enroot) for an enroot
        in C(/usr/local/bin)).
    type: path
  cdi_output:
    description: The CDI specification kept for the loaded driver; empty to leave it to the refresh units.
    type: path
    default: /var/run/cdi/nvidia.yaml
  refresh_units:
    description: Enable the toolkit's nvidia-cdi-refresh units where they are installed.
    type: bool
    default: true
  command_timeout:
    description: Seconds each command may take.
    type: int
    default: 120
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Runs nvidia-ctk on scratch copies only; without nvidia-ctk yet (a first install) it predicts a change.
  diff_mode:
    support: full
seealso:
  - module: gpuops.cluster.gpu_stack_facts
"""

EXAMPLES = r"""
- name: Configure the container runtimes for the NVIDIA Container Toolkit
  gpuops.cluster.nvidia_container_runtime:
  register: runtime_config
  notify: Restart containerd
"""

RETURN = r"""
present:
  description: The runtimes of O(runtimes) found on the node.
  type: list
  elements: str
  returned: always
  sample: [containerd, docker]
restart:
  description: The runtimes whose configuration changed (restart each once).
  type: list
  elements: str
  returned: always
  sample: [containerd]
files:
  description: Per file written or checked, whether it changed.
  type: dict
  returned: always
  sample: {"/etc/containerd/conf.d/99-nvidia.toml": {"runtime": "containerd", "changed": true}}
enroot:
  description: enroot's GPU hook (C(hook), its C(hook_mode) before this run, C(cli) the nvidia-container-cli found).
  type: dict
  returned: when enroot is present
  sample: {"hook": "/etc/enroot/hooks.d/98-nvidia.sh", "hook_mode": "0755", "cli": "/usr/bin/nvidia-container-cli"}
containerd_version:
  description: containerd's config version (1, 2 or 3), when containerd is present.
  type: int
  returned: when containerd is present
cdi:
  description: The CDI specification (C(path), C(changed), C(reason) when it could not be generated).
  type: dict
  returned: always
refresh_units:
  description: The nvidia-cdi-refresh units enabled by this run (empty when already enabled or not installed).
  type: list
  elements: str
  returned: always
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded, use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec
from ansible_collections.gpuops.cluster.plugins.module_utils.managed_file import read_text, write_atomic
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_config as rc
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit, enroot_hook

REFRESH_UNITS = ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path")


class Runner:
    def __init__(self, module, scratch):
        self.module = module
        self.scratch = scratch
        self.params = module.params

    def ctk(self, args, what):
        argv = [self.params["nvidia_ctk"], *args]
        rc_, out, err = run_bounded(self.module, argv, what, self.params["command_timeout"])
        return rc_, out, err

    def configure(self, runtime, config_path, drop_in):
        """What ``nvidia-ctk runtime configure`` writes for ``runtime``: the scratch path of the file it wrote."""
        scratch_config = os.path.join(self.scratch, runtime, os.path.basename(config_path))
        os.makedirs(os.path.dirname(scratch_config), exist_ok=True)
        if os.path.exists(config_path):
            shutil.copyfile(config_path, scratch_config)
        args = ["runtime", "configure", "--runtime=" + runtime, "--config=" + scratch_config]
        scratch_drop_in = None
        if runtime != "docker":
            scratch_drop_in = (
                os.path.join(self.scratch, runtime, "drop-in", os.path.basename(drop_in)) if drop_in else ""
            )
            args.append("--drop-in-config=" + scratch_drop_in)
        if self.params["cdi"] and runtime != "crio":
            args.append("--cdi.enabled")
        if self.params["set_as_default"]:
            args.append("--set-as-default")
        code, out, err = self.ctk(args, "configure %s with nvidia-ctk runtime configure" % runtime)
        if code != 0:
            self.module.fail_json(
                msg="nvidia-ctk runtime configure --runtime=%s failed: %s; fix %s and run again, nothing was changed"
                % (runtime, (err or out).strip()[-300:], config_path),
                rc=code,
            )
        return scratch_drop_in or scratch_config

    def wanted_files(self, runtime):
        """``{path: text}`` the runtime's configuration must be, and the problems nvidia-ctk's output has."""
        params = self.params
        if runtime == "docker":
            written = read_text(self.configure("docker", params["docker_config"], None), "")
            return {params["docker_config"]: written}, rc.docker_problems(
                written, params["cdi"], params["set_as_default"]
            )
        if runtime == "crio":
            written = read_text(self.configure("crio", params["crio_config"], params["crio_drop_in"]), "")
            return {params["crio_drop_in"]: written}, rc.crio_problems(written, params["set_as_default"])
        main = read_text(params["containerd_config"])
        try:
            version = rc.containerd_version(main)
        except rc.ConfigError as exc:
            self.module.fail_json(msg="%s: %s; nothing was changed" % (params["containerd_config"], exc))
        self.containerd_version = version
        if version == 1:
            written = read_text(self.configure("containerd", params["containerd_config"], ""), "")
            wanted = {params["containerd_config"]: written}
        else:
            written = read_text(
                self.configure("containerd", params["containerd_config"], params["containerd_drop_in"]), ""
            )
            pattern = rc.drop_in_pattern(params["containerd_drop_in"])
            wanted = {params["containerd_drop_in"]: written, params["containerd_config"]: rc.with_import(main, pattern)}
        problems = rc.containerd_problems(written, version, params["cdi"], params["set_as_default"])
        return wanted, problems


def same(path, before, after):
    if before is None:
        return False
    if path.endswith(".json"):
        return rc.docker_same(before, after)
    return before == after


def refresh_units(module, params, result):
    """Enable the nvidia-cdi-refresh units where installed; the names enabled by this run."""
    if not params["refresh_units"] or not any(os.path.exists(path) for path in cdi_spec.REFRESH_UNITS):
        return []
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        result["warnings"].append("systemctl not found: the nvidia-cdi-refresh units were not enabled")
        return []
    _code, out, _err = run_bounded(module, [systemctl, "is-enabled", *REFRESH_UNITS], "read the CDI refresh units")
    states = out.split()
    missing = [unit for index, unit in enumerate(REFRESH_UNITS) if index >= len(states) or states[index] != "enabled"]
    if missing and not module.check_mode:
        code, out, err = run_bounded(
            module, [systemctl, "enable", *missing], "enable the CDI refresh units", params["command_timeout"]
        )
        if code != 0:
            module.fail_json(msg="systemctl enable %s failed: %s" % (" ".join(missing), (err or out).strip()))
    return missing


def enroot_reading(module, present):
    """enroot's GPU hook where enroot is present (None otherwise); fails, nothing changed, when it cannot work."""
    if "enroot" not in present:
        return None
    binary = next(path for path in container_toolkit.RUNTIME_BINARIES["enroot"] if os.path.exists(path))
    reading = enroot_hook.read(binary, read_text, sysconf=module.params["enroot_sysconf"])
    problems = enroot_hook.problems(reading, mode=False)  # a hook made non-executable is made executable again
    if problems:
        module.fail_json(msg="; ".join(problems) + "; nothing was changed", enroot=reading)
    return reading


def main():
    module = AnsibleModule(
        argument_spec={
            "runtimes": {
                "type": "list",
                "elements": "str",
                "choices": ["containerd", "docker", "crio", "enroot"],
                "default": ["containerd", "docker", "crio", "enroot"],
            },
            "cdi": {"type": "bool", "default": True},
            "set_as_default": {"type": "bool", "default": False},
            "nvidia_ctk": {"type": "path", "default": "/usr/bin/nvidia-ctk"},
            "containerd_config": {"type": "path", "default": rc.CONTAINERD_CONFIG},
            "containerd_drop_in": {"type": "path", "default": rc.CONTAINERD_DROP_IN},
            "crio_config": {"type": "path", "default": rc.CRIO_CONFIG},
            "crio_drop_in": {"type": "path", "default": rc.CRIO_DROP_IN},
            "docker_config": {"type": "path", "default": rc.DOCKER_CONFIG},
            "enroot_sysconf": {"type": "path"},
            "cdi_output": {"type": "path", "default": "/var/run/cdi/nvidia.yaml"},
            "refresh_units": {"type": "bool", "default": True},
            "command_timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    present = [name for name in container_toolkit.present_runtimes(os.path.exists) if name in params["runtimes"]]
    result = {"changed": False, "present": present, "restart": [], "files": {}, "cdi": {}, "warnings": []}
    if not os.access(params["nvidia_ctk"], os.X_OK):
        if module.check_mode:  # a first install in check mode: the toolkit is not there yet
            restart = [name for name in present if name != "enroot"]  # enroot has no service
            result.update(changed=True, restart=restart, cdi={"path": params["cdi_output"], "changed": True})
            result["warnings"].append(
                "%s not installed yet: every present runtime would be configured" % params["nvidia_ctk"]
            )
            module.exit_json(**result)
        module.fail_json(msg="%s not found: install nvidia-container-toolkit-base first" % params["nvidia_ctk"])
    enroot = enroot_reading(module, present)
    if enroot is not None:
        result["enroot"] = dict(enroot, hook_mode=None if enroot["hook_mode"] is None else "%04o" % enroot["hook_mode"])
    scratch = tempfile.mkdtemp(prefix="gpuops-ctk-")
    diffs = []
    try:
        runner = Runner(module, scratch)
        plan = []
        for runtime in [name for name in present if name != "enroot"]:
            wanted, problems = runner.wanted_files(runtime)
            if problems:
                module.fail_json(
                    msg="nvidia-ctk runtime configure wrote a %s configuration without the NVIDIA runtime: %s; "
                    "nothing was changed" % (runtime, "; ".join(problems)),
                    wanted=wanted,
                )
            plan.extend((runtime, path, text) for path, text in wanted.items())
        if "containerd" in present:
            result["containerd_version"] = runner.containerd_version
        cdi_text = None
        if params["cdi_output"]:
            scratch_spec = os.path.join(scratch, "cdi", os.path.basename(params["cdi_output"]))
            code, out, err = runner.ctk(
                ["cdi", "generate", "--output=" + scratch_spec], "generate the CDI specification"
            )
            if code == 0:
                cdi_text = read_text(scratch_spec, "")
            else:
                result["cdi"]["reason"] = (err or out).strip()[-300:]
                result["warnings"].append(
                    "nvidia-ctk cdi generate failed (%s): the CDI specification is left as it is"
                    % result["cdi"]["reason"]
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # Every file is decided before the first one is written.
    for runtime, path, text in plan:
        before = read_text(path)
        changed = not same(path, before, text)
        result["files"][path] = {"runtime": runtime, "changed": changed}
        if changed:
            diffs.append({"before_header": path, "after_header": path, "before": before or "", "after": text})
            if runtime not in result["restart"]:
                result["restart"].append(runtime)
            if not module.check_mode:
                write_atomic(module, path, text, mode=None, create_parent=True)
    result["cdi"]["path"] = params["cdi_output"]
    result["cdi"]["changed"] = False
    if cdi_text is not None:
        before = read_text(params["cdi_output"])
        if before != cdi_text:
            result["cdi"]["changed"] = True
            diffs.append(
                {
                    "before_header": params["cdi_output"],
                    "after_header": params["cdi_output"],
                    "before": before or "",
                    "after": cdi_text,
                }
            )
            if not module.check_mode:
                write_atomic(module, params["cdi_output"], cdi_text, mode=0o644, create_parent=True)
    result["refresh_units"] = refresh_units(module, params, result)
    hook_fixed = enroot is not None and enroot_hook.needs_mode_fix(enroot)
    if hook_fixed:
        diffs.append(
            {
                "before_header": enroot["hook"] + " (mode)",
                "after_header": enroot["hook"] + " (mode)",
                "before": "%04o\n" % enroot["hook_mode"],
                "after": "%04o\n" % enroot_hook.HOOK_MODE,
            }
        )
        if not module.check_mode:
            os.chmod(enroot["hook"], enroot_hook.HOOK_MODE)
    result["changed"] = bool(result["restart"] or result["cdi"]["changed"] or result["refresh_units"] or hook_fixed)
    if module._diff:
        result["diff"] = diffs
    warnings = result.pop("warnings")
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
