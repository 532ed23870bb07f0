# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Slurm node as the rolling upgrade sees it: its state, its drain, and who owns the drain.

Reads ``sinfo --json`` (Slurm 22.05: ``nodes[].name``, ``state``, ``state_flags``,
``reason``, ``reason_set_by_user``, ``boot_time``, ``partitions``, ``gres``, ``tres``;
23.02+ gives ``state`` as a list, accepted too) and
``sinfo -N -h -O "NodeList:20,StateComplete:30,Reason:60"`` text (no partitions nor
GPUs in it). Decides whether a drain is ours (the reason starts with our prefix, such
as ``gpuops-upgrade[<run id>]: ``) and builds ``scontrol`` argv lists.

For the sliding window (:mod:`window_plan`), reads the running jobs' end times from
``squeue`` (:func:`squeue_argv`, :func:`parse_squeue`, with Slurm hostlists expanded by
:func:`expand_hostlist`) and classifies the fleet (:func:`survey`). No I/O here.
"""

from __future__ import annotations

import itertools
import json
import re

# Base states in which jobs still run on the node (a drain waits for them).
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
DRAIN_FLAGS = frozenset({"drain", "draining", "drained"})
# Base states in which the node is out of service without a drain flag.
OUT_OF_SERVICE_STATES = frozenset({"down", "fail", "failing"})
TEXT_COLUMNS = (20, 30, 60)
TEXT_FORMAT = "NodeList:%d,StateComplete:%d,Reason:%d" % TEXT_COLUMNS
# Node states in which the machine cannot be upgraded now, whoever took it out (survey: ``down``).
UNREACHABLE_STATES = frozenset({"unknown", "future"})
UNREACHABLE_FLAGS = frozenset({"not_responding", "powered_down", "powering_down", "powering_up"})
# Job states in which a job holds its nodes (squeue -t); suspended jobs show in sinfo as allocated.
SQUEUE_STATES = "RUNNING,COMPLETING,CONFIGURING"
# squeue -o: job id, end time, node list; '|' is in no job id, time or host name.
SQUEUE_FORMAT = "%i|%e|%N"
# squeue's END_TIME when there is none: N/A (no end), NONE (no time limit), Unknown (INFINITE).
UNKNOWN_END_TIMES = frozenset({"", "n/a", "none", "unknown", "infinite", "unlimited"})
# What survey gives a node without GPU gres.
NO_GPUS = 0
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")
_REASON_FORBIDDEN = re.compile(r"[\n\r\"]")


class SlurmParseError(ValueError):
    """sinfo output that cannot be read."""


def _node(name, base, flags, reason, reason_user=None, boot_time=None, partitions=None, gres=None, gpus=None) -> dict:
    base = (base or "unknown").lower()
    flags = sorted({flag.lower() for flag in flags if flag})
    drain = bool(DRAIN_FLAGS.intersection(flags)) or base in {"drained", "draining"}
    reason = reason if reason not in (None, "", "none", "(null)") else None
    return {
        "name": name,
        "state": base,
        "state_flags": flags,
        "drain": drain,
        "jobs_running": base in BUSY_STATES,
        "drained": drain and base not in BUSY_STATES,
        "reason": reason,
        "reason_set_by_user": reason_user or None,
        "boot_time": boot_time or None,
        "partitions": partitions,
        "gres": gres,
        "gpus": gpus,
    }


def _split_outside(text: str, separator: str = ",", opening: str = "[(", closing: str = "])") -> list[str]:
    """``text`` split on ``separator`` where no bracket is open; unbalanced brackets raise."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
            if depth < 0:
                raise SlurmParseError("unbalanced brackets in %r" % (text,))
        elif char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise SlurmParseError("unbalanced brackets in %r" % (text,))
    parts.append(text[start:])
    return parts


def gpu_count(gres, tres=None) -> int | None:
    """The GPUs of a node from its ``gres`` (``gpu:4``, ``gpu:l40s:4``, ``gpu:h100:8(S:0-1)``,
    ``gpu:a100:4(S:0),gpu:v100:2(S:1),shard:8``): the sum over every ``gpu`` entry, typed or
    not (an entry without a count is one GPU). When ``gres`` names no GPU, the untyped
    ``gres/gpu=N`` of ``tres``. None when neither names a GPU. Never raises: a gres it
    cannot read counts as none (one odd node must not fail the read of every node).
    """
    total = None
    try:
        entries = _split_outside(gres.strip()) if isinstance(gres, str) and gres not in ("", "(null)", "N/A") else []
    except SlurmParseError:
        entries = []
    for entry in entries:
        parts = re.sub(r"\(.*\)$", "", entry.strip()).split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 and parts[-1].isdigit() else "1"
        total = (total or 0) + int(count)
    if total is None and isinstance(tres, str):
        match = re.search(r"(?:^|,)gres/gpu=(\d+)(?:,|$)", tres)
        if match:
            total = int(match.group(1))
    return total


