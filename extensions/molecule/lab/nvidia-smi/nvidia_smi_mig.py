"""MIG for the lab's simulated ``nvidia-smi`` (never shipped by a role; see nvidia_smi_sim.py).

Installed beside the simulator as ``/usr/lib/gpuops-lab/nvidia_smi_mig.py``. State, all under
``GPUOPS_LAB_ROOT``:

``/var/lib/gpuops-lab/mig-mode.json``
    ``{slot: {"current": bool, "pending": bool}}``: the MIG mode survives reboots, as on real GPUs
    ("MIG mode setting is persistent across reboots until the user toggles the setting explicitly",
    MIG user guide). ``-mig 0|1`` sets ``pending``; it becomes ``current`` at a GPU reset (``-r``) or
    when the driver loads (the lab's reboot or a module reload: ``/run`` is fresh at every container
    start, and the simulator "loads" the module when ``/run/gpuops-lab/nvidia-version`` is absent).
``/run/gpuops-lab/mig/instances.json``
    ``{slot: [{"id", "profile", "start", "cis": [{"id", "compute", "start"}]}]}``: GPU and compute
    instances, lost at a reset, a reboot and a driver reload (MIG user guide: "the created MIG
    devices are not persistent across system reboots").
``/run/gpuops-lab/processes.json``
    ``{slot: [{"pid", "name", "gpu_instance_id", "compute_instance_id"}]}``: the compute processes
    ``-q -x`` lists under ``<processes>`` (a test or a lab step writes it; gone at reboot). A GPU reset
    is refused while the GPU runs one, as the driver refuses it ("is currently in use by another process").
``/etc/gpuops-lab/faults.json`` ``reset_unsupported`` [slot]
    GPUs that cannot be reset on their own (``-r`` answers Not Supported; a reboot applies the mode).
``/run/gpuops-lab/proc/driver/nvidia-caps/mig-minors``
    the capability minors as ``/proc/driver/nvidia-caps/mig-minors`` lists them (``config 1``,
    ``monitor 2``, ``gpu0/gi0/access 3``, ``gpu0/gi0/ci0/access 4`` ... ``gpu31/gi14/ci7/access 4322``);
    and for every instance ``/run/gpuops-lab/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>/access``
    (and ``ci<id>/access``) with ``DeviceFileMinor: <n>``, plus ``/run/gpuops-lab/dev/nvidia-caps/nvidia-cap<n>``
    (plain files standing in for the device nodes nvidia-modprobe creates).

Output formats are copied from real captures (``tests/fixtures/mig/README.md``): ``-lgip`` as an
H100 PCIe on driver 570.169 prints it, ``-lgi``/``-lci`` (with ``Placement``) and the ``-cgi``,
``-cci``, ``-dgi``, ``-dci`` and ``-mig`` messages as the MIG user guide and an A100-PCIE-40GB
capture print them. Profile names, ids and placements are those of ``matrix/mig_profiles.yml`` (a
unit test keeps them equal). GPU instance ids follow the placement as in the guide's examples
(1-slice instances 7 + start, 2-slice 3 + start / 2, 4-slice 1 + start / 4, the whole GPU 0): the
real driver's choice varies. A new instance takes the highest free start when it spans more than
one memory slice and the lowest otherwise, which reproduces the guide's examples.
"""

from __future__ import annotations

import json
import os

EXIT_INVALID_ARGUMENT = 2
EXIT_NOT_SUPPORTED = 3
EXIT_NO_DEVICE = 6
EXIT_INSUFFICIENT_RESOURCES = 15
EXIT_OTHER = 255

