"""Which inventory variables the collection knows, and which look like typos.

Known names come from two places: the collection-wide registry
``playbooks/vars/gpuops_variables.yml`` (``gpuops_*``) and each role's
``meta/argument_specs.yml`` (``<role>_*``). A variable that carries a managed
prefix but is in neither is reported with the closest known name, so
``gpuops_stak`` says "did you mean gpuops_stack".
"""

from __future__ import annotations

import difflib
from pathlib import Path

try:  # Controller-side only (filters); ansible-core always brings PyYAML there.
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

COLLECTION_ROOT = Path(__file__).resolve().parents[2]
REGISTRY_PATH = Path("playbooks") / "vars" / "gpuops_variables.yml"
COLLECTION_PREFIX = "gpuops_"


SPEC_KEYS = ("type", "elements", "choices", "min", "format")
# A role whose variables were aliases of collection variables (rolling_upgrade_max_job_wait for
# gpuops_upgrade_max_job_wait, gone since the role reads its settings in one value): such a name suggests
# the collection variable.
ALIAS_PREFIXES = {"rolling_upgrade_": "gpuops_upgrade_"}


_PARSED: dict = {}


def _read_yaml(path: Path) -> dict:
    """The file's YAML, parsed once per process and file version: validation reads it for every host.

    Callers must not change what it returns.
    """
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _PARSED:
        _PARSED[key] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return _PARSED[key]


def _role_options(root: Path) -> dict[str, dict[str, dict]]:
    """``{role: {option: spec}}`` from every role's ``meta/argument_specs.yml`` (all entry points)."""
    roles = {}
    for spec_path in sorted((root / "roles").glob("*/meta/argument_specs.yml")):
        options: dict[str, dict] = {}
        for entry_point in (_read_yaml(spec_path).get("argument_specs") or {}).values():
            options.update((entry_point or {}).get("options") or {})
        roles[spec_path.parents[1].name] = options
    return roles


def load_known_variables(root: Path = COLLECTION_ROOT) -> dict[str, set[str]]:
    """Return ``{prefix: known names}`` for ``gpuops_`` and every role of the collection."""
    registry = _read_yaml(root / REGISTRY_PATH)
    known = {COLLECTION_PREFIX: set(registry.get("gpuops_variables", {})) | {"gpuops_variables"}}
    for role, options in _role_options(root).items():
        known[f"{role}_"] = set(options)
    for fact in registry.get("role_facts") or []:
        prefix = next((p for p in sorted(known, key=len, reverse=True) if fact.startswith(p)), None)
        if prefix is not None:
            known[prefix].add(fact)
    return known


def load_specs(root: Path = COLLECTION_ROOT) -> dict[str, dict]:
    """Return ``{name: {type, elements, choices, min, format}}`` for every variable the collection knows.

    Role variables take type, elements and choices from their argument spec and min/format from the
    registry's ``role_variable_rules``; ``gpuops_*`` variables take all of them from the registry.
    """
    registry = _read_yaml(root / REGISTRY_PATH)
    specs = {}
    for options in _role_options(root).values():
        for name, option in options.items():
            specs[name] = {key: option[key] for key in SPEC_KEYS if key in (option or {})}
    for name, rules in (registry.get("role_variable_rules") or {}).items():
        if name not in specs:
            raise ValueError(f"{REGISTRY_PATH}: role_variable_rules names {name}, which no role's argument spec has")
        specs[name].update(rules)
    for name, entry in (registry.get("gpuops_variables") or {}).items():
        specs[name] = {key: entry[key] for key in SPEC_KEYS if key in (entry or {})}
    return specs


def unknown_variables(names, known: dict[str, set[str]]) -> list[dict[str, str | None]]:
    """Return ``[{name, suggestion}]`` for each managed-prefix name not in ``known``.

    ``names`` is any iterable of variable names (what the host has defined).
    A name is managed when it starts with one of the prefixes of ``known``;
    the longest matching prefix decides which list it is checked against.
    """
    prefixes = sorted(known, key=len, reverse=True)
    every_known = sorted(set().union(*known.values())) if known else []
    problems = []
    for name in sorted(set(names)):
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None or name in known[prefix]:
            continue
        alias = next(
            (
                collection + name[len(role) :]
                for role, collection in ALIAS_PREFIXES.items()
                if name.startswith(role) and collection + name[len(role) :] in known.get(COLLECTION_PREFIX, ())
            ),
            None,
        )
        close = [alias] if alias else difflib.get_close_matches(name, every_known, n=1, cutoff=0.75)
        problems.append({"name": name, "suggestion": close[0] if close else None})
    return problems


def describe(problem: dict[str, str | None]) -> str:
    """One line an operator can act on."""
    if problem["suggestion"]:
        return f"unknown variable {problem['name']}: did you mean {problem['suggestion']}?"
    return (
        f"unknown variable {problem['name']}: not a variable of gpuops.cluster"
        " (see playbooks/vars/gpuops_variables.yml and the roles' meta/argument_specs.yml)"
    )
