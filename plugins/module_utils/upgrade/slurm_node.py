# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Slurm node as the rolling upgrade sees it: its state, its drain, and who owns the drain.

Reads every node's state from Slurm's JSON (:func:`parse_nodes_json`):

* ``scontrol show nodes --json`` (23.02 and later): one record per node under ``nodes``,
  ``state`` a list (``["MIXED", "DRAIN"]``), numbers such as ``boot_time`` wrapped as
  ``{"set": true, "infinite": false, "number": N}`` by the data_parser plugins v0.0.39+;
* ``sinfo --json`` of 22.05 (``openapi/v0.0.38``): one record per node under ``nodes``,
  ``state`` one word and ``state_flags`` a list, plain numbers;
* not ``sinfo --json`` of 23.02 and later: its records are sinfo's lines under ``sinfo``,
  nodes of one state grouped with ONE reason (24.11 put a node drained for a hardware
  ticket and one drained by us in one record, with the ticket as reason). It raises
  :class:`SlurmParseError` saying to use scontrol;

and ``sinfo -N -h -O "NodeList:20,StateComplete:30,Reason:60"`` text (no partitions nor
GPUs in it). The version comes from the output's ``meta`` (:func:`slurm_meta`), and every
error names it. Decides whether a drain is ours (the reason starts with our prefix, such
as ``gpuops-upgrade[<run id>]: ``) and builds ``scontrol`` argv lists.

For the sliding window (:mod:`window`), reads the running jobs and their end times
from ``squeue --json`` (:func:`parse_squeue_json`; the end is unknown for a job without a
time limit) or from ``squeue`` text (:func:`squeue_argv`, :func:`parse_squeue`), with Slurm
hostlists expanded by :func:`expand_hostlist`, and classifies the fleet (:func:`survey`).
No I/O here. The shapes were read from real output of Slurm 22.05 and 24.11
(``tests/fixtures/slurm/README.md``).
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
# The EndTime Slurm writes for a job without a time limit: its start plus one year (seen in the lab on 24.11, a job
# submitted without --time in a partition with MaxTime=INFINITE: EndTime 365 days after StartTime).
NO_LIMIT_SPAN = 365 * 86400
UNKNOWN_END_TIMES = frozenset({"", "n/a", "none", "unknown", "infinite", "unlimited"})
# What survey gives a node without GPU gres.
NO_GPUS = 0
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")
_REASON_FORBIDDEN = re.compile(r"[\n\r\"]")
# Base states of a node in Slurm's JSON; the other words of a state list are flags.
BASE_STATES = frozenset({"idle", "down", "allocated", "error", "mixed", "future", "unknown"})
# Job states in which a job holds its nodes (as SQUEUE_STATES); since 23.02 COMPLETING and
# CONFIGURING are flags in the job's state list (["RUNNING", "CONFIGURING"]).
HOLDING_JOB_STATES = frozenset({"running", "completing", "configuring"})
# data_parser versions read from a real Slurm's output (tests/fixtures/slurm/): v0.0.38 is
# 22.05's openapi plugin; v0.0.40 (23.11's) and v0.0.41 (24.05's) as Slurm 24.11 writes them.
TESTED_DATA_PARSERS = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42")
# How a Slurm client refuses --json it does not know (22.05: "scontrol: unrecognized option '--json'").
_JSON_UNKNOWN = re.compile(r"(unrecognized|unknown|invalid) option.*--json")


class SlurmParseError(ValueError):
    """Slurm output that cannot be read."""


def _node(
    name,
    base,
    flags,
    reason,
    reason_user=None,
    boot_time=None,
    partitions=None,
    gres=None,
    gpus=None,
    reservation=None,
) -> dict:
    base = (base or "unknown").lower()
    flags = sorted({flag.lower() for flag in flags if flag})
    drain = bool(DRAIN_FLAGS.intersection(flags)) or base in {"drained", "draining"}
    reason = reason if reason not in (None, "", "none", "(null)") else None
    # Slurm keeps the user of a reason it cleared (24.11: reason "" set by root): no reason, no user.
    reason_user = reason_user if reason else None
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
        "reservation": reservation,
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


