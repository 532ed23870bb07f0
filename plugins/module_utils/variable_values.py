# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check the values an inventory gives the collection's variables, on the controller.

The rules are not written here a second time: ``type``, ``elements`` and
``choices`` come from each role's ``meta/argument_specs.yml`` and from the
registry ``playbooks/vars/gpuops_variables.yml`` (see
``variable_registry.load_specs``); the registry adds ``min`` (least whole
number) and ``format`` (one of :data:`FORMATS`, for what a type cannot say),
and each format reuses the parser the module on the host uses, so a value that
passes here is one the host accepts.

Values are converted with ansible-core's own type checkers (those that role
argument validation uses), and every problem is one sentence that names the
variable, shows the value as the operator wrote it, and says what to set.
"""

from __future__ import annotations

from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS
from ansible_collections.gpuops.cluster.plugins.module_utils.health import pcie_link, thresholds
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import kernel_lockstep
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import irq_affinity, kernel_cmdline, sysctl_profile

TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "str": "a string",
    "path": "a path",
}


def plain(value):
    """``value`` as builtin types: templated strings, lists and mappings lose their wrapper classes."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(item) for item in value]
    return str(value)


def show(value) -> str:
    """The value as an operator writes it in YAML or with -e (true, null, 'text'): never a Python class name."""
    value = plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (key, show(item)) for key, item in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(show(item) for item in value)
    return repr(value)


# ------------------------------------------------------------------ formats
def _cpulist(value, _values):
    try:
        irq_affinity.parse_cpulist(str(value))
    except ValueError:
        return "not a CPU list; write CPUs and ranges such as 0-3,8,10-11 (empty for none)"
    return None


def _kernel_arguments(value, _values):
    if isinstance(value, str):
        example = [part for part in value.replace(",", " ").split() if part] or ["iommu=pt"]
        return "a single string; give a list with one kernel argument per item, e.g. %s" % show(example)
    try:
        kernel_cmdline.validate_args(value)
    except kernel_cmdline.CmdlineError as exc:
        return str(exc)
    return None


def _counts_per_numa_node(value, _values):
    bad = [
        key
        for key, count in value.items()
        if not str(key).isdigit() or isinstance(count, bool) or not isinstance(count, int) or count < 0
    ]
    if bad:
        return "set NUMA node numbers to whole numbers of pages, at least 0, e.g. {0: 1024, 1: 1024}"
    return None


def _memlock_limit(value, _values):
    text = str(value).strip()
    if text == "unlimited" or (text.isdigit() and int(text) > 0):
        return None
    return "set unlimited or a number of kB greater than 0"


def _tcp_port(value, _values):
    return None if 1 <= int(value) <= 65535 else "set a TCP port, 1 to 65535"


def _absolute_path(value, _values):
    text = str(value)
    if text.startswith("/") and not any(char.isspace() for char in text):
        return None
    return "set an absolute path on the node, without spaces"


def _url_problem(url, values, allow_empty=True):
    text = str(url or "").strip()
    if not text:
        return None if allow_empty else "empty; set the https:// URL of the key the repository is signed with"
    if text.startswith("https://"):
        return None
    if text.startswith("http://"):
        if values.get("nvidia_stack_repo_allow_http") in (True, "true", "True", "yes"):
            return None
        return (
            "a plain http:// URL, which lets anyone on the path replace the repository or its key; "
            "use https:// (or set nvidia_stack_repo_allow_http: true for a mirror inside a trusted network)"
        )
    return "not an https:// URL"


def _kernel_request(value, _values):
    # Empty: leave the kernel where it is (the role's default when gpuops_kernel is unset).
    return None if str(value).strip() == "" else kernel_lockstep.request_problem(value)


def _repository_url(value, values):
    return _url_problem(value, values)


def _repositories(value, values):
    found = []
    for index, repository in enumerate(value):
        # Items are mappings: the spec's elements: dict is checked first.
        where = "item %d (%s)" % (index, repository.get("name") or "no name")
        for key in ("name", "url"):
            if not str(repository.get(key) or "").strip():
                found.append("%s has no %s" % (where, key))
        for key, allow_empty in (("url", True), ("key_url", False)):
            problem = _url_problem(repository.get(key), values, allow_empty=allow_empty)
            if problem:
                found.append("%s: %s is %s" % (where, key, problem))
    return "; ".join(found) or None


def _argv(value, _values):
    if value and not str(value[0]).startswith("/"):
        return (
            "give the command as a list whose first item is an absolute path, e.g. ['/usr/sbin/update-initramfs', '-u']"
        )
    return None


def _health_thresholds(value, _values):
    found = thresholds.problems(value)
    if found:
        return "%s; set only the thresholds of ansible-doc gpuops.cluster.gpu_health" % "; ".join(found)
    return None


def _pcie_baseline(value, _values):
    try:
        pcie_link.pcie_baseline_by_bus(value)
    except ValueError as exc:
        return "%s, e.g. {'0000:18:00.0': {width: 16, gen: 5}}" % str(exc).replace("pcie_baseline: ", "")
    found = []
    for bus, link in sorted(value.items()):
        unknown = sorted(set(link) - {"width", "gen"})
        if unknown:
            found.append("%s has %s; give only width and gen" % (bus, ", ".join(map(str, unknown))))
        for key in ("width", "gen"):
            number = link.get(key)
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
                found.append("%s %s is %s, not a whole number of at least 1 (or null)" % (bus, key, show(number)))
    return "; ".join(found) or None


