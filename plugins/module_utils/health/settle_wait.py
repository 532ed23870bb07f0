# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate's bounded wait after a reboot: what must come up before the node is judged. Pure.

After a reboot Fabric Manager starts, the NVLink fabric trains (``nvidia-smi -q -x``: ``<fabric><state>``
``Not Started``, ``In Progress``, then ``Completed`` with ``<status>Success</status>`` on Hopper and later;
``N/A`` where the GPU has no fabric), the NVLinks come up, and the InfiniBand ports train (``Polling`` to
``LinkUp``, ``INIT`` to ``ACTIVE`` once the subnet manager has swept). A gate that judges in the first seconds
fails a good node. :class:`SettleWait` decides, from what each poll read, what is still coming up, which reads
the next poll needs (at most one ``nvidia-smi`` a poll), and when to stop: once nothing is pending, or when the
bound runs out, naming what did not come up (``Fabric Manager not active after 300 s``). The module does the
reading and the sleeping (``plugins/modules/gpu_health.py``, option ``settle_timeout``).

Conditions, in the order they come up and are named:

``fabricmanager``
    ``systemctl is-active nvidia-fabricmanager`` says ``active``, on a node with NVSwitches or whose GPUs report
    a fabric (the rule of the ``fabricmanager`` check). ``failed`` ends the wait: a failed unit does not come
    back by itself, the fabric does not train without it, and the ``fabricmanager`` check judges it at once.
``fabric``
    every GPU that reports a fabric has its state ``Completed`` (the ``fabric`` check judges the status).
