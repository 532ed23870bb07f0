# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node's container runtimes and CDI specification need the nvidia_container_runtime module this pass.

The stack's read (gpu_stack_facts) answers it from files only, so a re-run on a configured node runs no more
module than before: the runtime configuration holds the NVIDIA runtime (container_runtime_config's checks on the
files nvidia-ctk wrote), the CDI specification names the loaded driver and lists every GPU (health/cdi_spec.py),
and the toolkit's nvidia-cdi-refresh units are enabled where installed. A pass that moves packages runs the module
whatever this says (the driver changed: the specification is regenerated).
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_runtime_config as rc
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit, enroot_hook

# Where systemctl enable links a unit with WantedBy=multi-user.target (the refresh units' [Install]).
WANTS_DIR = "/etc/systemd/system/multi-user.target.wants"
REFRESH_UNITS = ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path")


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def reasons(present, wanted, cdi=True, default=False, nvml=None, exists=os.path.exists, read=_read, stat=os.stat):
    """Why the runtimes or the CDI specification need configuring (empty: nothing to do).

    ``present``: the runtimes on the node; ``wanted``: those the role configures; ``nvml``: gpu_stack_facts'
    nvidia-smi reading (``driver_version``, ``gpus``), None when no driver answers (nothing is said of the CDI
    specification then: it cannot be generated before the driver loads).
    """
    found = []
    if not any(exists(path) for path in cdi_spec.NVIDIA_CTK):
        return ["nvidia-ctk is not installed"]
    for runtime in [name for name in present if name in wanted]:
        try:
            if runtime == "enroot":
                binary = next(path for path in container_toolkit.RUNTIME_BINARIES["enroot"] if exists(path))
                problems = enroot_hook.problems(enroot_hook.read(binary, read, exists, stat))
            elif runtime == "containerd":
                main = read(rc.CONTAINERD_CONFIG)
                version = rc.containerd_version(main)
                if version == 1:
                    problems = rc.containerd_problems(main, 1, cdi, default)
                else:
                    problems = rc.containerd_problems(read(rc.CONTAINERD_DROP_IN) or "", version, cdi, default)
                    if rc.drop_in_pattern(rc.CONTAINERD_DROP_IN) not in rc.containerd_imports(main):
                        problems.append("%s does not import %s" % (rc.CONTAINERD_CONFIG, rc.CONTAINERD_DROP_IN))
            elif runtime == "docker":
                problems = rc.docker_problems(read(rc.DOCKER_CONFIG), cdi, default)
            else:
                problems = rc.crio_problems(read(rc.CRIO_DROP_IN) or "", default)
        except rc.ConfigError as exc:
            problems = [str(exc)]
        found.extend("%s: %s" % (runtime, problem) for problem in problems)
    if nvml and nvml.get("gpus"):
        smi = {
            "driver_version": nvml.get("driver_version"),
            "gpus": [{"index": index} for index in range(len(nvml["gpus"]))],
        }
        path = "/var/run/cdi/nvidia.yaml"
        text = read(path)
        reading = {"toolkit": True, "refresh_unit": False, "specs": {path: text} if text is not None else {}}
        found.extend(
            "CDI: " + detail for status, detail in cdi_spec.findings(reading, smi)[:1] if status in ("fail", "warn")
        )
    if any(exists(path) for path in cdi_spec.REFRESH_UNITS):
        off = [unit for unit in REFRESH_UNITS if not exists(os.path.join(WANTS_DIR, unit))]
        if off:
            found.append("not enabled: %s" % ", ".join(off))
    return found