def _sysctl_keys(sysctls, where=""):
    found = []
    for key in sysctls:
        problem = sysctl_profile.key_problem(key)
        if problem:
            found.append("%skey %s %s" % (where, show(key), problem))
    return found


def _sysctls(value, _values):
    found = _sysctl_keys(value)
    if found:
        return "%s; %s" % ("; ".join(found), sysctl_profile.KEY_RULE)
    return None


def _tuning_profiles(value, _values):
    found = []
    for name, profile in value.items():
        for field in ("sysctls", "rdma_sysctls"):
            sysctls = profile.get(field) if isinstance(profile, dict) else None
            if isinstance(sysctls, dict):
                found.extend(_sysctl_keys(sysctls, "%s.%s: " % (name, field)))
    if found:
        return "%s; %s" % ("; ".join(found), sysctl_profile.KEY_RULE)
    return None


def _removed(_value, _values):
    return "it was removed; unset it"


# A removed variable (registry format ``removed``) -> what replaced it and what to set instead.
REMOVED = {
    "gpuops_upgrade_waves": (
        "the rolling upgrade runs in a sliding window since 0.2.0, not in waves: set gpuops_upgrade_max_unavailable "
        "(a count or a percentage of the fleet, the most nodes out of service at once; each next node starts as soon "
        "as one is back), and gpuops_upgrade_barrier: true to keep waves of that size; then unset gpuops_upgrade_waves"
    ),
    "gpuops_upgrade_drain_timeout": (
        "replaced in 0.3.0 by gpuops_upgrade_max_job_wait (seconds): a busy node is drained only when "
        "its job ends within that wait, and returned to service (deferred) when its jobs outlast it; set "
        "gpuops_upgrade_max_job_wait instead"
    ),
}


# name -> check(value, values) returning a problem (without the variable's name) or None.
FORMATS = {
    "removed": _removed,
    "cpulist": _cpulist,
    "kernel_arguments": _kernel_arguments,
    "counts_per_numa_node": _counts_per_numa_node,
    "memlock_limit": _memlock_limit,
    "tcp_port": _tcp_port,
    "absolute_path": _absolute_path,
    "repository_url": _repository_url,
    "kernel_request": _kernel_request,
    "repositories": _repositories,
    "argv": _argv,
    "sysctls": _sysctls,
    "tuning_profiles": _tuning_profiles,
    "health_thresholds": _health_thresholds,
    "pcie_baseline": _pcie_baseline,
}


# ------------------------------------------------------------------ checks
def _convert(value, kind):
    """``(converted, ok)`` by ansible-core's checker for ``kind``; booleans are no numbers, and a list or a mapping
    is no string (ansible-core's checker would write it as one: ``['a']``)."""
    if kind in (None, "raw"):
        return value, True
    if kind in ("int", "float") and isinstance(value, bool):
        return value, False
    if kind in ("str", "path") and isinstance(value, (list, tuple, set, dict)):
        return value, False
    checker = DEFAULT_TYPE_VALIDATORS.get(kind)
    if checker is None:
        return value, True
    try:
        return checker(value), True
    except (TypeError, ValueError):
        return value, False


def converted(value, kind):
    """``value`` as ``kind`` says (``-e name=true`` is a string: true), by the checker :func:`check` uses; unchanged
    when it does not convert (the check reports it)."""
    return _convert(plain(value), kind)[0]


def check(name: str, value, spec: dict, values: dict | None = None) -> list[str]:
    """Every problem of one variable's value against its ``spec`` (type, elements, choices, min, format)."""
    values = values or {}
    value = plain(value)
    if value is None:
        return []
    if spec.get("format") == "removed":
        return ["%s was removed: %s" % (name, REMOVED.get(name, "unset it"))]
    kind = spec.get("type")
    converted, ok = _convert(value, kind)
    if not ok:
        return ["%s is %s; set %s" % (name, show(value), TYPE_WORDS.get(kind, kind))]
    items = converted if kind == "list" else [converted]
    elements = spec.get("elements") if kind == "list" else None
    if elements:
        checked = []
        for item in items:
            item_value, item_ok = _convert(item, elements)
            if not item_ok:
                return ["%s has the item %s; every item must be %s" % (name, show(item), TYPE_WORDS.get(elements))]
            checked.append(item_value)
        items = checked
        converted = checked
    choices = spec.get("choices")
    if choices:
        allowed = [plain(choice) for choice in choices]
        wrong = [item for item in items if item not in allowed]
        if wrong:
            listed = ", ".join(_word(choice) for choice in allowed)
            if kind == "list":
                return ["%s has %s; every item must be one of: %s" % (name, ", ".join(show(w) for w in wrong), listed)]
            return ["%s is %s; set one of: %s" % (name, show(value), listed)]
    least = spec.get("min")
    if least is not None:
        number, is_number = _convert(converted, "int")
        if not is_number or number < least:
            return ["%s is %s; set a whole number, at least %d" % (name, show(value), least)]
    rule = spec.get("format")
    if rule:
        # A list given as one string keeps its spaces: the rule needs to see the string.
        problem = FORMATS[rule](value if isinstance(value, str) and kind == "list" else converted, values)
        if problem:
            return ["%s is %s: %s" % (name, show(value), problem)]
    return []


def _word(choice) -> str:
    return str(choice).lower() if isinstance(choice, bool) else str(choice)


def problems(values: dict, specs: dict) -> list[str]:
    """Every problem of every variable in ``values`` that ``specs`` (name -> spec) knows, in name order."""
    found = []
    for name in sorted(values):
        if name in specs:
            found.extend(check(name, values[name], specs[name], values))
    return found
