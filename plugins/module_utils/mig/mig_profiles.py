# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load ``matrix/mig_profiles.yml`` and answer what MIG profiles a GPU model can hold.

The file keys models by the GPU keys of ``matrix/nvidia_stack.yml``; a host's
``gpuops_gpu`` (a key or a product name) is resolved through the stack matrix, then,
where one key covers products of different memory sizes (``a100-sxm4``: 40GB and
80GB), by the product name. :func:`parse_device` splits a mig-parted MIG device name
(``1g.10gb``, ``1c.3g.40gb``, ``1g.10gb+me``) into its compute slices and the GPU
instance profile it lives in.
"""

from __future__ import annotations

import re
from pathlib import Path

DEFAULT_PROFILES_PATH = Path(__file__).resolve().parents[3] / "matrix" / "mig_profiles.yml"
SCHEMA_VERSION = 1
PROFILE_KEYS = ("name", "id", "compute", "memory", "max", "placements")
SET_KEYS = ("memory_gb", "geometry", "device_ids", "source", "profiles")
SET_OPTIONAL = ("device_ids_source", "ids_source")
GPU_MIG = ("false", "unlisted")
# mig-parted's MIG device name: [<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr] (go-nvlib pkg/nvlib/device/mig_profile.go).
_DEVICE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb((?:[+-][a-z][a-z0-9.]*(?:,[a-z][a-z0-9.]*)*)?)$")
_DEVICE_ID_RE = re.compile(r"^0x[0-9A-Fa-f]{8}(?::0x[0-9A-Fa-f]{8})?$")


class MigProfilesError(ValueError):
    """The profiles file cannot be read or does not follow its schema."""

    def __init__(self, errors, path=None):
        self.errors = list(errors)
        where = " %s" % path if path else ""
        super().__init__("MIG profiles file%s is invalid:\n  - %s" % (where, "\n  - ".join(self.errors)))


def _normalize(name):
    return re.sub(r"[\s_]+", "", str(name)).lower()


def device_id(text):
    """``0x233010DE`` (or with ``:0x<subsystem>``) as the primary device/vendor id ``0x233010de``, or None."""
    if not isinstance(text, str) or not _DEVICE_ID_RE.match(text):
        return None
    return text.split(":", 1)[0].lower()


def reported_device_id(text):
    """nvidia-smi's ``pci_device_id`` (``0x233010DE``) as :func:`device_id` gives it (``0x`` added where a reading
    lacks it), or None."""
    return device_id("0x" + text.lower().removeprefix("0x")) if isinstance(text, str) and text else None


def parse_device(name):
    """``{"gi": "3g.20gb", "compute": 1, "slices": 3}`` for ``1c.3g.20gb``; None when the name is malformed.

    ``gi`` is the GPU instance profile the device lives in (with its attributes: ``1g.10gb+me``),
    ``compute`` the compute instance's SM slices and ``slices`` the GPU instance's.
    """
    match = _DEVICE_RE.match(str(name))
    if not match:
        return None
    compute, slices, memory, attributes = match.groups()
    slices = int(slices)
    return {
        "gi": "%dg.%sgb%s" % (slices, memory, attributes),
        "compute": int(compute) if compute else slices,
        "slices": slices,
    }


def _schema_errors(data):
    errors = []
    if not isinstance(data, dict):
        return ["the file must be a mapping"]
    if data.get("schema_version") != SCHEMA_VERSION:
        errors.append("schema_version must be %d" % SCHEMA_VERSION)
    sources = data.get("sources") or {}
    geometries = data.get("geometries") or {}
    sets = data.get("profile_sets") or {}
    known_sources = set(sources) | {"unverified"}
    for name, entry in sets.items():
        where = "profile_sets.%s" % name
        missing = [key for key in SET_KEYS if key not in (entry or {})]
        unknown = [key for key in entry or {} if key not in SET_KEYS + SET_OPTIONAL]
        if missing or unknown:
            errors.append("%s: missing %s, unknown %s" % (where, missing, unknown))
            continue
        for key in ("source", "device_ids_source", "ids_source"):
            if key in entry and entry[key] not in known_sources:
                errors.append("%s.%s: %r is no id of sources" % (where, key, entry[key]))
        if entry["geometry"] not in geometries:
            errors.append("%s.geometry: %r is no geometry" % (where, entry["geometry"]))
            continue
        geometry = geometries[entry["geometry"]]
        bad_ids = [item for item in entry["device_ids"] if device_id(item) is None]
        if bad_ids:
            errors.append("%s.device_ids: %s are not 0xDDDDVVVV ids" % (where, bad_ids))
        seen = set()
        for profile in entry["profiles"]:
            if sorted(profile) != sorted(PROFILE_KEYS):
                errors.append("%s: profile %s needs exactly the keys %s" % (where, profile, list(PROFILE_KEYS)))
                continue
            parsed = parse_device(profile["name"])
            if parsed is None or parsed["compute"] != parsed["slices"] or parsed["slices"] != profile["compute"]:
                errors.append(
                    "%s: %s is no <g>g.<gb>gb name of %d SM slices" % (where, profile["name"], profile["compute"])
                )
            if profile["name"] in seen:
                errors.append("%s: %s listed twice" % (where, profile["name"]))
            seen.add(profile["name"])
            last = geometry["memory_slices"] - profile["memory"]
            if profile["compute"] > geometry["compute_slices"] or any(
                not 0 <= start <= last for start in profile["placements"]
            ):
                errors.append("%s: %s does not fit the %s geometry" % (where, profile["name"], entry["geometry"]))
    for key, entry in (data.get("gpus") or {}).items():
        where = "gpus.%s" % key
        if "profiles" in entry:
            targets = [entry["profiles"]]
        elif "products" in entry:
            targets = list(entry["products"].values())
        elif str(entry.get("mig")).lower() in GPU_MIG:
            targets = []
        else:
            errors.append("%s: give profiles, products or mig: false|unlisted" % where)
            continue
        errors.extend("%s: %r is no profile set" % (where, target) for target in targets if target not in sets)
    return errors


class MigProfiles:
    """A validated profiles file with the lookups validation and the planner need."""

    def __init__(self, data, path=None):
        errors = _schema_errors(data)
        if errors:
            raise MigProfilesError(errors, path)
        self.data = data
        self.path = path
        self.compute_instances = {int(k): list(v) for k, v in data.get("compute_instances", {}).items()}
        self.sets = {}
        for name, entry in data["profile_sets"].items():
            geometry = data["geometries"][entry["geometry"]]
            self.sets[name] = {
                "name": name,
                "memory_gb": entry["memory_gb"],
                "compute_slices": geometry["compute_slices"],
                "memory_slices": geometry["memory_slices"],
                "device_ids": {device_id(item) for item in entry["device_ids"]},
                "profiles": {profile["name"]: dict(profile) for profile in entry["profiles"]},
            }
        self.gpus = dict(data["gpus"])

    def model(self, key, product=None):
        """What the matrix GPU ``key`` (``product``: the name the operator gave) can hold.

        Returns ``{"key", "mig": "yes"|"no"|"unlisted"|"ambiguous", "set": profile set or None,
        "products": names to choose from when ambiguous}``.
        """
        entry = self.gpus.get(key)
        if entry is None:
            return {"key": key, "mig": "unlisted", "set": None, "products": []}
        if "profiles" in entry:
            return {"key": key, "mig": "yes", "set": self.sets[entry["profiles"]], "products": []}
        if "products" in entry:
            by_name = {_normalize(name): target for name, target in entry["products"].items()}
            target = by_name.get(_normalize(product)) if product is not None else None
            if target is None:
                return {"key": key, "mig": "ambiguous", "set": None, "products": sorted(entry["products"])}
            return {"key": key, "mig": "yes", "set": self.sets[target], "products": []}
        return {
            "key": key,
            "mig": "no" if str(entry["mig"]).lower() == "false" else "unlisted",
            "set": None,
            "products": [],
        }


def load_profiles(path=None):
    """Read and validate the profiles file; raise :class:`MigProfilesError` listing every problem."""
    import yaml  # noqa: PLC0415 - controller only

    profiles_path = Path(path) if path is not None else DEFAULT_PROFILES_PATH
    try:
        with open(profiles_path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise MigProfilesError(["cannot read the file: %s" % exc], profiles_path) from exc
    except yaml.YAMLError as exc:
        raise MigProfilesError(["not valid YAML: %s" % exc], profiles_path) from exc
    return MigProfiles(data, path=profiles_path)


_CACHE = {}


def default_profiles():
    """The shipped profiles file, loaded once per process."""
    if "default" not in _CACHE:
        _CACHE["default"] = load_profiles()
    return _CACHE["default"]