``nvlink``
    every GPU has the NVLinks its model (or ``expected_nvlinks``, or the node's NVSwitches) needs active in
    ``nvidia-smi nvlink -s``; read once the fabric is done, so a poll runs one ``nvidia-smi``.
``infiniband``
    every port of ``expected_ib_ports`` is ``ACTIVE`` and ``LinkUp``, and at least ``expected_ib_port_count``
    InfiniBand ports are.

A node where nothing applies (PCIe GPUs, no NVSwitch, no InfiniBand port expected) settles at the first poll.
When ``nvidia-smi -q -x`` itself fails, the wait stops: the ``nvidia_smi`` check judges that at once (a driver
and library mismatch does not heal by waiting).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import node_verdict, nvlink_counts

CHECKS = ("settle",)
CONDITIONS = ("fabricmanager", "fabric", "nvlink", "infiniband")
POLL_INTERVAL = 5  # s between two polls: a fabric takes tens of seconds to train, a poll costs one nvidia-smi
# What is named when a condition is not up, and the action the node needs then.
NOT_UP = {
    "fabricmanager": ("Fabric Manager not active", "reboot_node"),
    "fabric": ("NVLink fabric not Completed", "reboot_node"),
    "nvlink": ("NVLinks not up", "reset_gpu"),
    "infiniband": ("InfiniBand ports not up", "hardware_inspection"),
}
UP = {
    "fabricmanager": "Fabric Manager active",
    "fabric": "fabric Completed",
    "nvlink": "NVLinks up",
    "infiniband": "InfiniBand ports up",
}
_ACTION_RANK = ("none", "restart_application", "reset_gpu", "reboot_node", "hardware_inspection")


def _gpu_list(indexes):
    return "GPU " + ", ".join(str(index) for index in indexes)


def fabric_pending(smi):
    """What of the fabric is still training in ``nvidia_smi_xml.parse`` output, or None.

    ``(reported, detail)``: ``reported`` whether any GPU reports a fabric; ``detail`` names the states of the
    GPUs not ``Completed`` yet (None when every reporting GPU is done).
    """
    training = {}
    reported = False
    for gpu in (smi or {}).get("gpus") or []:
        state = (gpu.get("fabric") or {}).get("state")
        if state is None:
            continue
        reported = True
        if state.strip().lower() != "completed":
            training.setdefault(state.strip(), []).append(gpu["index"])
    if not training:
        return reported, None
    return reported, "; ".join("%s on %s" % (state, _gpu_list(indexes)) for state, indexes in sorted(training.items()))


def nvlink_expectations(smi, nvswitch=None, override=None):
    """``{gpu index: links}`` for the GPUs that need NVLinks (``-1``: some, count unknown); empty when none do
    (one GPU alone without NVSwitch needs none: ``nvlink_counts.node_expected_links``)."""
    expected = nvlink_counts.node_expected_links((smi or {}).get("gpus") or [], nvswitch, override)
    return {index: want["links"] for index, want in expected.items() if want["links"]}


def nvlink_pending(status, expected):
    """The GPUs of ``expected`` short of active links in ``nvlink.parse_status`` output, or None when all are up."""
    entries = {entry["index"]: entry for entry in (status or {}).get("gpus") or []}
    short = []
    for index in sorted(expected):
        want = expected[index]
        links = (entries.get(index) or {}).get("links") or []
        active = sum(1 for link in links if link["active"])
        if (want > 0 and active < want) or (want < 0 and active == 0):
            short.append("GPU %d %d of %s active" % (index, active, want if want > 0 else "some"))
    return ", ".join(short) or None


def infiniband_pending(ib, expected_ports=(), expected_count=None):
    """The expected InfiniBand ports not ``ACTIVE``/``LinkUp`` in ``infiniband.read_ports`` output, or None."""
    ports = (ib or {}).get("ports") or []
    by_name = {port["name"]: port for port in ports}

    def up(port):
        return (port.get("state") or "").upper() == "ACTIVE" and (port.get("phys_state") or "").lower() == "linkup"

    problems = []
    for name in expected_ports or ():
        if ":" in name:
            wanted = [(name, by_name.get(name))]
        else:
            wanted = [(port["name"], port) for port in ports if port["device"] == name] or [(name + ":1", None)]
        for port_name, port in wanted:
            if port is None:
                problems.append("%s not found" % port_name)
            elif not up(port):
                problems.append("%s %s/%s" % (port_name, port.get("state"), port.get("phys_state")))
    if expected_count:
        infiniband = [port for port in ports if (port.get("link_layer") or "InfiniBand").lower() == "infiniband"]
        count = sum(1 for port in infiniband if up(port))
        if count < expected_count:
            problems.append("%d of %d ports up" % (count, expected_count))
    return ", ".join(problems) or None


class SettleWait:
    """The wait of one gate: ``timeout`` seconds from ``started`` (a monotonic clock's reading).

    Each poll, the module calls :meth:`next_poll` (which ``nvidia-smi`` to run: ``"smi"`` for ``-q -x``,
    ``"nvlink"`` for ``nvlink -s``, or None) and the matching ``saw_*``, then ``saw_fabricmanager`` and
    ``saw_infiniband`` when :meth:`wants` them, then :meth:`done`; it sleeps :meth:`pause` between polls and ends
    with :meth:`check` (the ``settle`` check) and :meth:`facts`. Each condition is ``unknown`` (not read yet),
    ``pending`` (read, not up), ``up`` or ``none`` (does not apply to this node, or its check is in ``skip``:
    a check the operator skips is not waited for).
    """

    def __init__(self, timeout, started, expected_nvlinks=None, expected_ib_ports=(), expected_ib_port_count=None,
                 skip=(), interval=POLL_INTERVAL):  # fmt: skip
        if timeout < 0:
            raise ValueError("settle_timeout must be 0 or more seconds, got %r" % timeout)
        self.timeout = timeout
        self.started = started
        self.interval = interval
        self.expected_nvlinks = expected_nvlinks
        self.expected_ib_ports = list(expected_ib_ports or ())
        self.expected_ib_port_count = expected_ib_port_count
        self.state = dict.fromkeys(CONDITIONS, "unknown")
        self.detail = {}
        self.up_after = {}
        self.polls = 0
        self.stopped = None
        self.links = {}
        self.smi_seen = False
        if not self.expected_ib_ports and not expected_ib_port_count:
            self.state["infiniband"] = "none"
        self.skip = set(skip or ()) & set(CONDITIONS)  # a check the operator skips is not waited for
        for name in self.skip:
            self.state[name] = "none"

    # --- what the next poll reads -------------------------------------------------------------------
    def next_poll(self):
        """Start a poll: its one ``nvidia-smi`` call, ``smi`` (``-q -x``), ``nvlink`` (``nvlink -s``) or None."""
        self.polls += 1
        if self.stopped:
            return None
        if not self.smi_seen or self.state["fabric"] in ("unknown", "pending"):
            return "smi"
        if self.state["nvlink"] in ("unknown", "pending"):
            return "nvlink"
        return None

    def wants(self, name):
        """Whether this poll reads ``fabricmanager`` (once the GPUs say it applies) or ``infiniband``."""
        if self.stopped:
            return False
        if name == "fabricmanager" and not self.smi_seen:
            return False
        return self.state[name] in ("unknown", "pending")

    # --- what a poll saw ----------------------------------------------------------------------------
    def _set(self, name, up, detail, now):
        if up:
            self.state[name] = "up"
            self.up_after.setdefault(name, max(0.0, now - self.started))
            self.detail.pop(name, None)
        else:
            self.state[name] = "pending"
            self.detail[name] = detail

    def saw_smi(self, smi, now, nvswitch=None, error=None):
        """``nvidia-smi -q -x`` parsed (None when it failed, ``error`` saying how); ``nvswitch``: NVSwitch devices."""
        if smi is None or not smi.get("gpus"):
            self.stopped = "nvidia-smi -q -x gave no GPU (%s)" % (error or "no output")
            return
        self.smi_seen = True
        reported, training = fabric_pending(smi)
        if self.state["fabricmanager"] == "unknown" and not (nvswitch or reported):
            self.state["fabricmanager"] = "none"
        if "fabric" in self.skip:
            pass
        elif reported:
            self._set("fabric", training is None, training, now)
        else:
            self.state["fabric"] = "none"
        if self.state["nvlink"] == "unknown" and not self.links:
            self.links = nvlink_expectations(smi, nvswitch, self.expected_nvlinks)
            if not self.links:
                self.state["nvlink"] = "none"

    def saw_nvlink(self, status, now, error=None):
        """``nvidia-smi nvlink -s`` parsed (None when it failed, ``error`` saying how)."""
        if status is None:
            self._set("nvlink", False, "nvidia-smi nvlink -s failed: %s" % (error or "no output"), now)
            return
        short = nvlink_pending(status, self.links)
        self._set("nvlink", short is None, short, now)

    def saw_fabricmanager(self, state, now, error=None):
        """What ``systemctl is-active nvidia-fabricmanager`` printed (None: not readable, ``error`` saying why).

        ``failed`` (or no state at all) stops the wait: a failed unit does not come back by itself, the fabric
        does not train without it, and the ``fabricmanager`` check judges it at once.
        """
        if state is None:
            self.stopped = "Fabric Manager state not readable (%s)" % (error or "no output")
        elif state == "failed":
            self.stopped = "nvidia-fabricmanager failed"
        else:
            self._set("fabricmanager", state == "active", state, now)

    def saw_infiniband(self, ib, now):
        """``infiniband.read_ports`` output."""
        problems = infiniband_pending(ib, self.expected_ib_ports, self.expected_ib_port_count)
        self._set("infiniband", problems is None, problems, now)

    # --- when to stop -------------------------------------------------------------------------------
    def pending(self):
        """The conditions not up yet (``unknown`` or ``pending``)."""
        return [name for name in CONDITIONS if self.state[name] in ("unknown", "pending")]

    def expired(self, now):
        return now - self.started >= self.timeout

    def done(self, now):
        """Whether to stop polling: stopped early, nothing pending, or the bound ran out."""
        return bool(self.stopped) or not self.pending() or self.expired(now)

    def pause(self, now):
        """Seconds to sleep before the next poll: the interval, never past the bound."""
        return max(0.0, min(self.interval, self.started + self.timeout - now))

    # --- the verdict ----------------------------------------------------------------------------------
    def check(self, now):
        """The ``settle`` check: fails naming what did not come up within the bound."""
        waited = round(max(0.0, now - self.started))
        if self.stopped:
            return _check("warn", "stopped waiting after %d s: %s; judged at once" % (waited, self.stopped))
        pending = self.pending()
        if pending:
            named, action = [], "none"
            for name in pending:
                what, needs = NOT_UP[name]
                if self.state[name] == "pending":
                    named.append("%s after %d s (%s)" % (what, self.timeout, self.detail[name]))
                    action = max(action, needs, key=_ACTION_RANK.index)
            unread = [UP[name].split()[0] for name in pending if self.state[name] == "unknown"]
            if unread:
                named.append("%s not read (they come up after the fabric)" % ", ".join(unread))
            return _check("fail", "; ".join(named), action)
        came_up = [
            "%s after %d s" % (UP[name], round(self.up_after[name])) for name in CONDITIONS if name in self.up_after
        ]
        if not came_up:
            return _check("pass", "nothing to wait for (no NVSwitch, fabric, NVLink or expected InfiniBand port)")
        return _check("pass", "settled in %d s: %s" % (waited, ", ".join(came_up)))

    def facts(self, now):
        """What the wait did, for the module's result: bound, seconds waited, polls, each condition."""
        return {
            "timeout": self.timeout,
            "waited_s": round(max(0.0, now - self.started), 1),
            "polls": self.polls,
            "settled": not self.pending() and not self.stopped,
            "stopped": self.stopped,
            "conditions": {
                name: {
                    "state": self.state[name],
                    "detail": self.detail.get(name),
                    "up_after_s": self.up_after.get(name),
                }
                for name in CONDITIONS
            },
        }


def with_settle(verdict, check, gpus=()):
    """``verdict`` with the ``settle`` check first (and its line first among the failures), totals recomputed.

    First, because what did not come up explains the failures that follow from it (a fabric not trained fails
    every GPU's ``fabric`` check), and a gate's message names the first failures.
    """
    result = node_verdict.with_checks(verdict, [check], gpus)
    checks = result["checks"]
    result["checks"] = checks[-1:] + checks[:-1]
    failed = result["summary"]["failed"]
    if check["status"] == "fail":
        result["summary"] = dict(result["summary"], failed=failed[-1:] + failed[:-1])
    return result


def _check(status, detail, action="none"):
    return {
        "name": "settle",
        "status": status,
        "detail": detail,
        "gpu_index": None,
        "pci_bus_id": None,
        "action": action if status in ("warn", "fail") else "none",
    }
