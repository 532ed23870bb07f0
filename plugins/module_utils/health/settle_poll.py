# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settle wait of ``gpuops.cluster.gpu_health``: poll the node until what comes up after a reboot is up.

:func:`wait_to_settle` runs the commands :mod:`settle_wait` asks for (which decides, pure) through the module's
:class:`node_reader.NodeReader`, each under its ``command_timeout``, and sleeps between polls.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    infiniband,
    nvidia_smi_xml,
    nvlink,
    settle_wait,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_reader import SYSTEMD_STATES, nvswitch_devices


def wait_to_settle(module, reader):
    """``(check, facts)``: polls until what comes up after a reboot is up, or ``settle_timeout`` runs out.

    Each poll runs at most one ``nvidia-smi`` (``-q -x`` until the fabric is done, then ``nvlink -s``), ``systemctl
    is-active nvidia-fabricmanager`` while it is not active, and reads InfiniBand sysfs; every command under
    ``command_timeout`` (``reader.run``, listed in ``commands``). module_utils/health/settle_wait.py decides.
    """
    params = module.params
    clock, sleep = time.monotonic, time.sleep
    wait = settle_wait.SettleWait(
        params["settle_timeout"], clock(), expected_nvlinks=params["expected_nvlinks"],
        expected_ib_ports=params["expected_ib_ports"], expected_ib_port_count=params["expected_ib_port_count"],
        skip=params["skip_checks"],
    )  # fmt: skip
    smi_path = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    systemctl = module.get_bin_path("systemctl")
    nvswitch = nvswitch_devices(reader.root)
    while True:
        read = wait.next_poll()
        if read == "smi" and not smi_path:
            wait.saw_smi(None, clock(), error="nvidia-smi not found")
        elif read == "smi":
            rc, out, err, _timed_out = reader.run([smi_path, "-q", "-x"])
            smi = nvidia_smi_xml.parse(out) if "<nvidia_smi_log" in out else None
            wait.saw_smi(smi, clock(), nvswitch, error="rc=%s: %s" % (rc, (err or out).strip()[:200]))
        elif read == "nvlink":
            rc, out, err, timed_out = reader.run([smi_path, "nvlink", "-s"])
            status = nvlink.parse_status(out)
            readable = not timed_out and (rc == 0 or status["gpus"])
            wait.saw_nvlink(status if readable else None, clock(), error="rc=%s: %s" % (rc, (err or out).strip()[:200]))
        if wait.wants("fabricmanager") and not systemctl:
            wait.saw_fabricmanager(None, clock(), error="systemctl not found")
        elif wait.wants("fabricmanager"):
            rc, out, err, _timed_out = reader.run([systemctl, "is-active", "nvidia-fabricmanager"])
            state = (out.strip().splitlines() or [""])[0]
            wait.saw_fabricmanager(
                state if state in SYSTEMD_STATES else None,
                clock(),
                error="rc=%s: %s" % (rc, (err or out).strip()[:200]),
            )
        if wait.wants("infiniband"):
            wait.saw_infiniband(infiniband.read_ports(params["infiniband_root"] or reader.root), clock())
        now = clock()
        if wait.done(now):
            return wait.check(now), wait.facts(now)
        sleep(wait.pause(now))
