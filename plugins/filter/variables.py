"""Filters about the collection's inventory variables."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry


def unknown_variables(names, known=None):
    """Return ``[{name, suggestion, message}]`` for probable typos among ``names``."""
    try:
        if known is None:
            known_sets = variable_registry.load_known_variables()
        else:
            known_sets = {prefix: set(values) for prefix, values in dict(known).items()}
        problems = variable_registry.unknown_variables(list(names), known_sets)
    except (OSError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpuops.cluster.unknown_variables: {exc}") from exc
    return [dict(problem, message=variable_registry.describe(problem)) for problem in problems]


class FilterModule:
    """gpuops.cluster variable filters."""

    def filters(self):
        return {"unknown_variables": unknown_variables}
