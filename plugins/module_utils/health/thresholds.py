# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The limits of the health checks (the ``thresholds`` option): one table, and what is derived from it.

``TABLE`` names every threshold with its type and default. From it come the evaluator's
defaults (``DEFAULTS``, merged with the operator's values by :func:`limits`), the module's
argument spec (:func:`argument_spec`) and the keys the node-side command accepts. The module's
DOCUMENTATION is a literal (``ansible-doc`` reads it without running Python); a unit test and
``ansible-test sanity`` keep it equal to this table.

The rate and repeat thresholds (``rate_thresholds``) belong to :mod:`error_rates`.
Thresholds follow the team reference page shared/reference/nvidia-stack-facts.md ("Health signals").
"""

from __future__ import annotations

# (name, type, default): a None default is decided per GPU, as the comment says.
TABLE = (
    ("temperature_warn", "int", 85),
    ("temperature_fail", "int", None),  # the GPU's own slowdown threshold, else 90
    ("ecc_volatile_uncorrectable", "int", 0),
    ("ecc_aggregate_uncorrectable", "int", 0),
    ("ecc_volatile_correctable", "int", 10000),
    ("row_remap_uncorrectable", "int", 8),
    ("retired_pages", "int", 62),
    ("nvlink_errors", "int", 0),
    ("ib_counter_errors", "int", 0),
    ("nccl_busbw_gbps", "float", None),  # by GPU model, see NCCL_BUSBW_GBPS
)
DEFAULTS = {name: default for name, _kind, default in TABLE}
# Single-node all_reduce bus bandwidth at 16 GB messages (Azure's health checks): the default of
# nccl_busbw_gbps for the first model named in the GPUs' product names.
NCCL_BUSBW_GBPS = (("H200", 431.0), ("H100", 460.0), ("A100", 228.0))


def argument_spec():
    """The suboptions of the module's ``thresholds`` option."""
    spec = {}
    for name, kind, default in TABLE:
        spec[name] = {"type": kind} if default is None else {"type": kind, "default": default}
    return spec


def problems(values) -> list[str]:
    """Why each of ``values`` (``{threshold: value}``) is not one the table accepts: an unknown name, or a value
    that is not a number of the threshold's type (an int, or for a ``float`` threshold an int or a float; None
    keeps the default). Empty when every value is good."""
    kinds = {name: kind for name, kind, _default in TABLE}
    found = []
    for name, value in sorted((values or {}).items()):
        if name not in kinds:
            found.append("unknown %s (known: %s)" % (name, ", ".join(sorted(kinds))))
            continue
        if value is None:
            continue
        allowed = (int, float) if kinds[name] == "float" else (int,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            found.append("%s is %r, not a%s" % (name, value, " number" if kinds[name] == "float" else "n integer"))
        elif value < 0:
            found.append("%s is %r: a limit is 0 or more" % (name, value))
    return found


def limits(overrides):
    """``DEFAULTS`` with every value of ``overrides`` that is not None over it."""
    merged = dict(DEFAULTS)
    merged.update({key: value for key, value in (overrides or {}).items() if value is not None})
    return merged


def nccl_busbw_minimum(gpus, configured=None):
    """The bus bandwidth (GB/s) all_reduce must reach: ``configured``, else by the GPUs' model, else None."""
    if configured is not None:
        return configured
    models = " ".join(gpu.get("product_name") or "" for gpu in gpus).upper()
    return next((value for model, value in NCCL_BUSBW_GBPS if model in models), None)
