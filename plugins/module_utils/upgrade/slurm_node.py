# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Slurm node as the rolling upgrade sees it: its state, its drain, and who owns the drain.

Reads ``sinfo --json`` (Slurm 22.05: ``nodes[].name``, ``state``, ``state_flags``,
``reason``, ``reason_set_by_user``, ``boot_time``; 23.02+ gives ``state`` as a list,
accepted too) and ``sinfo -N -h -O "NodeList:20,StateComplete:30,Reason:60"`` text.
Decides whether a drain is ours (the reason starts with our prefix, such as
``gpuops-upgrade[<run id>]: ``) and builds ``scontrol`` argv lists. No I/O here.
"""

from __future__ import annotations

import json
import re

# Base states in which jobs still run on the node (a drain waits for them).
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
DRAIN_FLAGS = frozenset({"drain", "draining", "drained"})
# Base states in which the node is out of service without a drain flag.
OUT_OF_SERVICE_STATES = frozenset({"down", "fail", "failing"})
TEXT_COLUMNS = (20, 30, 60)
TEXT_FORMAT = "NodeList:%d,StateComplete:%d,Reason:%d" % TEXT_COLUMNS
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")
_REASON_FORBIDDEN = re.compile(r"[\n\r\"]")


class SlurmParseError(ValueError):
    """sinfo output that cannot be read."""


def _node(name, base, flags, reason, reason_user=None, boot_time=None) -> dict:
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
    }


def parse_sinfo_json(text: str) -> dict[str, dict]:
    """``sinfo --json`` output to ``{name: node}``; see ``_node`` for the keys."""
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
        nodes[name] = _node(name, base, flags, entry.get("reason"), entry.get("reason_set_by_user"), boot_time)
    return nodes


def parse_sinfo_text(text: str) -> dict[str, dict]:
    """``sinfo -N -h -O "NodeList:20,StateComplete:30,Reason:60"`` to ``{name: node}``.

    Columns are fixed-width (the reason holds spaces). A node listed once per
    partition appears once. StateComplete is ``base+flag+flag`` (``idle+drain``).
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