def slurm_meta(data) -> dict:
    """The Slurm release and data_parser an output names in its ``meta``: ``{release, data_parser}``.

    22.05 writes ``meta.Slurm.release`` and ``meta.plugin.type`` (``openapi/v0.0.38``); 23.02
    and later ``meta.slurm.release`` (and ``meta.slurm.version``) and ``meta.plugin.data_parser``
    (``data_parser/v0.0.42``). Each is None when the output does not say.
    """
    meta = data.get("meta") if isinstance(data, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    slurm = meta.get("slurm") or meta.get("Slurm")
    slurm = slurm if isinstance(slurm, dict) else {}
    release = slurm.get("release")
    version = slurm.get("version")
    if not release and isinstance(version, dict) and str(version.get("major", "")).isdigit():
        release = "%s.%02d.%s" % (version["major"], int(version.get("minor") or 0), version.get("micro", 0))
    plugin = meta.get("plugin")
    plugin = plugin if isinstance(plugin, dict) else {}
    parser = plugin.get("data_parser") or plugin.get("type")
    parser = str(parser).rpartition("/")[2] if parser else None
    return {"release": str(release) if release else None, "data_parser": parser or None}


def describe(meta: dict) -> str:
    """``Slurm 24.11.5 (data_parser v0.0.42)`` for messages, or what the output did not say."""
    text = "Slurm %s" % meta["release"] if meta.get("release") else "a Slurm that names no version in meta"
    return "%s (data_parser %s)" % (text, meta["data_parser"]) if meta.get("data_parser") else text


def json_unsupported(err: str, out: str = "") -> bool:
    """Whether a Slurm client refused ``--json`` as an unknown option (``scontrol`` before 23.02)."""
    return bool(_JSON_UNKNOWN.search("%s\n%s" % (err or "", out or "")))


def _load(text: str, command: str):
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError("%s did not print JSON: %s" % (command, exc)) from exc
    if not isinstance(data, dict):
        raise SlurmParseError("%s printed JSON that is not an object" % command)
    return data, slurm_meta(data)


def _unreadable(command: str, meta: dict, what: str, data=None) -> SlurmParseError:
    said = ""
    errors = data.get("errors") if isinstance(data, dict) else None
    if isinstance(errors, list) and errors:
        first = errors[0]
        said = "; Slurm says: %s" % (
            (first.get("description") or first.get("error") or first) if isinstance(first, dict) else first
        )
    return SlurmParseError("cannot read %s output of %s: %s%s" % (command, describe(meta), what, said))


def _number(value, field: str, command: str, meta: dict):
    """N (22.05) or ``{"set": true, "infinite": false, "number": N}`` (23.02+) to N.

    None when the value is null, not set, or infinite (for a time: none, or never).
    """
    if value is None:
        return None
    if isinstance(value, dict) and "number" in value:
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value["number"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise _unreadable(command, meta, "%s is %r, not a number nor {set, infinite, number}" % (field, value))


def _words(value, field: str, command: str, meta: dict) -> list[str]:
    """A state as lower-case words: ``"mixed"`` (22.05) or ``["MIXED", "DRAIN"]`` (23.02+)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value.lower()] if value else []
    if isinstance(value, list) and all(isinstance(word, str) for word in value):
        return [word.lower() for word in value if word]
    raise _unreadable(command, meta, "%s is %r, not a word nor a list of words" % (field, value))


def _base_and_flags(words: list[str]) -> tuple[str, list[str]]:
    """The base state (the first word Slurm writes, a base state when one is listed) and the flags."""
    if not words:
        return "unknown", []
    if words[0] not in BASE_STATES:
        for index, word in enumerate(words):
            if word in BASE_STATES:
                return word, words[:index] + words[index + 1 :]
    return words[0], words[1:]


def _text(value):
    return value if isinstance(value, str) and value not in ("", "(null)", "N/A") else None


def _names(value, field: str, command: str, meta: dict) -> list[str]:
    """Node names from a list of names or hostlists, or one hostlist string."""
    items = value if isinstance(value, list) else [value]
    if not all(item is None or isinstance(item, str) for item in items):
        raise _unreadable(command, meta, "%s is %r, not host names" % (field, value))
    names = []
    for item in items:
        names.extend(expand_hostlist(item))
    return names


def _per_node_record(entry, command: str, meta: dict) -> dict:
    """One record of ``nodes``: 22.05's sinfo (``state`` + ``state_flags``) or 23.02+'s scontrol."""
    if not isinstance(entry, dict):
        raise _unreadable(command, meta, "a node record is %r, not an object" % (entry,))
    name = entry.get("name") or entry.get("hostname")
    if not name:
        raise _unreadable(command, meta, "a node has no name: %r" % (entry,))
    base, flags = _base_and_flags(_words(entry.get("state"), "state of %s" % name, command, meta))
    flags += _words(entry.get("state_flags"), "state_flags of %s" % name, command, meta)
    partitions = entry.get("partitions")
    gres = entry.get("gres")
    return _node(
        name,
        base,
        flags,
        entry.get("reason"),
        entry.get("reason_set_by_user"),
        _number(entry.get("boot_time"), "boot_time of %s" % name, command, meta),
        partitions=[str(part) for part in partitions] if isinstance(partitions, list) else [],
        gres=_text(gres),
        gpus=gpu_count(gres, entry.get("tres")),
        reservation=_text(entry.get("reservation")),
    )


def parse_nodes_json(text: str, command: str = "scontrol show nodes --json") -> dict:
    """Slurm's JSON about nodes to ``{"slurm": {release, data_parser}, "nodes": {name: node}}``.

    ``text`` is ``scontrol show nodes --json`` (23.02+) or ``sinfo --json`` of 22.05 (its records
    are per node too); ``command`` names it in errors. Each node is ``_node``'s record:
    ``state`` (the base state, lower case), ``state_flags`` (sorted, lower case), ``drain``,
    ``jobs_running``, ``drained``, ``reason``, ``reason_set_by_user``, ``boot_time`` (epoch
    seconds), ``partitions`` (``[]`` when in none), ``gres``, ``gpus`` (:func:`gpu_count`, None
    without GPU gres) and ``reservation`` (its name where the output gives it; 22.05 only has
    the ``reserved`` flag).
    Output it cannot read raises :class:`SlurmParseError` naming the Slurm version it says it is.
    """
    data, meta = _load(text, command)
    if isinstance(data.get("nodes"), list):
        nodes = {}
        for entry in data["nodes"]:
            node = _per_node_record(entry, command, meta)
            nodes[node["name"]] = node
    elif isinstance(data.get("sinfo"), list):
        # Seen in 24.11: node5 (drained for a hardware ticket) and node6 (drained by us) in one
        # record with node5's reason. A drain's owner cannot be told from that.
        raise _unreadable(
            command,
            meta,
            "its records are grouped as sinfo's lines (under 'sinfo', one reason for all the nodes of a "
            "line), so whose drain each node has cannot be told: read the nodes with scontrol show nodes --json",
        )
    else:
        raise _unreadable(
            command,
            meta,
            "no 'nodes' list (scontrol show nodes --json of 23.02+, sinfo --json of 22.05); keys: %s"
            % ", ".join(sorted(data)),
            data,
        )
    return {"slurm": meta, "nodes": nodes}


def parse_sinfo_json(text: str) -> dict[str, dict]:
    """``sinfo --json`` output of 22.05 to ``{name: node}`` (:func:`parse_nodes_json`'s ``nodes``).

    23.02+'s grouped records raise :class:`SlurmParseError` (callers fall back to the text).
    """
    return parse_nodes_json(text, "sinfo --json")["nodes"]


def scontrol_nodes_json_argv(scontrol: str) -> list[str]:
    """Every node, one record each (Slurm 23.02+; 22.05 refuses ``--json``: :func:`json_unsupported`)."""
    return [scontrol, "show", "nodes", "--json"]


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


# The reason slurmctld gives a node that registers with a boot time newer than it knew, when the reboot was not
# asked through Slurm (ReturnToService=1 keeps it down); set only when the node had no reason. Slurm's FAQ, "Why is
# a compute node down with the reason set to "Node unexpectedly rebooted"?" (slurm.schedmd.com/faq.html#reboot), and
# the string in slurmctld's node_mgr.c; seen in the lab on 24.11.
SLURM_REBOOT_REASON = "Node unexpectedly rebooted"


def in_service(node: dict) -> bool:
    """True when Slurm can schedule on the node again: responding, not down, not drained."""
    if node["state"] in UNREACHABLE_STATES or UNREACHABLE_FLAGS.intersection(node["state_flags"]):
        return False
    return node["state"] not in OUT_OF_SERVICE_STATES and not node["drain"]


def downed_for_our_reboot(node: dict) -> bool:
    """True for a node Slurm downed for a reboot it did not ask for: resumed by us before its slurmd registered."""
    return node["state"] in OUT_OF_SERVICE_STATES and (node.get("reason") or "").strip() == SLURM_REBOOT_REASON


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


def _job(job_id, nodes: list[str], end, state=("running",), holds_nodes=True) -> dict:
    return {"job_id": job_id, "state": list(state), "nodes": nodes, "end_time": end, "holds_nodes": holds_nodes}


def job_ends(jobs, now) -> dict[str, int | float | None]:
    """``{node: when its last job ends}`` from jobs (:func:`parse_squeue_json`'s ``jobs``).

    Only jobs that hold their nodes count (``holds_nodes``). The end is epoch seconds, or None
    when one of the node's jobs has no known end: then the node's end is unknown whatever its
    other jobs say. A job whose end is already past (over its time limit, or completing) still
    holds the node: its end is ``now``. Nodes without a job are not in the result.
    """
    ends: dict[str, int | float | None] = {}
    for job in jobs:
        if not job["holds_nodes"]:
            continue
        end = job["end_time"]
        if end is not None and now is not None and end < now:
            end = now
        for node in job["nodes"]:
            if node not in ends:
                ends[node] = end
            elif ends[node] is None or end is None:
                ends[node] = None
            else:
                ends[node] = max(ends[node], end)
    return ends


def parse_squeue(text: str, now) -> dict[str, int | float | None]:
    """``squeue`` output of :func:`squeue_argv` to ``{node: when its last job ends}`` (:func:`job_ends`).

    ``N/A``, ``NONE`` (a job without a time limit) and ``Unknown`` are unknown ends.
    """
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 3:
            raise SlurmParseError("cannot read squeue line %r (expected --format=%s)" % (line, SQUEUE_FORMAT))
        job_id, end, nodelist = fields
        jobs.append(_job(job_id, expand_hostlist(nodelist), _end_time(end, line)))
    return job_ends(jobs, now)


def squeue_json_argv(squeue: str) -> list[str]:
    """Every job as JSON (22.05 and later); the jobs holding nodes are picked by :func:`parse_squeue_json`.

    ``--all`` includes hidden partitions and partitions this user may not use.
    """
    return [squeue, "--all", "--json"]


def parse_squeue_json(text: str) -> dict:
    """``squeue --json`` to ``{"slurm": {release, data_parser}, "jobs": [job, ...]}``.

    Each job is ``{job_id, state, nodes, end_time, holds_nodes}``: ``state`` the lower-case
    words of its state (``["running"]``; 23.02+ lists flags such as ``completing`` after it),
    ``nodes`` its node list expanded (``[]`` while pending), ``holds_nodes`` whether it holds
    them (running, completing or configuring), ``end_time`` Slurm's EndTime in epoch seconds,
    or None when the end is unknown: no time limit (``time_limit`` null or infinite; Slurm then
    writes start + one year as the end), an end not set, infinite or 0.
    """
    command = "squeue --json"
    data, meta = _load(text, command)
    if not isinstance(data.get("jobs"), list):
        raise _unreadable(command, meta, "no 'jobs' list; keys: %s" % ", ".join(sorted(data)), data)
    jobs = []
    for entry in data["jobs"]:
        if not isinstance(entry, dict) or entry.get("job_id") is None:
            raise _unreadable(command, meta, "a job record has no job_id: %r" % (entry,))
        job_id = _number(entry["job_id"], "job_id", command, meta)
        what = "of job %s" % job_id
        state = _words(entry.get("job_state"), "job_state " + what, command, meta)
        end = _number(entry.get("end_time"), "end_time " + what, command, meta) or None
        if "time_limit" in entry and _number(entry["time_limit"], "time_limit " + what, command, meta) is None:
            end = None
        start = _number(entry.get("start_time"), "start_time " + what, command, meta) if "start_time" in entry else None
        if end and start and end - start >= NO_LIMIT_SPAN:
            end = None  # Slurm's end for a job without a time limit, whatever time_limit says in this read
        nodes = _names(entry.get("nodes"), "nodes " + what, command, meta)
        jobs.append(_job(job_id, nodes, end, state, bool(HOLDING_JOB_STATES.intersection(state))))
    return {"slurm": meta, "jobs": jobs}


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


def survey(nodes_info: dict, job_ends: dict, names, prefix: str, now=None) -> list[dict]:
    """The nodes ``names`` as the window planner reads them, in the order given, each once.

    ``nodes_info`` is :func:`parse_nodes_json`'s ``nodes``, ``job_ends`` :func:`job_ends`'s.
    Each node is ``{name, partitions, gpus, state, job_end}`` (the :mod:`window_input` fields
    Slurm knows; the caller adds ``domains``, ``canary`` and ``done``) and, for the report,
    ``gres`` (as Slurm has it), ``slurm_state`` (``idle+drain``), ``reason``, ``owner`` (of the drain: ``none``,
    ``ours`` or ``other``) and ``reservation`` (its name, where Slurm gives it). ``state`` is:

    * ``down``: Slurm cannot reach the machine (``not_responding``, ``unknown``, ``future``,
      powered down or powering up), whoever drained it; or it is ``down``/``fail``/``failing``
      by someone else (an operator, Slurm itself).
    * ``drained_by_others``: drained with a reason that is not ours.
    * ``busy``: a job holds the node (squeue lists one, or sinfo says ``allocated``,
      ``mixed`` or ``completing``); ``job_end`` is when its last job ends, None when unknown.
      A node sinfo shows busy that no job of the job read holds had its job end between the
      two reads (seen in the lab: a job ending as the window read the fleet): its end is
      ``now`` when given, not unknown, which would defer the node for the rest of the run.
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
                "gres": node.get("gres"),
                "state": state,
                "job_end": job_ends.get(name, now) if state == "busy" else None,
                "slurm_state": slurm_state(node),
                "reason": node.get("reason"),
                "owner": ownership(node, prefix),
                "reservation": node.get("reservation"),
            }
        )
    return fleet
