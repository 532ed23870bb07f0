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


def load_known_variables(root: Path = COLLECTION_ROOT) -> dict[str, set[str]]:
    """Return ``{prefix: known names}`` for ``gpuops_`` and every role of the collection."""
    registry = yaml.safe_load((root / REGISTRY_PATH).read_text(encoding="utf-8")) or {}
    known = {COLLECTION_PREFIX: set(registry.get("gpuops_variables", {})) | {"gpuops_variables"}}
    for spec_path in sorted((root / "roles").glob("*/meta/argument_specs.yml")):
        role = spec_path.parents[1].name
        spec = yaml.safe_load(spec_path.read_text(encoding="utf-8")) or {}
        names: set[str] = set()
        for entry_point in (spec.get("argument_specs") or {}).values():
            names.update((entry_point or {}).get("options") or {})
        known[f"{role}_"] = names
    for fact in registry.get("role_facts") or []:
        prefix = next((p for p in sorted(known, key=len, reverse=True) if fact.startswith(p)), None)
        if prefix is not None:
            known[prefix].add(fact)
    return known


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
        close = difflib.get_close_matches(name, every_known, n=1, cutoff=0.75)
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