# id, name suffix, SM slices, memory slices, max instances, placements (memory-slice starts)
SEVEN_EIGHT = (
    (19, "1g.{1}gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    (20, "1g.{1}gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    (15, "1g.{2}gb", 1, 2, 4, (0, 2, 4, 6)),
    (14, "2g.{2}gb", 2, 2, 3, (0, 2, 4)),
    (9, "3g.{4}gb", 3, 4, 2, (0, 4)),
    (5, "4g.{4}gb", 4, 4, 1, (0,)),
    (0, "7g.{8}gb", 7, 8, 1, (0,)),
)
# Per simulated model: the GB in the names by memory slices, the GiB -lgip prints and the SMs by profile
# (1g/2g/7g SMs of the H200 capture, 3g of the guide's H100 80GB HBM3 table; the others, and the GiB of
# profiles no capture shows, estimated), copy engines, decoders.
MODELS = {
    "H100-SXM": {
        "gb": {1: 10, 2: 20, 4: 40, 8: 80},
        "gib": {1: 9.75, 2: 19.62, 4: 39.50, 8: 79.25},
        "sm": {1: 16, 2: 32, 3: 60, 4: 64, 7: 132},
    },
    "H200-SXM": {
        "gb": {1: 18, 2: 35, 4: 71, 8: 141},
        "gib": {1: 16.00, 2: 32.50, 4: 65.25, 8: 140.00},
        "sm": {1: 16, 2: 32, 3: 60, 4: 64, 7: 132},
    },
    "A100-SXM4-80GB": {
        "gb": {1: 10, 2: 20, 4: 40, 8: 80},
        "gib": {1: 9.50, 2: 19.50, 4: 39.25, 8: 79.25},
        "sm": {1: 14, 2: 28, 3: 42, 4: 56, 7: 98},
    },
}
# NVML compute instance profile ids (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE), as -lcip lists them.
COMPUTE_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
COMPUTE_SIZES = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}

MODE_PATH = "/var/lib/gpuops-lab/mig-mode.json"
INSTANCES_PATH = "/run/gpuops-lab/mig/instances.json"
PROCESSES_PATH = "/run/gpuops-lab/processes.json"
FAULTS_PATH = "/etc/gpuops-lab/faults.json"
PROC = "/run/gpuops-lab/proc/driver"
DEV_CAPS = "/run/gpuops-lab/dev/nvidia-caps"


class MigError(Exception):
    """What nvidia-smi prints before exiting with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def lab_path(path: str) -> str:
    return os.environ.get("GPUOPS_LAB_ROOT", "") + path


def _read(path: str, default):
    try:
        with open(lab_path(path), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def _write(path: str, data) -> None:
    full = lab_path(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)


def _write_text(path: str, text: str) -> None:
    full = lab_path(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)


def profiles(model_name: str) -> list[dict]:
    """The GPU instance profiles of a simulated model, in -lgip order; empty for a GPU without MIG."""
    model = MODELS.get(model_name)
    if model is None:
        return []
    found = []
    for profile_id, pattern, compute, memory, most, placements in SEVEN_EIGHT:
        name = pattern.replace("{%d}" % memory, str(model["gb"][memory]))
        found.append(
            {
                "id": profile_id,
                "name": name,
                "compute": compute,
                "memory": memory,
                "max": most,
                "placements": placements,
                "gib": model["gib"][memory],
                "sm": model["sm"][compute],
            }
        )
    return found


def engines(profile: dict) -> dict:
    """A GPU instance profile's engines, as the H100 PCIe -lgip capture lists them: a copy engine and a decoder
    (and JPEG) per compute slice, 8 copy engines and 7 decoders at 7g, an OFA at 7g and in +me profiles."""
    decoders = profile["compute"] if profile["compute"] < 7 else 7
    return {
        "copy_engines": 8 if profile["compute"] == 7 else profile["compute"],
        "decoders": decoders,
        "jpeg": decoders,
        "ofa": 1 if profile["name"].endswith("+me") or profile["compute"] == 7 else 0,
    }


def processes(gpu: dict) -> list[dict]:
    """The compute processes the lab says run on ``gpu`` (``processes.json``)."""
    return list(_read(PROCESSES_PATH, {}).get(str(gpu["slot"]), []))


def capable(gpu: dict) -> bool:
    return gpu["model_name"] in MODELS


# --- mode ---------------------------------------------------------------------------------------------------


def mode(gpu: dict) -> dict:
    """``{"current": bool, "pending": bool}``, or None for a GPU without MIG."""
    if not capable(gpu):
        return None
    return _read(MODE_PATH, {}).get(str(gpu["slot"]), {"current": False, "pending": False})


def set_mode(gpus: list[dict], enable: bool) -> str:
    """``nvidia-smi -i N -mig 0|1``: the new mode is pending until a GPU reset or the driver's next load."""
    modes = _read(MODE_PATH, {})
    lines = []
    instances = _read(INSTANCES_PATH, {})
    for gpu in gpus:
        if not capable(gpu):
            raise MigError(
                f"Unable to {'enable' if enable else 'disable'} MIG Mode for GPU {gpu['bus_id']}: Not Supported",
                EXIT_NOT_SUPPORTED,
            )
        if not enable and instances.get(str(gpu["slot"])):
            raise MigError(
                f"Unable to disable MIG Mode for GPU {gpu['bus_id']}: In use by another client", EXIT_INVALID_ARGUMENT
            )
        state = modes.get(str(gpu["slot"]), {"current": False, "pending": False})
        state["pending"] = enable
        modes[str(gpu["slot"])] = state
        word = "enable" if enable else "disable"
        if state["current"] == enable:
            lines.append(f"{'Enabled' if enable else 'Disabled'} MIG Mode for GPU {gpu['bus_id']}")
        else:
            # The guide's output where the GPU cannot be reset right away (the lab never resets on its own).
            lines.append(f"Warning: MIG mode is in pending {word} state for GPU {gpu['bus_id']}:Not Supported")
            lines.append(
                f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU {gpu['bus_id']}"
            )
    _write(MODE_PATH, modes)
    return "\n".join([*lines, "All done."]) + "\n"


