# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``dcgm_exporter`` check: the node's DCGM Exporter answers on /metrics with every GPU's DCGM fields.

The exporter is part of a node's stack where the nvidia_stack role installed it (``gpuops_stack.dcgm_exporter``):
its unit ``nvidia-dcgm-exporter.service`` is on the node (NVIDIA/dcgm-exporter
packaging/config-files/systemd/nvidia-dcgm-exporter.service). Elsewhere the check is skipped, not passed.

:func:`read` finds the unit and the port (the role's drop-in gives ``-a :<port>``; else the binary's default
``:9400``, pkg/cmd/app.go), then GETs ``http://127.0.0.1:<port>/metrics`` once, with a timeout. :func:`parse` reads
the Prometheus text format as dcgm-exporter writes it (internal/pkg/rendermetrics/render_metrics.go:
``DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="...",device="nvidia0",modelName="...",Hostname="..."} 34``).
:func:`findings` judges: a GPU nvidia-smi lists without a ``DCGM_FI_*`` series fails, an exporter that does not
answer (refused, timed out, an HTTP error) fails with the fix: the verdict fails closed.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import urllib.error
import urllib.parse

SERVICE = "nvidia-dcgm-exporter"
# Where the packaged unit is (under /usr/lib on Ubuntu, NVIDIA/dcgm-exporter issue 606), or an operator's copy.
UNIT_PATHS = (
    "/usr/lib/systemd/system/nvidia-dcgm-exporter.service",
    "/lib/systemd/system/nvidia-dcgm-exporter.service",
    "/etc/systemd/system/nvidia-dcgm-exporter.service",
)
# The drop-in the nvidia_stack role writes (module_utils/stack/dcgm_exporter_dropin.py PATH; a test keeps them equal).
DROPIN = "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuops.conf"
DEFAULT_PORT = 9400  # dcgm-exporter -a default ":9400" (pkg/cmd/app.go)
TIMEOUT = 10
# The labels a GPU's series carries its UUID in: UUID (default), uuid (--use-old-namespace), gpu_uuid (NVLink).
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")
FIX = (
    "systemctl restart nvidia-dcgm-exporter; its log: journalctl -u nvidia-dcgm-exporter and /var/log/dcgm-exporter.log"
)

_SAMPLE_RE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL_RE = re.compile(r'\s*(?P<key>[A-Za-z_][A-Za-z0-9_-]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*,?')
_ADDRESS_RE = re.compile(r"(?:^|\s)(?:-a|--address)(?:\s+|=)(?P<address>\S+)")


def parse(text):
    """``{metric name: [{labels, value}]}`` from Prometheus text; comment lines and unparsable lines are skipped."""
    metrics = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_RE.match(line)
        if not match:
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL_RE.finditer(match.group("labels") or "")}
        try:
            value = float(match.group("value"))
        except ValueError:
            continue
        metrics.setdefault(match.group("name"), []).append({"labels": labels, "value": value})
    return metrics


def port_from_unit(text):
    """The port of the last ``ExecStart=`` of a unit or drop-in that names ``-a``/``--address``, or None."""
    port = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line.startswith("ExecStart="):
            continue
        # an empty ExecStart= clears the ones before it (systemd.service), as a drop-in does
        match = _ADDRESS_RE.search(line[len("ExecStart=") :])
        tail = match.group("address").rpartition(":")[2] if match else ""
        port = int(tail) if tail.isdigit() else None
    return port


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read(root="/", timeout=TIMEOUT, opener=None):
    """The exporter's state: ``{installed, unit, port, url, status, text, error}``; one GET when installed.

    ``opener`` (tests) takes ``(url, timeout)`` and returns ``(status, text)`` or raises as urllib does.
    """
    unit = next((path for path in UNIT_PATHS if os.path.exists(os.path.join(root, path.lstrip("/")))), None)
    reading = {"installed": unit is not None, "unit": unit, "port": None, "url": None, "status": None, "text": None,
               "error": None}  # fmt: skip
    if unit is None:
        return reading
    port = port_from_unit(_read_text(os.path.join(root, DROPIN.lstrip("/"))))
    if port is None:
        port = port_from_unit(_read_text(os.path.join(root, unit.lstrip("/"))))
    reading["port"] = port or DEFAULT_PORT
    reading["url"] = "http://127.0.0.1:%d/metrics" % reading["port"]
    try:
        reading["status"], reading["text"] = (opener or _get)(reading["url"], timeout)
    except urllib.error.HTTPError as error:
        reading["status"] = error.code
        reading["error"] = "HTTP %d %s" % (error.code, error.reason)
    except urllib.error.URLError as error:
        reading["error"] = _reason(error.reason, timeout)
    except (OSError, socket.timeout) as error:
        reading["error"] = _reason(error, timeout)
    return reading


def _reason(error, timeout):
    if isinstance(error, socket.timeout) or "timed out" in str(error):
        return "no answer in %d s" % timeout
    if isinstance(error, ConnectionRefusedError) or "refused" in str(error).lower():
        return "connection refused"
    return str(error)


def _get(url, timeout):
    """One GET of the node's own exporter, through http.client: this also runs in the node-side command
    (roles/gpu_healthcheck), which has no ansible.module_utils.urls."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        text = response.read().decode("utf-8", errors="replace")
    finally:
        connection.close()
    if response.status >= 400:
        raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, None)
    return response.status, text


def gpu_series(metrics):
    """``{uuid: [DCGM field names]}`` of the ``DCGM_FI_*`` series that name a GPU."""
    found = {}
    for name, samples in metrics.items():
        if not name.startswith("DCGM_FI_"):
            continue
        for sample in samples:
            uuid = next((sample["labels"][key] for key in UUID_LABELS if sample["labels"].get(key)), None)
            if uuid:
                found.setdefault(uuid, [])
                if name not in found[uuid]:
                    found[uuid].append(name)
    return found


def findings(reading, gpus):
    """``[(status, detail)]`` for one node; ``gpus`` as nvidia_smi_xml parses them (``uuid``, ``index``)."""
    where = "nvidia-dcgm-exporter (%s)" % reading["url"]
    if reading["error"]:
        return [("fail", "%s does not answer: %s: %s" % (where, reading["error"], FIX))]
    if reading["status"] != 200:
        return [("fail", "%s answered HTTP %s: %s" % (where, reading["status"], FIX))]
    series = gpu_series(parse(reading["text"]))
    if not series:
        head = (reading["text"] or "").strip().splitlines()[:1]
        return [
            (
                "fail",
                "%s serves no DCGM_FI_* series for any GPU%s: check its collectors file and the host engine; %s"
                % (where, " (it says: %s)" % head[0][:200] if head else "", FIX),
            )
        ]
    listed = [gpu for gpu in gpus or [] if gpu.get("uuid")]
    missing = [gpu for gpu in listed if gpu["uuid"] not in series]
    if missing:
        return [
            (
                "fail",
                "%s exports no DCGM field for GPU %s of the %d nvidia-smi lists: %s"
                % (where, ", ".join("%s (%s)" % (gpu.get("index"), gpu["uuid"]) for gpu in missing), len(listed), FIX),
            )
        ]
    fields = sorted({name for names in series.values() for name in names})
    counted = len(listed) if listed else len(series)
    return [("pass", "%s exports %d fields for %d GPUs (%s)" % (where, len(fields), counted, ", ".join(fields[:4])))]
