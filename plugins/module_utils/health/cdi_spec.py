# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CDI specification of the NVIDIA GPUs: does it match the loaded driver and list every GPU?

Runtimes that read CDI (containerd with ``enable_cdi``, Docker's ``--device nvidia.com/gpu=...``, podman, CRI-O)
take the devices and the driver's library mounts from ``nvidia.yaml`` in ``/etc/cdi`` and ``/var/run/cdi``; a
specification written for another driver release mounts libraries that no longer exist, and the container fails to
start (``crun: cannot stat /lib64/libEGL_nvidia.so.<old version>``, NVIDIA/nvidia-container-toolkit issue 450).

:func:`read` takes the node's files (no command); :func:`findings` judges them against nvidia-smi's reading
(``nvidia_smi_xml.parse``). The specification's driver release is what its mounts and hooks name: the
``libcuda.so.<release>`` and ``libnvidia-ml.so.<release>`` mounts and the ``enable-cuda-compat
--host-driver-version=<release>`` hook, as ``nvidia-ctk cdi generate`` writes them (its expected output in
cmd/nvidia-ctk/cdi/generate/generate_test.go). Device names follow nvidia-ctk's default strategies ``index`` and
``uuid`` (pkg/nvcdi/namer.go): ``0``, ``GPU-<uuid>``, and ``<gpu>:<mig>`` for a MIG device.

Read without PyYAML (the node command runs with the node's bare Python): nvidia-ctk writes ``yaml`` (the
default) or ``json``, and only the top-level ``cdiVersion``, ``kind`` and the ``devices[].name`` entries are needed.
"""

from __future__ import annotations

import json
import os
import re

# Where runtimes look for CDI specifications, the higher priority first: container-device-interface's
# DefaultSpecDirs is [/etc/cdi, /var/run/cdi], a later directory winning (pkg/cdi/spec-dirs.go). /var/run/cdi is what
# the toolkit's nvidia-cdi-refresh.service writes (NVIDIA_CTK_CDI_OUTPUT_FILE_PATH, deployments/systemd).
SPEC_DIRS = ("/var/run/cdi", "/etc/cdi")
SPEC_NAMES = ("nvidia.yaml", "nvidia.json")
KIND = "nvidia.com/gpu"
NVIDIA_CTK = ("/usr/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk")
# The toolkit's refresh unit (v1.18.0 on): /etc/systemd/system in 1.18/1.19 debs, /lib/systemd/system from 1.20.
REFRESH_UNITS = (
    "/lib/systemd/system/nvidia-cdi-refresh.service",
    "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
    "/etc/systemd/system/nvidia-cdi-refresh.service",
)
MIG_REFRESH_NOTE = "the refresh unit does not follow MIG changes (NVIDIA/nvidia-container-toolkit issue 1828)"

_VERSION = r"(\d+\.\d+(?:\.\d+)?)"
_DRIVER_RES = (
    re.compile(r"--host-driver-version=" + _VERSION),
    re.compile(r"/libcuda\.so\." + _VERSION + r"(?![\d.])"),
    re.compile(r"/libnvidia-ml\.so\." + _VERSION + r"(?![\d.])"),
)
_TOP_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\s*(.*?)\s*$")
_DEVICE_NAME = re.compile(r"^\s*-\s+name:\s*(.+?)\s*$")


class SpecError(ValueError):
    """The text is no CDI specification this module can read."""


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse(text):
    """``{cdi_version, kind, devices, driver_versions}`` of a specification nvidia-ctk wrote (YAML or JSON)."""
    if not text or not text.strip():
        raise SpecError("the file is empty")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError("not valid JSON: %s" % exc) from exc
        if not isinstance(data, dict):
            raise SpecError("not a CDI specification (a JSON object)")
        cdi_version, kind = data.get("cdiVersion"), data.get("kind")
        devices = [str(item.get("name")) for item in data.get("devices") or [] if isinstance(item, dict)]
    else:
        cdi_version = kind = None
        devices = []
        section = None
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or line.strip() == "---":
                continue
            top = _TOP_KEY.match(line)
            if top:
                section = top.group(1)
                if section == "cdiVersion":
                    cdi_version = _unquote(top.group(2))
                elif section == "kind":
                    kind = _unquote(top.group(2))
                continue
            name = _DEVICE_NAME.match(line) if section == "devices" else None
            if name:
                devices.append(_unquote(name.group(1)))
    if not cdi_version or not kind:
        raise SpecError("no cdiVersion or kind at the top level: not a CDI specification")
    versions = set()
    for pattern in _DRIVER_RES:
        versions.update(pattern.findall(text))
    return {"cdi_version": cdi_version, "kind": kind, "devices": devices, "driver_versions": sorted(versions)}


def read(root="/"):
    """The node's CDI files: ``{toolkit, refresh_unit, specs: {path: text}}`` (a path absent is left out)."""

    def at(path):
        return os.path.join(root, path.lstrip("/"))

    specs = {}
    for directory in SPEC_DIRS:
        for name in SPEC_NAMES:
            path = os.path.join(directory, name)
            try:
                with open(at(path), encoding="utf-8", errors="replace") as handle:
                    specs[path] = handle.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                specs[path] = exc
    return {
        "toolkit": any(os.path.exists(at(path)) for path in NVIDIA_CTK),
        "refresh_unit": any(os.path.exists(at(path)) for path in REFRESH_UNITS),
        "specs": specs,
    }


def fix_command(reading, path=None):
    """What regenerates the specification on this node."""
    if reading.get("refresh_unit") and (path is None or path.startswith("/var/run/cdi/")):
        return "systemctl restart nvidia-cdi-refresh.service"
    return "nvidia-ctk cdi generate --output=%s" % (path or "/var/run/cdi/nvidia.yaml")


def _problems(spec, smi):
    """What makes a parsed specification stale for the GPUs and driver nvidia-smi reports (empty: it is true)."""
    problems = []
    if spec["kind"] != KIND:
        problems.append("its kind is %s, not %s" % (spec["kind"], KIND))
    driver = smi.get("driver_version")
    versions = spec["driver_versions"]
    if not versions:
        problems.append("it names no driver release (no libcuda.so.<release> mount)")
    elif versions != [driver]:
        problems.append("it is for driver %s, the loaded driver is %s" % (" and ".join(versions), driver))
    names = set(spec["devices"])
    missing = [
        "GPU %s (%s)" % (gpu["index"], gpu.get("uuid") or gpu.get("pci_bus_id"))
        for gpu in smi["gpus"]
        if str(gpu["index"]) not in names and (not gpu.get("uuid") or gpu["uuid"] not in names)
    ]
    if missing:
        problems.append("it lists no device for %s" % ", ".join(missing))
    migs = []
    for gpu in smi["gpus"]:
        if (gpu.get("mig_mode") or {}).get("current"):
            migs.extend("%s:%d" % (gpu["index"], number) for number in range(gpu.get("mig_devices") or 0))
    absent = [name for name in migs if name not in names]
    if absent:
        problems.append("it lists no MIG device %s (%s)" % (", ".join(absent), MIG_REFRESH_NOTE))
    extra = sorted(name for name in names if re.fullmatch(r"\d+:\d+", name) and name not in migs)
    if extra:
        problems.append("it lists MIG devices the GPUs do not have: %s (%s)" % (", ".join(extra), MIG_REFRESH_NOTE))
    return problems


def findings(reading, smi):
    """``[(status, detail)]`` for the ``cdi_spec`` check.

    Skip where the toolkit is not installed or nvidia-smi gave no GPUs (the nvidia_smi check fails then). The
    specification runtimes take first (``/var/run/cdi`` over ``/etc/cdi``) fails when missing, unreadable or stale,
    with the command that regenerates it; a stale one in the other directory warns, naming it.
    """
    if not reading.get("toolkit"):
        return [("skip", "NVIDIA Container Toolkit not installed (no nvidia-ctk): no CDI specification expected")]
    if not smi or not smi.get("gpus"):
        return [("skip", "no GPUs from nvidia-smi to compare the CDI specification with")]
    specs = reading.get("specs") or {}
    if not specs:
        return [
            (
                "fail",
                "no CDI specification for the GPUs (nvidia.yaml in %s): containers asking for nvidia.com/gpu "
                "devices cannot start; run %s" % (" or ".join(SPEC_DIRS), fix_command(reading)),
            )
        ]
    found = []
    for rank, (path, text) in enumerate(sorted(specs.items(), key=lambda item: _priority(item[0]))):
        first = rank == 0
        if isinstance(text, Exception):
            problems = ["it cannot be read: %s" % text]
        else:
            try:
                problems = _problems(parse(text), smi)
            except SpecError as exc:
                problems = ["it does not parse: %s" % exc]
        if not problems:
            if first:
                found.append(("pass", "%s is for driver %s and lists every GPU" % (path, smi.get("driver_version"))))
            continue
        fix = (
            fix_command(reading, path)
            if first or path.startswith("/var/run/cdi/")
            else "remove it or run %s" % (fix_command(reading, path))
        )
        status = "fail" if first else "warn"
        where = "" if first else " (runtimes read it too, after %s)" % sorted(specs, key=_priority)[0]
        found.append((status, "CDI specification %s is stale%s: %s; %s" % (path, where, "; ".join(problems), fix)))
    return found


def _priority(path):
    """Runtimes give /var/run/cdi precedence over /etc/cdi; YAML before JSON in one directory."""
    directory, name = os.path.split(path)
    return (SPEC_DIRS.index(directory) if directory in SPEC_DIRS else len(SPEC_DIRS), name)