def reset(gpus: list[dict]) -> str:
    """``nvidia-smi -r -i N``: the pending mode takes effect; the GPU's instances are gone.

    Refused for a GPU that runs a process (``processes.json``) or cannot be reset on its own
    (``faults.json`` ``reset_unsupported``); the messages are the lab's wording, after the driver's.
    """
    modes = _read(MODE_PATH, {})
    instances = _read(INSTANCES_PATH, {})
    unsupported = {int(slot) for slot in _read(FAULTS_PATH, {}).get("reset_unsupported", [])}
    for gpu in gpus:
        if gpu["slot"] in unsupported:
            raise MigError(f"Resetting GPU {gpu['bus_id']} is not supported.", EXIT_NOT_SUPPORTED)
        if processes(gpu):
            raise MigError(
                f"GPU {gpu['bus_id']} is currently in use by another process.\n\n1 device is currently being used "
                "by one or more other processes. Please first kill all processes using this device and all compute "
                "applications running in the system.",
                EXIT_OTHER,
            )
    lines = []
    for gpu in gpus:
        key = str(gpu["slot"])
        if key in modes:
            modes[key]["current"] = modes[key]["pending"]
        instances.pop(key, None)
        lines.append(f"GPU {gpu['bus_id']} was successfully reset.")
    _write(MODE_PATH, modes)
    _write(INSTANCES_PATH, instances)
    _write_caps(instances)
    return "\n".join([*lines, "All done."]) + "\n"


def on_module_load() -> None:
    """The driver loads (boot, reload): every pending mode takes effect, no instance exists."""
    modes = _read(MODE_PATH, {})
    for state in modes.values():
        state["current"] = state["pending"]
    if modes:
        _write(MODE_PATH, modes)
    _write(INSTANCES_PATH, {})
    _write_caps({})


# --- capabilities -----------------------------------------------------------------------------------------


def gi_minor(gpu_minor: int, gi: int) -> int:
    return 3 + gpu_minor * 135 + gi * 9


def mig_minors() -> str:
    lines = ["config 1", "monitor 2"]
    for gpu in range(32):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            lines.extend(f"gpu{gpu}/gi{gi}/ci{ci}/access {gi_minor(gpu, gi) + 1 + ci}" for ci in range(8))
    return "\n".join(lines) + "\n"


