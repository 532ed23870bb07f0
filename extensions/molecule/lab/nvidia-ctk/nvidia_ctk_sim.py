#!/usr/bin/env python3
"""Stand-in ``nvidia-ctk`` for the gpuops lab (a test double: never shipped by a role).

The stand-in nvidia-container-toolkit-base package installs this file as ``/usr/bin/nvidia-ctk``. It does the two
things the nvidia_stack role asks of the real tool (NVIDIA/nvidia-container-toolkit v1.20.0), with the real flags:

``cdi generate [--output=PATH]``
    A CDI specification (kind ``nvidia.com/gpu``) for the simulated GPUs, read from ``nvidia-smi -q -x`` (the lab's
    simulator, which gives the loaded driver and /etc/gpuops-lab/gpus.json): devices named by index and UUID (the
    default strategies ``index`` and ``uuid``, pkg/nvcdi/namer.go), ``<gpu>:<mig>`` for each MIG device (the real
    tool also names it by its MIG UUID, which the simulator does not give), and ``all``; the driver's release in the
    ``libcuda.so``/``libnvidia-ml.so`` mounts and the ``enable-cuda-compat --host-driver-version`` hook, laid out
    as the real tool's expected output in cmd/nvidia-ctk/cdi/generate/generate_test.go. Without ``--output`` it
    writes ``$NVIDIA_CTK_CDI_OUTPUT_FILE_PATH`` (the refresh unit's), else prints to stdout. A driver/library
    mismatch fails, as NVML's init does.
``runtime configure --runtime=containerd|docker|crio [--config=PATH] [--drop-in-config=PATH] [--cdi.enabled]
[--set-as-default] [--dry-run]``
    containerd: the config version from the top-level file (no ``version`` key = 1, no file or no keys = 2); from
    version 2 a drop-in holding ``version``, a copy of the CRI plugin section and ``runtimes.nvidia`` (runtime
    options copied from ``runc``, ``options.BinaryName``), ``enable_cdi``; the top-level file gets the drop-in
    directory in ``imports``. Version 1 edits the top-level file. Docker: daemon.json ``runtimes.nvidia``
    (``{"args": [], "path": "nvidia-container-runtime"}``), ``features.cdi``. CRI-O: a drop-in with
    ``crio.runtime.runtimes.nvidia`` (``runtime_path``, ``runtime_type = "oci"``).
    (pkg/config/engine/{containerd,docker,crio}.)

``GPUOPS_LAB_NVIDIA_SMI`` names the nvidia-smi to read (default: ``nvidia-smi`` on PATH).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import tomllib

CRI_PLUGINS = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DEFAULTS = {
    "containerd": ("/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"),
    "crio": ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml"),
    "docker": ("/etc/docker/daemon.json", ""),
}
LIBDIR = "/usr/lib/x86_64-linux-gnu"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]


def fail(message, code=1):
    print("nvidia-ctk (gpuops lab): " + message, file=sys.stderr)
    sys.exit(code)


def options(argv):
    """``{flag: value}`` of ``--flag=value`` / ``--flag value`` / ``--flag`` (True)."""
    parsed = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("--"):
            fail("unexpected argument %r" % arg)
        name, eq, value = arg[2:].partition("=")
        if not eq:
            takes_value = name in ("runtime", "config", "drop-in-config", "output", "nvidia-runtime-name",
                                   "nvidia-runtime-path", "format", "config-source")  # fmt: skip
            if takes_value and index + 1 < len(argv):
                index += 1
                value = argv[index]
            else:
                value = True
        parsed[name] = value
        index += 1
    return parsed


# ----------------------------------------------------------------------------- cdi generate


def read_gpus():
    smi = os.environ.get("GPUOPS_LAB_NVIDIA_SMI", "nvidia-smi")
    done = subprocess.run([smi, "-q", "-x"], capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        fail("failed to initialize NVML: %s" % (done.stdout + done.stderr).strip().splitlines()[-1:], 1)
    root = ET.fromstring(done.stdout[done.stdout.find("<nvidia_smi_log") :])
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        migs = len(gpu.findall("mig_devices/mig_device"))
        gpus.append({"index": index, "uuid": gpu.findtext("uuid").strip(), "migs": migs})
    return root.findtext("driver_version").strip(), gpus


def device(name, nodes):
    lines = ['    - name: "%s"' % name, "      containerEdits:", "        deviceNodes:"]
    for node in nodes:
        lines += ["            - path: %s" % node, "              hostPath: %s" % node]
    return lines


def cdi_spec(driver, gpus):
    lines = ["---", "cdiVersion: 0.7.0", "kind: nvidia.com/gpu", "devices:"]
    for gpu in gpus:
        node = ["/dev/nvidia%d" % gpu["index"]]
        lines += device(str(gpu["index"]), node) + device(gpu["uuid"], node)
        for number in range(gpu["migs"]):
            lines += device("%d:%d" % (gpu["index"], number), node)
    lines += device("all", ["/dev/nvidia%d" % gpu["index"] for gpu in gpus])
    lines += [
        "containerEdits:",
        "    env:",
        "        - NVIDIA_CTK_LIBCUDA_DIR=%s" % LIBDIR,
        "        - NVIDIA_VISIBLE_DEVICES=void",
        "    deviceNodes:",
        "        - path: /dev/nvidiactl",
        "          hostPath: /dev/nvidiactl",
        "    hooks:",
        "        - hookName: createContainer",
        "          path: /usr/bin/nvidia-cdi-hook",
        "          args:",
        "            - nvidia-cdi-hook",
        "            - enable-cuda-compat",
        "            - --host-driver-version=%s" % driver,
        "    mounts:",
    ]
    for library in ("libcuda.so", "libnvidia-ml.so"):
        path = "%s/%s.%s" % (LIBDIR, library, driver)
        lines += ["        - hostPath: %s" % path, "          containerPath: %s" % path, "          options:"]
        lines += ["            - %s" % option for option in MOUNT_OPTIONS]
    return "\n".join(lines) + "\n"


def cdi_generate(args):
    flags = options(args)
    driver, gpus = read_gpus()
    text = cdi_spec(driver, gpus)
    output = flags.get("output") or os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH")
    if not output:
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(output, 0o644)
    print("Generated CDI spec with version 0.7.0", file=sys.stderr)


# ----------------------------------------------------------------------------- TOML out


def _key(name):
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    fail("cannot write %r as TOML" % (value,))
    return ""


def dump_toml(data, path=()):
    """TOML for ``data``: scalars first, then each sub-table under its dotted header."""
    lines = []
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    if path and (scalars or not tables):
        lines.append("[" + ".".join(_key(part) for part in path) + "]")
    lines += ["%s = %s" % (_key(k), _value(v)) for k, v in scalars]
    for key, table in tables:
        sub = dump_toml(table, (*path, key))
        if sub:
            lines += ([""] if lines else []) + sub
    return lines


def load_toml(path):
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return None
    except tomllib.TOMLDecodeError as exc:
        fail("failed to load config %s: %s" % (path, exc))
    return None


def save(path, text, dry_run):
    if dry_run:
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


# ----------------------------------------------------------------------------- runtime configure


def configure_containerd(flags, config, drop_in, name, binary, cdi, default, dry_run):
    source = load_toml(config)
    if not source:
        version = 2
        source = {}
    else:
        version = source.get("version", 1)
    plugin = CRI_PLUGINS.get(version, CRI_PLUGINS[3])
    if version == 1 or not drop_in:
        target = copy.deepcopy(source)
        target["version"] = version
    else:
        target = {"version": version, "plugins": {}}
        cri_source = (source.get("plugins") or {}).get(plugin)
        if cri_source is not None:
            target["plugins"][plugin] = copy.deepcopy(cri_source)
    cri = target.setdefault("plugins", {}).setdefault(plugin, {})
    runtimes = cri.setdefault("containerd", {}).setdefault("runtimes", {})
    runc = ((((source.get("plugins") or {}).get(plugin) or {}).get("containerd") or {}).get("runtimes") or {}).get(
        "runc"
    )
    runtime = copy.deepcopy(runc) if runc else {"runtime_type": "io.containerd.runc.v2"}
    runtime.setdefault("runtime_type", "io.containerd.runc.v2")
    runtime.setdefault("options", {})["BinaryName"] = binary
    runtimes[name] = runtime
    if cdi:
        cri["enable_cdi"] = True
    if default:
        cri["containerd"]["default_runtime_name"] = name
    if version == 1 or not drop_in:
        save(config, "\n".join(dump_toml(target)) + "\n", dry_run)
        return
    save(drop_in, "\n".join(dump_toml(target)) + "\n", dry_run)
    top = source if source else {"version": version}
    pattern = os.path.dirname(drop_in) + "/*.toml"
    imports = list(top.get("imports") or [])
    if pattern not in imports:
        top = dict(top, imports=[*imports, pattern])
    save(config, "\n".join(dump_toml(top)) + "\n", dry_run)


def configure_docker(config, name, binary, cdi, default, dry_run):
    try:
        with open(config, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    data = json.loads(text) if text.strip() else {}
    data.setdefault("runtimes", {})[name] = {"args": [], "path": binary}
    if cdi:
        data.setdefault("features", {})["cdi"] = True
    if default:
        data["default-runtime"] = name
    save(config, json.dumps(data, indent=4) + "\n", dry_run)


def configure_crio(drop_in, config, name, binary, default, dry_run):
    runtime = {"runtime_path": binary, "runtime_type": "oci"}
    table = {"runtimes": {name: runtime}}
    if default:
        table["default_runtime"] = name
    save(drop_in or config, "\n".join(dump_toml({"crio": {"runtime": table}})) + "\n", dry_run)


def runtime_configure(args):
    flags = options(args)
    runtime = flags.get("runtime", "docker")
    if runtime not in DEFAULTS:
        fail("unrecognized runtime '%s'" % runtime)
    config = flags.get("config") or DEFAULTS[runtime][0]
    drop_in = flags.get("drop-in-config", DEFAULTS[runtime][1])
    drop_in = "" if drop_in is True else drop_in
    if drop_in and runtime == "docker":
        fail("runtime docker does not support drop-in configs")
    name = flags.get("nvidia-runtime-name", "nvidia")
    binary = flags.get("nvidia-runtime-path", "nvidia-container-runtime")
    cdi = any(flags.get(flag) for flag in ("cdi.enabled", "enable-cdi", "cdi.enable"))
    default = any(flags.get(flag) for flag in ("set-as-default", "nvidia-set-as-default"))
    dry_run = bool(flags.get("dry-run"))
    if runtime == "containerd":
        configure_containerd(flags, config, drop_in, name, binary, cdi, default, dry_run)
    elif runtime == "docker":
        configure_docker(config, name, binary, cdi, default, dry_run)
    else:
        configure_crio(drop_in, config, name, binary, default, dry_run)
    if not dry_run:
        print("Wrote updated config; it is recommended that %s daemon be restarted." % runtime, file=sys.stderr)


def main(argv):
    if argv[:2] == ["cdi", "generate"]:
        cdi_generate(argv[2:])
    elif argv[:2] == ["runtime", "configure"]:
        runtime_configure(argv[2:])
    elif argv[:1] == ["--version"]:
        print("NVIDIA Container Toolkit CLI version 1.20.0 (gpuops lab stand-in)")
    else:
        fail("the lab's stand-in does: cdi generate, runtime configure, --version; not %s" % " ".join(argv), 2)


if __name__ == "__main__":
    main(sys.argv[1:])
