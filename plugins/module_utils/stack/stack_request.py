# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape of an operator's NVIDIA stack request (``gpuops_stack``): its keys, and a switch read as YAML
writes it. Each problem is a violation of the resolution (:mod:`stack_resolver`), naming the fix.
"""

from __future__ import annotations

import difflib

REQUEST_KEYS = (
    "driver",
    "cuda",
    "nccl",
    "dcgm",
    "dcgm_exporter",
    "kernel_modules",
    "fabricmanager",
    "allow_minor_version_compat",
    "allow_eol_branch",
    "allow_unknown_release",
    "image_cuda",
    "allow_forward_compat",
    "container_toolkit",
)
# CUDA and NCCL on the host are optional: sites that ship them in container images install the driver,
# Fabric Manager and DCGM only, and name the images' CUDA in image_cuda (image_cuda.py).
REQUIRED_KEYS = ("driver",)


def _kind(value):
    """What an operator wrote, in YAML words (never a Python class name)."""
    if isinstance(value, str):
        return "the string %r" % str.__str__(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    return "%r" % (value,) if isinstance(value, (bool, int, float)) else "a value of another kind"


def as_bool(value, name, res):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    res.violate("request.malformed", "%s must be true or false, got %r" % (name, value))
    return None


def check_request(request, res):
    if request is None:
        request = {}
    if not isinstance(request, dict):
        res.violate(
            "request.malformed",
            'the stack request must be a mapping such as {driver: "550", cuda: "12.4"}, got %s' % _kind(request),
        )
        return None
    for key in sorted(request, key=str):
        if key not in REQUEST_KEYS:
            close = difflib.get_close_matches(str(key), REQUEST_KEYS, n=1)
            hint = ": did you mean '%s'?" % close[0] if close else ""
            res.violate(
                "request.unknown_key",
                "unknown key '%s' in the stack request%s (known keys: %s)" % (key, hint, ", ".join(REQUEST_KEYS)),
            )
    for key in REQUIRED_KEYS:
        if request.get(key) in (None, ""):
            res.violate(
                "request.missing_key",
                'the stack request needs \'%s\' (for example driver: "580", with cuda: "13.0" for the toolkit on '
                'the host, or image_cuda: ["12.8", "13.0"] for CUDA in container images)' % key,
            )
    return request