def _capability(minor: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def _write_caps(instances: dict) -> None:
    """The capability files of every instance that exists (all others removed)."""
    import shutil  # noqa: PLC0415 - only when the state changes

    for path in (f"{PROC}/nvidia/capabilities", DEV_CAPS):
        shutil.rmtree(lab_path(path), ignore_errors=True)
    _write_text(f"{PROC}/nvidia-caps/mig-minors", mig_minors())
    _write_text(f"{PROC}/nvidia/capabilities/mig/config", _capability(1).replace("292", "256"))
    _write_text(f"{PROC}/nvidia/capabilities/mig/monitor", _capability(2))
    for slot, gis in instances.items():
        gpu_minor = int(slot)  # the lab's minor_number is the GPU's slot
        for gi in gis:
            base = f"{PROC}/nvidia/capabilities/gpu{gpu_minor}/mig/gi{gi['id']}"
            minor = gi_minor(gpu_minor, gi["id"])
            _write_text(f"{base}/access", _capability(minor))
            _write_text(f"{DEV_CAPS}/nvidia-cap{minor}", "")
            for ci in gi["cis"]:
                _write_text(f"{base}/ci{ci['id']}/access", _capability(minor + 1 + ci["id"]))
                _write_text(f"{DEV_CAPS}/nvidia-cap{minor + 1 + ci['id']}", "")


# --- instances ------------------------------------------------------------------------------------------------


def _enabled(gpus: list[dict]) -> list[dict]:
    chosen = [gpu for gpu in gpus if (mode(gpu) or {}).get("current")]
    if not chosen:
        raise MigError("No MIG-enabled devices found.", EXIT_NO_DEVICE)
    return chosen


def _gi_id(memory: int, start: int) -> int:
    return {1: 7 + start, 2: 3 + start // 2, 4: 1 + start // 4, 8: 0}[memory]


def _profile(gpu: dict, token: str) -> dict:
    for profile in profiles(gpu["model_name"]):
        if token.strip() in (str(profile["id"]), profile["name"], "MIG " + profile["name"]):
            return profile
    raise MigError(
        f"Unable to create a GPU instance on GPU {gpu['index']:2d} using profile {token}: Invalid Argument",
        EXIT_INVALID_ARGUMENT,
    )


def _by_name(gpu: dict) -> dict:
    return {profile["name"]: profile for profile in profiles(gpu["model_name"])}


def create_gpu_instances(gpus: list[dict], tokens: str, default_ci: bool) -> str:
    instances = _read(INSTANCES_PATH, {})
    lines = []
    failed = None
    for gpu in _enabled(gpus):
        existing = instances.setdefault(str(gpu["slot"]), [])
        by_name = _by_name(gpu)
        for token in tokens.split(","):
            profile = _profile(gpu, token)
            used = 0
            for gi in existing:
                used |= ((1 << by_name[gi["profile"]]["memory"]) - 1) << gi["start"]
            compute = sum(by_name[gi["profile"]]["compute"] for gi in existing)
            count = sum(1 for gi in existing if gi["profile"] == profile["name"])
            starts = sorted(profile["placements"], reverse=profile["memory"] > 1)
            free = [s for s in starts if not used & (((1 << profile["memory"]) - 1) << s)]
            if not free or count >= profile["max"] or compute + profile["compute"] > 7:
                lines.append(
                    f"Unable to create a GPU instance on GPU {gpu['index']:2d} using profile {profile['id']}: "
                    "Insufficient Resources"
                )
                failed = "Failed to create GPU instances: Insufficient Resources"
                break
            gi = {"id": _gi_id(profile["memory"], free[0]), "profile": profile["name"], "start": free[0], "cis": []}
            existing.append(gi)
            lines.append(
                f"Successfully created GPU instance ID {gi['id']:2d} on GPU {gpu['index']:2d} using profile "
                f"MIG {profile['name']} (ID {profile['id']:2d})"
            )
            if default_ci:
                gi["cis"].append({"id": 0, "compute": profile["compute"], "start": 0})
                ci_profile = COMPUTE_PROFILE_IDS[profile["compute"]]
                lines.append(
                    f"Successfully created compute instance ID  0 on GPU {gpu['index']:2d} GPU instance ID "
                    f"{gi['id']:2d} using profile MIG {profile['name']} (ID {ci_profile:2d})"
                )
        if failed:
            break
    _write(INSTANCES_PATH, instances)
    _write_caps(instances)
    if failed:
        raise MigError("\n".join([*lines, failed]), EXIT_INSUFFICIENT_RESOURCES)
    return "\n".join(lines) + "\n"


def _gis(gpu: dict, instances: dict, gi_ids: str | None) -> list[dict]:
    existing = instances.get(str(gpu["slot"]), [])
    if gi_ids is None:
        return list(existing)
    wanted = {int(item) for item in gi_ids.split(",")}
    chosen = [gi for gi in existing if gi["id"] in wanted]
    if len(chosen) != len(wanted):
        raise MigError(f"Unable to find GPU instance(s) {gi_ids} on GPU {gpu['index']:2d}: Not Found", EXIT_NO_DEVICE)
    return chosen


def _ci_name(gpu: dict, gi: dict, compute: int) -> str:
    slices = _by_name(gpu)[gi["profile"]]["compute"]
    return gi["profile"] if compute == slices else f"{compute}c.{gi['profile']}"


def create_compute_instances(gpus: list[dict], ids: str | None, gi_ids: str | None) -> str:
    instances = _read(INSTANCES_PATH, {})
    lines = []
    for gpu in _enabled(gpus):
        for gi in _gis(gpu, instances, gi_ids):
            slices = _by_name(gpu)[gi["profile"]]["compute"]
            sizes = {COMPUTE_PROFILE_IDS[size]: size for size in COMPUTE_SIZES[slices]}
            for token in (ids or str(COMPUTE_PROFILE_IDS[slices])).split(","):
                size = sizes.get(int(token))
                taken = [ci["start"] + offset for ci in gi["cis"] for offset in range(ci["compute"])]
                start = next(
                    (s for s in range(0, slices, size or 1) if not set(range(s, s + (size or 1))) & set(taken)), None
                )
                if size is None or start is None or start + size > slices:
                    raise MigError(
                        "\n".join(
                            [
                                *lines,
                                f"Unable to create a compute instance on GPU {gpu['index']:2d} GPU instance ID "
                                f"{gi['id']:2d} using profile {token}: Insufficient Resources",
                            ]
                        ),
                        EXIT_INSUFFICIENT_RESOURCES,
                    )
                ci_id = min(set(range(8)) - {ci["id"] for ci in gi["cis"]})
                gi["cis"].append({"id": ci_id, "compute": size, "start": start})
                lines.append(
                    f"Successfully created compute instance ID {ci_id:2d} on GPU {gpu['index']:2d} GPU instance ID "
                    f"{gi['id']:2d} using profile MIG {_ci_name(gpu, gi, size)} (ID {int(token):2d})"
                )
    _write(INSTANCES_PATH, instances)
    _write_caps(instances)
    return "\n".join(lines) + "\n"


def destroy_compute_instances(gpus: list[dict], gi_ids: str | None, ci_ids: str | None) -> str:
    instances = _read(INSTANCES_PATH, {})
    lines = []
    for gpu in _enabled(gpus):
        for gi in _gis(gpu, instances, gi_ids):
            wanted = None if ci_ids is None else {int(item) for item in ci_ids.split(",")}
            for ci in sorted(gi["cis"], key=lambda item: item["id"]):
                if wanted is None or ci["id"] in wanted:
                    gi["cis"].remove(ci)
                    lines.append(
                        f"Successfully destroyed compute instance ID {ci['id']:2d} from GPU {gpu['index']:2d} "
                        f"GPU instance ID {gi['id']:2d}"
                    )
    _write(INSTANCES_PATH, instances)
    _write_caps(instances)
    if not lines:
        raise MigError("No compute instances found: Not Found", EXIT_NO_DEVICE)
    return "\n".join(lines) + "\n"


def destroy_gpu_instances(gpus: list[dict], gi_ids: str | None) -> str:
    instances = _read(INSTANCES_PATH, {})
    lines = []
    for gpu in _enabled(gpus):
        for gi in sorted(_gis(gpu, instances, gi_ids), key=lambda item: item["id"]):
            if gi["cis"]:
                # The guide: a GPU instance holding compute instances cannot be destroyed.
                raise MigError(
                    "\n".join(
                        [
                            *lines,
                            f"Unable to destroy GPU instance ID {gi['id']:2d} from GPU {gpu['index']:2d}: "
                            "In use by another client",
                        ]
                    ),
                    EXIT_INVALID_ARGUMENT,
                )
            instances[str(gpu["slot"])].remove(gi)
            lines.append(f"Successfully destroyed GPU instance ID {gi['id']:2d} from GPU {gpu['index']:2d}")
    _write(INSTANCES_PATH, instances)
    _write_caps(instances)
    if not lines:
        raise MigError("No GPU instances found: Not Found", EXIT_NO_DEVICE)
    return "\n".join(lines) + "\n"


# --- listings -------------------------------------------------------------------------------------------------


def list_profiles(gpus: list[dict]) -> str:
    """``nvidia-smi mig -lgip``, in the layout of the H100 PCIe capture (two lines per profile)."""
    chosen = _enabled(gpus)
    rule = "+" + "-" * 79 + "+"
    lines = [
        rule,
        "| GPU instance profiles:" + " " * 56 + "|",
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                                Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * 79 + "|",
    ]
    instances = _read(INSTANCES_PATH, {})
    for gpu in chosen:
        existing = instances.get(str(gpu["slot"]), [])
        for profile in profiles(gpu["model_name"]):
            free = _free_count(gpu, existing, profile)
            ce, dec, ofa = (engines(profile)[key] for key in ("copy_engines", "decoders", "ofa"))
            counts = f"{free}/{profile['max']}"
            lines.append(
                f"|{gpu['index']:>4}  MIG {profile['name']:<16}{profile['id']:>2}{counts:>8}{'':8}"
                f"{profile['gib']:<11.2f}No     {profile['sm']:<7}{dec:<6}{0:<4}|"
            )
            lines.append(f"|{'':62}{ce:>2}{'':5}{dec:<6}{ofa:<4}|")
            lines.append(rule)
    return "\n".join(lines) + "\n"


def _free_count(gpu: dict, existing: list[dict], profile: dict) -> int:
    """How many more instances of ``profile`` fit beside ``existing`` (placement by placement)."""
    by_name = _by_name(gpu)
    used = 0
    for gi in existing:
        used |= ((1 << by_name[gi["profile"]]["memory"]) - 1) << gi["start"]
    compute_left = 7 - sum(by_name[gi["profile"]]["compute"] for gi in existing)
    count = sum(1 for gi in existing if gi["profile"] == profile["name"])
    fits = 0
    for start in profile["placements"]:
        mask = ((1 << profile["memory"]) - 1) << start
        if not used & mask and compute_left >= profile["compute"] and count + fits < profile["max"]:
            used |= mask
            compute_left -= profile["compute"]
            fits += 1
    return fits


def list_placements(gpus: list[dict]) -> str:
    """``nvidia-smi mig -lgipp``."""
    lines = []
    for gpu in _enabled(gpus):
        for profile in profiles(gpu["model_name"]):
            starts = ",".join(str(start) for start in profile["placements"])
            label = "Placements:" if len(profile["placements"]) > 1 else "Placement :"
            lines.append(
                f"GPU {gpu['index']:2d} Profile ID {profile['id']:2d} {label} {{{starts}}}:{profile['memory']}"
            )
    return "\n".join(lines) + "\n"


def list_gpu_instances(gpus: list[dict]) -> str:
    """``nvidia-smi mig -lgi``, in the layout of the A100-PCIE-40GB capture."""
    chosen = _enabled(gpus)
    instances = _read(INSTANCES_PATH, {})
    rule = "+" + "-" * 55 + "+"
    rows = []
    for gpu in chosen:
        by_name = _by_name(gpu)
        # smallest profile first, then by id, as the guide's listings show them
        existing = instances.get(str(gpu["slot"]), [])
        for gi in sorted(existing, key=lambda gi: (by_name[gi["profile"]]["memory"], gi["id"])):
            profile = by_name[gi["profile"]]
            rows += [
                f"|{gpu['index']:>4}  MIG {gi['profile']:<16}{profile['id']:>2}{gi['id']:>9}{gi['start']:>11}:"
                f"{profile['memory']:<6}|",
                rule,
            ]
    if not rows:
        raise MigError("No GPU instances found: Not Found", EXIT_NO_DEVICE)
    header = [
        rule,
        "| GPU instances:" + " " * 40 + "|",
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
        "|" + "=" * 55 + "|",
    ]
    return "\n".join(header + rows) + "\n"


def list_compute_instances(gpus: list[dict], gi_ids: str | None) -> str:
    """``nvidia-smi mig -lci``, with the Placement column of the A100-PCIE-40GB capture."""
    chosen = _enabled(gpus)
    instances = _read(INSTANCES_PATH, {})
    rule = "+" + "-" * 68 + "+"
    rows = []
    for gpu in chosen:
        for gi in sorted(_gis(gpu, instances, gi_ids), key=lambda item: item["id"]):
            for ci in sorted(gi["cis"], key=lambda item: item["id"]):
                name = _ci_name(gpu, gi, ci["compute"])
                rows += [
                    f"|{gpu['index']:>4}{gi['id']:>7}       MIG {name:<16}{COMPUTE_PROFILE_IDS[ci['compute']]:>2}"
                    f"{ci['id']:>10}{ci['start']:>11}:{ci['compute']:<6}|",
                    rule,
                ]
    if not rows:
        raise MigError("No compute instances found: Not Found", EXIT_NO_DEVICE)
    header = [
        rule,
        "| Compute instances:" + " " * 49 + "|",
        "| GPU     GPU       Name             Profile   Instance   Placement  |",
        "|       Instance                       ID        ID       Start:Size |",
        "|         ID                                                         |",
        "|" + "=" * 68 + "|",
    ]
    return "\n".join(header + rows) + "\n"


def devices(gpu: dict) -> list[dict]:
    """The MIG devices (compute instances) of a GPU, in -L order: ``[{"gi", "ci", "name", "sm", "memory_mib",
    "copy_engines", "decoders", "jpeg", "ofa"}]`` (the SMs are the compute instance's, the engines and the memory
    its GPU instance's, which -q -x lists under ``<mig_device>``)."""
    found = []
    by_name = _by_name(gpu)
    for gi in sorted(_read(INSTANCES_PATH, {}).get(str(gpu["slot"]), []), key=lambda item: item["start"]):
        profile = by_name[gi["profile"]]
        for ci in sorted(gi["cis"], key=lambda item: item["id"]):
            found.append(
                {
                    "gi": gi["id"],
                    "ci": ci["id"],
                    "name": _ci_name(gpu, gi, ci["compute"]),
                    "sm": MODELS[gpu["model_name"]]["sm"][ci["compute"]],
                    "memory_mib": round(profile["gib"] * 1024),
                    **engines(profile),
                }
            )
    return found


def main(gpus: list[dict], argv: list[str]) -> str:
    """``nvidia-smi mig <argv>`` (``gpus``: those ``-i`` selected, each with ``model_name``)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="nvidia-smi mig", add_help=False)
    for flag in ("-lgip", "-lgipp", "-lgi", "-lci", "-dgi", "-dci", "-C"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("-cgi")
    parser.add_argument("-cci", nargs="?", const="")
    parser.add_argument("-gi")
    parser.add_argument("-ci")
    parser.add_argument("-i")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        raise MigError(
            f"Invalid combination of input arguments: mig {' '.join(argv)} (gpuops lab simulator)",
            EXIT_INVALID_ARGUMENT,
        )
    if args.cgi:
        return create_gpu_instances(gpus, args.cgi, args.C)
    if args.cci is not None:
        return create_compute_instances(gpus, args.cci or None, args.gi)
    if args.dci:
        return destroy_compute_instances(gpus, args.gi, args.ci)
    if args.dgi:
        return destroy_gpu_instances(gpus, args.gi)
    if args.lgipp:
        return list_placements(gpus)
    if args.lgip:
        return list_profiles(gpus)
    if args.lgi:
        return list_gpu_instances(gpus)
    if args.lci:
        return list_compute_instances(gpus, args.gi)
    raise MigError(
        f"Invalid combination of input arguments: mig {' '.join(argv)} (gpuops lab simulator)", EXIT_INVALID_ARGUMENT
    )