def parse_sinfo_json(text: str) -> dict[str, dict]:
    """``sinfo --json`` output to ``{name: node}``; see ``_node`` for the keys.

    ``partitions`` is the node's list of partitions (``[]`` when it is in none), ``gres``
    its gres string, ``gpus`` its GPU count (:func:`gpu_count`, None when it has no GPU gres).
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError("sinfo --json did not print JSON: %s" % exc) from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise SlurmParseError("sinfo --json output has no 'nodes' list (Slurm 22.05 or later is needed)")
    nodes = {}
    for entry in data["nodes"]:
        name = entry.get("name") or entry.get("hostname")
        if not name:
            raise SlurmParseError("a node of sinfo --json has no name: %r" % (entry,))
        state = entry.get("state")
        flags = list(entry.get("state_flags") or [])
        if isinstance(state, list):  # 23.02+: ["IDLE", "DRAIN"]
            base = state[0] if state else "unknown"
            flags.extend(state[1:])
        else:
            base = state
        boot_time = entry.get("boot_time")
        if isinstance(boot_time, dict):  # 23.02+: {"set": true, "number": N}
            boot_time = boot_time.get("number") if boot_time.get("set", True) else None
        partitions = entry.get("partitions")
        gres = entry.get("gres")
        nodes[name] = _node(
            name,
            base,
            flags,
            entry.get("reason"),
            entry.get("reason_set_by_user"),
            boot_time,
            partitions=[str(part) for part in partitions] if isinstance(partitions, list) else [],
            gres=gres if isinstance(gres, str) and gres not in ("", "(null)") else None,
            gpus=gpu_count(gres, entry.get("tres")),
        )
    return nodes


def parse_sinfo_text(text: str) -> dict[str, dict]:
    """``sinfo -N -h -O "NodeList:20,StateComplete:30,Reason:60"`` to ``{name: node}``.

    Columns are fixed-width (the reason holds spaces). A node listed once per
    partition appears once. StateComplete is ``base+flag+flag`` (``idle+drain``).
    The text carries no partitions nor gres: ``partitions``, ``gres`` and ``gpus`` are None.
    """
    nodes = {}
    name_end = TEXT_COLUMNS[0]
    state_end = name_end + TEXT_COLUMNS[1]
    for line in text.splitlines():
        if not line.strip():
            continue
        name = line[:name_end].strip()
        state = line[name_end:state_end].strip()
        reason = line[state_end:].strip()
        if not name or not state:
            raise SlurmParseError("cannot read sinfo line %r (expected -O %s)" % (line, TEXT_FORMAT))
        parts = state.rstrip("*~#%$@^-!").split("+")
        nodes[name] = _node(name, parts[0], parts[1:], reason)
    return nodes


def reason_tag(prefix: str, run_id: str) -> str:
    """The start of every reason we set: ``prefix[run_id]: ``."""
    if not prefix or _REASON_FORBIDDEN.search(prefix) or "[" in prefix:
        raise ValueError("reason prefix %r must be non-empty, without '[', quotes or newlines" % (prefix,))
    if not run_id or not _RUN_ID.match(run_id):
        raise ValueError("run id %r may hold only letters, digits and . _ : -" % (run_id,))
    return "%s[%s]: " % (prefix, run_id)


def make_reason(prefix: str, run_id: str, message: str) -> str:
    """A full drain reason carrying our prefix and the run id."""
    message = " ".join(str(message).split())
    if _REASON_FORBIDDEN.search(message):
        raise ValueError("drain reason %r must not hold double quotes" % (message,))
    return reason_tag(prefix, run_id) + message


def reason_run_id(reason: str | None, prefix: str) -> str | None:
    """The run id of a reason we set, or None when the reason is not ours."""
    if not reason:
        return None
    match = re.match(r"^%s\[([^\]]*)\]: " % re.escape(prefix), reason)
    return match.group(1) if match else None


def ownership(node: dict, prefix: str) -> str:
    """Who owns the node's drain: ``none`` (not drained), ``ours`` or ``other``.

    A drain is ours only when its reason starts with ``prefix[...]: ``, from this
    run or an earlier aborted one. Anything else (an operator, a health check,
    Slurm itself marking a node down) belongs to someone else: keep it.
    """
    out_of_service = node["drain"] or node["state"] in OUT_OF_SERVICE_STATES
    if not out_of_service:
        return "none"
    if reason_run_id(node.get("reason"), prefix) is not None:
        return "ours"
    return "other"


def decide_drain(node: dict, prefix: str, reason: str) -> dict:
    """What ``state=drained`` does to ``node``: ``{action, ours, pre_existing}``.

    ``action`` is ``drain`` (set our drain), ``update_reason`` (our drain, another
    message), or ``none`` (already ours with that reason, or someone else's drain,
    which is never touched).
    """
    owner = ownership(node, prefix)
    if owner == "other":
        return {"action": "none", "ours": False, "pre_existing": True}
    if owner == "ours" and node["drain"]:
        action = "none" if node.get("reason") == reason else "update_reason"
        return {"action": action, "ours": True, "pre_existing": False}
    return {"action": "drain", "ours": True, "pre_existing": False}


def decide_resume(node: dict, prefix: str) -> dict:
    """What ``state=resumed`` does: resume only a drain (or a down node) whose reason is ours."""
    owner = ownership(node, prefix)
    if owner == "ours":
        return {"action": "resume", "ours": True, "pre_existing": False}
    if owner == "other":
        return {"action": "none", "ours": False, "pre_existing": True}
    return {"action": "none", "ours": False, "pre_existing": False}


def drain_argv(scontrol: str, node: str, reason: str) -> list[str]:
    """``scontrol update nodename=N state=drain reason=...`` as one argv (no shell, no quoting)."""
    return [scontrol, "update", "nodename=%s" % node, "state=drain", "reason=%s" % reason]


def resume_argv(scontrol: str, node: str) -> list[str]:
    return [scontrol, "update", "nodename=%s" % node, "state=resume"]


def sinfo_json_argv(sinfo: str) -> list[str]:
    # 22.05 ignores -n with --json: the caller picks the node from every node.
    return [sinfo, "--json"]


def sinfo_text_argv(sinfo: str, node: str) -> list[str]:
    return [sinfo, "-N", "-h", "-n", node, "-O", TEXT_FORMAT]


def _expand_host(expr: str) -> list[str]:
    """One host expression without top-level commas: ``gpu[01-03]``, ``rack[1-2]-node[1-4]``, ``login1``."""
    pieces = re.split(r"(\[[^\[\]]*\])", expr)
    choices = []
    for piece in pieces:
        if not (piece.startswith("[") and piece.endswith("]")):
            if "[" in piece or "]" in piece:
                raise SlurmParseError("hostlist %r: nested or unbalanced brackets" % (expr,))
            choices.append([piece])
            continue
        values = []
        for raw in piece[1:-1].split(","):
            item = raw.strip()
            low, dash, high = item.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                raise SlurmParseError("hostlist %r: %r is not a number or a range N-M" % (expr, item))
            if not dash:
                values.append(low)
                continue
            if int(high) < int(low):
                raise SlurmParseError("hostlist %r: range %s runs backwards" % (expr, item))
            # Slurm pads to the width of the lower bound: [01-10] gives 01..10, [8-10] gives 8, 9, 10.
            width = len(low)
            values.extend("%0*d" % (width, number) for number in range(int(low), int(high) + 1))
        choices.append(values)
    return ["".join(parts) for parts in itertools.product(*choices)]


def expand_hostlist(expr: str | None) -> list[str]:
    """A Slurm hostlist expression to the host names, in order, each once.

    ``gpu[1-3,5]`` gives gpu1, gpu2, gpu3, gpu5; ``gpu[01-03]`` keeps the zero padding;
    ``a1,b[2-3]`` lists several expressions (commas outside brackets separate them); a
    name may hold several bracket groups (``rack[1-2]-node[1-2]``: rack1-node1,
    rack1-node2, rack2-node1, rack2-node2). Empty, ``(null)`` or ``None`` give ``[]``.
    Malformed expressions raise :class:`SlurmParseError`.
    """
    if expr is None:
        return []
    expr = expr.strip()
    if expr in ("", "(null)", "None"):
        return []
    names = []
    for raw in _split_outside(expr, opening="[", closing="]"):
        part = raw.strip()
        if not part:
            raise SlurmParseError("hostlist %r: empty name between commas" % (expr,))
        names.extend(_expand_host(part))
    return list(dict.fromkeys(names))


def squeue_argv(squeue: str) -> list[str]:
    """``squeue`` listing every job that holds nodes, one line each: ``job id|end|node list``.

    Run it with ``SLURM_TIME_FORMAT=%s`` in its environment so that the end time prints as
    epoch seconds (without it Slurm prints local time without a zone). ``--all`` includes
    hidden partitions and partitions this user may not use.
    """
    return [squeue, "--all", "--noheader", "--states=" + SQUEUE_STATES, "--format=" + SQUEUE_FORMAT]


def _end_time(text: str, line: str) -> int | None:
    value = text.strip()
    if value.lower() in UNKNOWN_END_TIMES:
        return None
    if re.match(r"^-?\d+$", value):
        return int(value)
    raise SlurmParseError(
        "squeue printed the end time %r in %r, not epoch seconds: run squeue with SLURM_TIME_FORMAT=%%s in its "
        "environment (a wrapper or a profile script may override it)" % (value, line)
    )


def parse_squeue(text: str, now) -> dict[str, int | float | None]:
    """``squeue`` output of :func:`squeue_argv` to ``{node: when its last job ends}``.

    The end is epoch seconds, or None when one of the node's jobs has no known end
    (``N/A``, ``NONE`` for a job without a time limit, ``Unknown``): then the node's end is
    unknown whatever its other jobs say. A job whose end is already past (over its time
    limit, or completing) still holds the node: its end is ``now``. Nodes without a job are
    not in the result.
    """
    ends: dict[str, int | float | None] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 3:
            raise SlurmParseError("cannot read squeue line %r (expected --format=%s)" % (line, SQUEUE_FORMAT))
        _job, end, nodelist = fields
        end = _end_time(end, line)
        if end is not None and now is not None and end < now:
            end = now
        for node in expand_hostlist(nodelist):
            if node not in ends:
                ends[node] = end
            elif ends[node] is None or end is None:
                ends[node] = None
            else:
                ends[node] = max(ends[node], end)
    return ends


def unknown_nodes(nodes_info: dict, names) -> list[str]:
    """The names in ``names`` that sinfo does not list, in their order."""
    return [name for name in dict.fromkeys(names) if name not in nodes_info]


def slurm_state(node: dict) -> str:
    """A node's state as sinfo's StateComplete writes it: ``idle+drain``, ``down+not_responding``."""
    return "+".join([node["state"], *node["state_flags"]])


def survey_state(node: dict, has_job: bool, prefix: str) -> str:
    """The window planner's state of one sinfo node (see :func:`survey`)."""
    if node["state"] in UNREACHABLE_STATES or UNREACHABLE_FLAGS.intersection(node["state_flags"]):
        return "down"
    if ownership(node, prefix) == "other":
        return "down" if node["state"] in OUT_OF_SERVICE_STATES else "drained_by_others"
    if has_job or node["jobs_running"] or "completing" in node["state_flags"]:
        return "busy"
    return "idle"


