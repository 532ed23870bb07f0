# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``gpu_health`` module knows how to read from a GPU node, live or from captured files.

``NodeReader`` gathers the inputs of :func:`health_checks.evaluate`: ``nvidia-smi -q -x`` (one call), the
kernel log (``journalctl -k`` or ``dmesg -T``), ``nvidia-smi nvlink -s``/``-e``, InfiniBand ports from
sysfs, the Fabric Manager state, ``dcgmi diag``, nccl-tests and the installed kernels' NVIDIA modules
(``kernel_modules``). Every file of the node it reads (``/proc/stat``, ``/proc/driver/nvidia-nvswitch/devices``,
``/sys/class/infiniband``, ``/lib/modules``, ``/boot``) is read under ``root`` (``/`` on a node, a fake tree in
tests). Captured files named by the module's options are
read as given.

One ``nvidia-smi -q -x`` carries everything per GPU the checks need (ECC, row remapping, retired
pages, PCIe, temperature, clock events, recovery, the NVLink fabric, the product name the NVLink
count and the nccl-tests GPU count come from); no other ``nvidia-smi`` call reads any of it again.
NVLink link state and error counters need their own ``nvidia-smi nvlink -s``/``-e`` calls: the XML
(``nvsmi_device_v11``/``v12`` DTD, checked on captures of R470 to R575, tests/fixtures/nvidia-smi/)
has no per-link element, only ``<fabric>`` (state, status, health); that one ``nvidia-smi nvlink``
call prints both is not established for the drivers supported (the lab's simulator refuses it). A
quick run therefore runs ``nvidia-smi`` twice, ``standard`` and ``extended`` three times, whatever
the GPU count; ``nvlink -s`` failing still fails the NVLink check where links are expected.

The reader needs an ``AnsibleModule`` (or anything with ``params``, ``run_command``,
``get_bin_path`` and ``fail_json``); it runs commands through ``module.run_command`` with argv lists,
each under coreutils ``timeout`` (``command_timeout``; ``diag_timeout`` for dcgmi and nccl-tests),
and leaves the locale to ``command_runner.use_c_locale``.

It fails closed: a source asked for at the level run that cannot be read (tool missing, timed out,
failed, no result) goes to ``failed`` with the fix, and its checks fail; ``unavailable`` holds only
what the level or the options did not ask for.
"""

from __future__ import annotations

import datetime
import os
import time

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import KILL_AFTER, TIMED_OUT_RCS
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value, under
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    cdi_spec,
    dcgm_diag,
    dcgm_exporter,
    gate_needs,
    gpudirect_rdma,
    infiniband,
    kernel_log,
    kernel_modules,
    nccl_tests,
    nvidia_smi_xml,
    nvlink,
)

SYSTEMD_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown", "maintenance")
NCCL_DIRS = ["/usr/local/bin", "/opt/nccl-tests/build", "/usr/local/nccl-tests/build"]
NVSWITCH_DEVICES = "/proc/driver/nvidia-nvswitch/devices"
PROC_STAT = "/proc/stat"
COMMAND_TIMEOUT = 60  # s, every read (nvidia-smi, journalctl, dmesg, systemctl)
DIAG_TIMEOUTS = {"1": 300, "2": 1800}  # s, dcgmi diag -r N (-r 1 takes seconds once the host engine answers)
NCCL_TIMEOUT = 900  # s, all_reduce_perf at 16 GB on one node
DCGM_PACKAGES = "datacenter-gpu-manager (DCGM 3) or datacenter-gpu-manager-4-cuda<N> (DCGM 4)"


def boot_time(root="/"):
    """The boot time from ``<root>/proc/stat`` (``btime``), as an aware datetime, or None."""
    text = read_value(under(root, PROC_STAT))
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            try:
                return datetime.datetime.fromtimestamp(int(line.split()[1])).astimezone()
            except (ValueError, IndexError, OverflowError, OSError):
                return None
    return None


def nvswitch_devices(root="/"):
    """Names under ``<root>/proc/driver/nvidia-nvswitch/devices`` (empty without NVSwitch)."""
    try:
        return sorted(os.listdir(under(root, NVSWITCH_DEVICES)))
    except OSError:
        return []


class NodeReader:
    """Gathers the inputs of the evaluator, live or from captured files.

    ``unavailable`` maps an input to the reason it was not read; ``commands`` lists every command
    run, in order, as one string each.
    """

    def __init__(self, module, root="/", deadline=None, clock=time.monotonic):
        self.module = module
        self.deadline = deadline  # clock() value by which every command must have ended (None: no overall bound)
        self.clock = clock
        self.params = module.params
        self.root = root
        self.commands = []
        self.unavailable = {}
        self.failed = {}
        self.notes = []
        self.skip = set(self.params["skip_checks"])
        self.smi_path = None
        self.timeout_path = None

    def run(self, argv, timeout=None):
        """``(rc, out, err, timed_out)`` of ``argv`` run under coreutils ``timeout`` (``command_timeout`` by default).

        A command still running at its limit gets SIGTERM, then SIGKILL 5 s later (rc 124 or 137).
        """
        timeout = int(timeout or self.params.get("command_timeout") or COMMAND_TIMEOUT)
        if self.deadline is not None:
            left = int(self.deadline - self.clock()) - KILL_AFTER  # the kill grace is inside the budget too
            if left < 1:
                self.commands.append("not run (the run's time budget was spent): " + " ".join(argv))
                return 124, "", "not run: the run's time budget was spent before it", True
            timeout = min(timeout, left)
        if self.timeout_path is None:
            self.timeout_path = self.module.get_bin_path("timeout") or ""
            if not self.timeout_path:
                self.notes.append("coreutils timeout not found: commands run without a time limit")
        wrapped = list(argv)
        if self.timeout_path:
            wrapped = [self.timeout_path, "-k", str(KILL_AFTER), str(timeout), *argv]
        self.commands.append(" ".join(wrapped))
        rc, out, err = self.module.run_command(wrapped)
        timed_out = bool(self.timeout_path) and rc in TIMED_OUT_RCS
        if timed_out:
            err = "did not finish in %d s (stopped)" % timeout
        return rc, out, err, timed_out

    def read_file(self, path, what):
        """A captured file given by an option; fails the module with the path and the error."""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError as error:
            self.module.fail_json(msg="cannot read %s %s: %s. Check the path given." % (what, path, error))
        return None

    def read_all(self, offline, since):
        """Every input of :func:`health_checks.evaluate`, in the order the module has always read them."""
        smi = self.smi()
        inputs = {"smi": smi, "kernel": self.kernel(offline, since)}
        inputs["nvlink_status"], inputs["nvlink_errors"] = self.nvlink(offline, smi)
        inputs["nvswitch"] = None if offline else nvswitch_devices(self.root)
        inputs["infiniband"] = self.infiniband(offline)
        inputs["fabricmanager"] = self.fabricmanager(offline, smi)
        inputs["dcgm"] = self.dcgm(offline)
        inputs["nccl"] = self.nccl(offline, smi)
        inputs["kernel_modules"] = self.kernel_modules(offline)
        inputs["cdi"] = self.cdi(offline)
        inputs["dcgm_exporter"] = self.dcgm_exporter(offline)
        inputs["gpudirect_rdma"] = self.gpudirect_rdma(offline)
        inputs["unavailable"] = self.unavailable
        inputs["failed"] = self.failed
        return inputs

    # --- nvidia-smi -----------------------------------------------------------------------------
    def smi(self):
        if self.params["nvidia_smi_xml"]:
            return nvidia_smi_xml.parse(self.read_file(self.params["nvidia_smi_xml"], "nvidia_smi_xml"))
        path = self.params["nvidia_smi_path"] or self.module.get_bin_path("nvidia-smi")
        if not path:
            self.unavailable["smi"] = "nvidia-smi not found: install the NVIDIA driver or set nvidia_smi_path"
            return None
        self.smi_path = path
        rc, out, err, _timed_out = self.run([path, "-q", "-x"])
        if "<nvidia_smi_log" not in out:
            self.unavailable["smi"] = "nvidia-smi -q -x failed (rc=%s): %s" % (rc, (err or out).strip()[:300])
            return None
        parsed = nvidia_smi_xml.parse(out)
        if rc != 0:
            parsed["warnings"].append("nvidia-smi -q -x exited %s: %s" % (rc, (err or "").strip()[:300]))
        return parsed

    # --- kernel log -----------------------------------------------------------------------------
    def kernel(self, offline, since):
        if self.params["kernel_log"]:
            return kernel_log.parse(self.read_file(self.params["kernel_log"], "kernel_log"), since=since)
        if offline:
            self.unavailable["kernel"] = "offline triage without kernel_log"
            return None
        if {"xid", "fallen_off_bus", "sxid"} <= self.skip or self.params["kernel_log_source"] == "none":
            self.unavailable["kernel"] = (
                "kernel log not read (kernel_log_source=none or xid, fallen_off_bus and sxid skipped)"
            )
            return None
        booted = boot_time(self.root)
        source = self.params["kernel_log_source"]
        if source in ("auto", "journalctl"):
            journalctl = self.module.get_bin_path("journalctl")
            if journalctl:
                if since is None:
                    argv = [journalctl, "-k", "-b", "0", "-o", "short-iso", "--no-pager"]
                else:
                    local = since.astimezone().strftime("%Y-%m-%d %H:%M:%S") if since.tzinfo else since.isoformat(" ")
                    argv = [journalctl, "_TRANSPORT=kernel", "-o", "short-iso", "--no-pager", "--since", local]
                rc, out, err, _timed_out = self.run(argv)
                if rc == 0:
                    return kernel_log.parse(out, since=since, boot_time=booted if since is None else None)
                if source == "journalctl":
                    self.failed["kernel"] = "journalctl failed (rc=%s): %s: run as root or pass kernel_log" % (
                        rc,
                        err.strip()[:300],
                    )
                    return None
            elif source == "journalctl":
                self.failed["kernel"] = "journalctl not found: use kernel_log_source=dmesg or pass kernel_log"
                return None
        dmesg = self.module.get_bin_path("dmesg")
        if not dmesg:
            self.failed["kernel"] = "neither journalctl nor dmesg found: pass kernel_log"
            return None
        rc, out, err, _timed_out = self.run([dmesg, "-T"])
        if rc != 0:
            self.failed["kernel"] = (
                "kernel log not readable: dmesg -T failed (rc=%s): %s. Run as root or pass kernel_log."
                % (
                    rc,
                    err.strip()[:300],
                )
            )
            return None
        return kernel_log.parse(out, since=since, boot_time=booted if since is None else None)

    # --- NVLink ---------------------------------------------------------------------------------
    def nvlink(self, offline, smi):
        status = errors = None
        if self.params["nvlink_status"]:
            status = nvlink.parse_status(self.read_file(self.params["nvlink_status"], "nvlink_status"))
        if self.params["nvlink_errors"]:
            errors = nvlink.parse_errors(self.read_file(self.params["nvlink_errors"], "nvlink_errors"))
        if offline:
            if status is None:
                self.unavailable["nvlink_status"] = "offline triage without nvlink_status"
            if errors is None:
                self.unavailable["nvlink_errors"] = "offline triage without nvlink_errors"
            return status, errors
        if not smi or not smi["gpus"]:
            self.unavailable["nvlink_status"] = self.unavailable["nvlink_errors"] = "no GPU visible"
            return status, errors
        if status is None and "nvlink" not in self.skip:
            # a call of its own: -q -x lists no NVLink link, only the fabric (see the module docstring)
            rc, out, err, timed_out = self.run([self.smi_path, "nvlink", "-s"])
            parsed = nvlink.parse_status(out)
            if not timed_out and (rc == 0 or parsed["gpus"]):  # some drivers exit non-zero when links are all down
                status = parsed
            else:
                # fails only where the GPU model or the NVSwitches say links belong (the evaluator decides)
                self.failed["nvlink_status"] = "nvidia-smi nvlink -s failed (rc=%s): %s: reset the GPU or reboot" % (
                    rc,
                    (err or out).strip()[:200],
                )
        if errors is None and "nvlink_errors" not in self.skip:
            if self.params["level"] == "quick":
                self.unavailable["nvlink_errors"] = "NVLink error counters are read from level=standard"
            else:
                # a call of its own: -q -x has no NVLink error counter (replay, recovery, CRC)
                rc, out, err, timed_out = self.run([self.smi_path, "nvlink", "-e"])
                if rc == 0 and not timed_out:
                    errors = nvlink.parse_errors(out)
                else:
                    self.unavailable["nvlink_errors"] = "nvidia-smi nvlink -e failed (rc=%s): %s" % (
                        rc,
                        (err or out)[:200],
                    )
        return status, errors

    # --- InfiniBand, Fabric Manager -------------------------------------------------------------
    def infiniband(self, offline):
        root = self.params["infiniband_root"]
        if offline and not root:
            self.unavailable["infiniband"] = "offline triage without infiniband_root"
            return None
        return infiniband.read_ports(root or self.root)

    def fabricmanager(self, offline, smi):
        fabric_reported = any((gpu.get("fabric") or {}).get("state") for gpu in (smi or {}).get("gpus", []))
        if self.params["fabricmanager_state"]:
            return {"required": True, "state": self.params["fabricmanager_state"].strip()}
        if offline:
            if fabric_reported:
                self.unavailable["fabricmanager"] = "offline triage without fabricmanager_state"
                return None
            return {"required": False, "reason": "no NVLink fabric reported in the capture"}
        if not nvswitch_devices(self.root) and not fabric_reported:
            return {"required": False, "reason": "no NVSwitch on this node"}
        if "fabricmanager" in self.skip:
            return None
        systemctl = self.module.get_bin_path("systemctl")
        if not systemctl:
            self.failed["fabricmanager"] = (
                "systemctl not found: cannot read the nvidia-fabricmanager state this NVSwitch node needs; "
                "pass fabricmanager_state or skip fabricmanager"
            )
            return None
        rc, out, err, _timed_out = self.run([systemctl, "is-active", "nvidia-fabricmanager"])
        state = (out.strip().splitlines() or [""])[0]
        if state not in SYSTEMD_STATES:
            self.failed["fabricmanager"] = (
                "systemctl is-active nvidia-fabricmanager gave no state (rc=%s): %s: this NVSwitch node needs "
                "Fabric Manager running" % (rc, (err or out).strip()[:200])
            )
            return None
        return {"required": True, "state": state}

    # --- DCGM and NCCL --------------------------------------------------------------------------
    def tool_path(self, name):
        """Where the gate's tool ``name`` (``dcgmi``, ``all_reduce_perf``) is, or None: the one lookup for the
        run (``dcgm``, ``nccl``) and for what a gate would lack (``gate_tools``)."""
        if name == "all_reduce_perf":
            given = self.params.get("all_reduce_perf_path")
            if given:
                return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
            return self.module.get_bin_path("all_reduce_perf", opt_dirs=NCCL_DIRS)
        return self.module.get_bin_path(name)

    def gate_tools(self):
        """``{tool: path or None}`` for every tool a gate level runs (module_utils/health/gate_needs.py)."""
        return {name: self.tool_path(name) for name in gate_needs.TOOLS}

    def dcgm(self, offline):
        if self.params["dcgm_diag_json"]:
            text = self.read_file(self.params["dcgm_diag_json"], "dcgm_diag_json")
            return {"level": "?", "parsed": dcgm_diag.parse(text)}
        level = {"standard": "1", "extended": "2"}.get(self.params["level"])
        if offline or level is None or "dcgm_diag" in self.skip:
            self.unavailable["dcgm"] = (
                "offline triage without dcgm_diag_json" if offline else "runs from level=standard"
            )
            return None
        dcgmi = self.tool_path("dcgmi")
        if not dcgmi:
            self.failed["dcgm"] = (
                "dcgmi not installed, level=%s runs dcgmi diag -r %s: install %s and start nvidia-dcgm, "
                "or skip dcgm_diag" % (self.params["level"], level, DCGM_PACKAGES)
            )
            return None
        timeout = self.params.get("diag_timeout") or DIAG_TIMEOUTS[level]
        rc, out, err, timed_out = self.run([dcgmi, "diag", "-r", level, "-j"], timeout=timeout)
        if timed_out:
            self.failed["dcgm"] = (
                "dcgmi diag -r %s: the DCGM host engine did not answer in %d s: check systemctl status "
                "nvidia-dcgm, then run again" % (level, timeout)
            )
            return None
        parsed = dcgm_diag.parse(out)
        if not parsed["results"]:
            parsed["warnings"].append("rc=%s %s" % (rc, (err or out).strip()[:300]))
        return {"level": level, "parsed": parsed, "rc": rc}

    def nccl(self, offline, smi):
        if self.params["nccl_output"]:
            return {"parsed": nccl_tests.parse(self.read_file(self.params["nccl_output"], "nccl_output"))}
        if offline or self.params["level"] != "extended" or "nccl_busbw" in self.skip:
            self.unavailable["nccl"] = "offline triage without nccl_output" if offline else "runs at level=extended"
            return None
        binary = self.tool_path("all_reduce_perf")
        if not binary:
            self.failed["nccl"] = (
                "nccl-tests all_reduce_perf not installed, level=extended runs it: build nccl-tests into "
                "/opt/nccl-tests/build (or set all_reduce_perf_path), or skip nccl_busbw"
            )
            return None
        count = len((smi or {}).get("gpus", [])) or 1
        timeout = self.params.get("diag_timeout") or NCCL_TIMEOUT
        rc, out, err, timed_out = self.run(
            [binary, "-b", "16G", "-e", "16G", "-f", "2", "-g", str(count)], timeout=timeout
        )
        if timed_out:
            self.failed["nccl"] = (
                "all_reduce_perf did not finish in %d s: check GPU and NVLink health, then run again" % (timeout)
            )
            return None
        parsed = nccl_tests.parse(out)
        if rc != 0:
            parsed["warnings"].append("all_reduce_perf exited %s: %s" % (rc, (err or "").strip()[:300]))
            parsed["busbw_gbps"] = None
        return {"parsed": parsed}

    # --- the CDI specification of the GPUs (files only) ------------------------------------------
    def cdi(self, offline):
        if offline:
            self.unavailable["cdi"] = "offline triage: the node's CDI specification is not read"
            return None
        if "cdi_spec" in self.skip:
            return None
        return cdi_spec.read(self.root)

    # --- the DCGM Exporter's endpoint (one GET on 127.0.0.1) --------------------------------------
    def dcgm_exporter(self, offline):
        if offline:
            self.unavailable["dcgm_exporter"] = "offline triage: the node's DCGM Exporter is not asked"
            return None
        if "dcgm_exporter" in self.skip:
            return None
        reading = dcgm_exporter.read(self.root)
        if not reading["installed"]:
            self.unavailable["dcgm_exporter"] = (
                "no DCGM Exporter on this node (nvidia-dcgm-exporter.service is not installed): not part of its stack"
            )
            return None
        return reading

    # --- GPUDirect RDMA: the HCAs, nvidia-peermem and what serves it (sysfs and /proc, no command) ------
    def gpudirect_rdma(self, offline):
        if offline:
            self.unavailable["gpudirect_rdma"] = "offline triage: the node's GPUDirect RDMA path is not read"
            return None
        if "gpudirect_rdma" in self.skip:
            return None
        return gpudirect_rdma.read(self.root)

    # --- the NVIDIA module of each installed kernel -----------------------------------------------
    def kernel_modules(self, offline):
        """Files under ``root`` at every level; ``grubby --default-kernel`` where grubby is installed, and
        ``dkms status`` from ``standard`` (it takes 0.2 to 0.8 s), both only where a driver is installed."""
        if offline:
            self.unavailable["kernel_modules"] = "offline triage: the node's kernels are not read"
            return None
        if "kernel_module" in self.skip:
            return None
        reading = kernel_modules.read(self.root)
        if not kernel_modules.needs_commands(reading):
            return reading
        grubby_default = dkms_status = dkms_error = None
        grubby = self.module.get_bin_path("grubby")
        if grubby:
            rc, out, err, timed_out = self.run([grubby, "--default-kernel"])
            grubby_default = out if rc == 0 and not timed_out else "failed (rc=%s): %s" % (rc, (err or out).strip())
        dkms = self.module.get_bin_path("dkms") if self.params["level"] != "quick" else None
        if dkms and reading["dkms_modules"]:
            rc, out, err, timed_out = self.run([dkms, "status"])
            if rc == 0 and not timed_out:
                dkms_status = out
            else:
                dkms_error = "failed (rc=%s): %s" % (rc, (err or out).strip()[:200])
        return kernel_modules.with_commands(reading, grubby_default, dkms_status, dkms_error)