def survey(nodes_info: dict, job_ends: dict, names, prefix: str) -> list[dict]:
    """The nodes ``names`` as the window planner reads them, in the order given, each once.

    ``nodes_info`` is :func:`parse_sinfo_json`'s result, ``job_ends`` :func:`parse_squeue`'s.
    Each node is ``{name, partitions, gpus, state, job_end}`` (the :mod:`window_plan` fields
    Slurm knows; the caller adds ``domains``, ``canary`` and ``done``) and, for the report,
    ``slurm_state`` (``idle+drain``), ``reason`` and ``owner`` (of the drain: ``none``,
    ``ours`` or ``other``). ``state`` is:

    * ``down``: Slurm cannot reach the machine (``not_responding``, ``unknown``, ``future``,
      powered down or powering up), whoever drained it; or it is ``down``/``fail``/``failing``
      by someone else (an operator, Slurm itself).
    * ``drained_by_others``: drained with a reason that is not ours.
    * ``busy``: a job holds the node (squeue lists one, or sinfo says ``allocated``,
      ``mixed`` or ``completing``); ``job_end`` is when its last job ends, None when unknown.
    * ``idle`` otherwise.

    A drain that is ours (``reason_run_id`` matches ``prefix``: left by an aborted earlier
    run, or ``down+drain`` after our reboot) does not take the node out of the fleet for
    the planner: the node is ``idle`` or ``busy`` like any node the run takes.
    ``gpus`` is the node's GPU gres count (:func:`gpu_count`); a node without GPU gres has
    ``0`` (:data:`NO_GPUS`): it takes a slot of the window but weighs nothing on a
    partition's GPU floor. Names sinfo does not list raise ``ValueError`` naming them
    (:func:`unknown_nodes` tells them beforehand).
    """
    missing = unknown_nodes(nodes_info, names)
    if missing:
        raise ValueError("node(s) %s not known to Slurm" % ", ".join(missing))
    fleet = []
    for name in dict.fromkeys(names):
        node = nodes_info[name]
        state = survey_state(node, name in job_ends, prefix)
        gpus = node.get("gpus")
        fleet.append(
            {
                "name": name,
                "partitions": list(node.get("partitions") or []),
                "gpus": NO_GPUS if gpus is None else gpus,
                "state": state,
                "job_end": job_ends.get(name) if state == "busy" else None,
                "slurm_state": slurm_state(node),
                "reason": node.get("reason"),
                "owner": ownership(node, prefix),
            }
        )
    return fleet
