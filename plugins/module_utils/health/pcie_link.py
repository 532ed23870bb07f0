# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's PCIe link: judged against its maximum, the platform's declared value or the node's baseline. Pure.

:func:`judge` is the ``pcie_link`` check; :func:`pcie_links` reads what each GPU trained at (a baseline to
keep); :func:`pcie_baseline_by_bus` reads a kept baseline.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import Finding, check
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id

_IDLE_PSTATES = ("P8", "P10", "P12")
PCIE_WIDTH_HINT = "if this platform gives x%d by design, set gpuops_health_expected_pcie_width: %d"
PCIE_GEN_HINT = "if this platform gives Gen%d by design, set gpuops_health_expected_pcie_gen: %d"
# The setting each reference of the PCIe check comes from.
PCIE_SETTINGS = {
    "this node's baseline": "gpuops_health_pcie_baseline",
    "the platform's declared value": "gpuops_health_expected_pcie_width / gpuops_health_expected_pcie_gen",
}


def pcie_baseline_by_bus(baseline):
    """A PCIe baseline (``{pci_bus_id: {width, gen}}``, any bus id spelling) keyed like ``gpu["pci_key"]``."""
    keyed = {}
    for bus, value in (baseline or {}).items():
        key = normalize_bus_id(bus)
        if key is None or not isinstance(value, dict):
            raise ValueError("pcie_baseline: %r is not a PCI bus id with {width, gen}" % (bus,))
        keyed[key] = {"width": value.get("width"), "gen": value.get("gen")}
    return keyed


def pcie_links(smi):
    """What each GPU's PCIe link trained at now (``{pci_bus_id: {width, gen}}``): a baseline to keep.

    The generation of an idle GPU is None (it trains down to save power)."""
    links = {}
    for gpu in (smi or {}).get("gpus", []):
        if not gpu.get("pci_bus_id"):
            continue
        pcie = gpu.get("pcie") or {}
        idle = (gpu.get("clock_events") or {}).get("gpu_idle") or gpu.get("performance_state") in _IDLE_PSTATES
        # an idle GPU's generation is its power-saving one, not what the slot gives: no baseline of it
        links[gpu["pci_bus_id"]] = {
            "width": pcie.get("width_current"),
            "gen": None if idle else pcie.get("gen_current"),
        }
    return links


def _pcie_reference(gpu, platform, baseline):
    """``(width, gen, what)`` the link is judged against: the node's baseline for this GPU, else the declared
    platform value, else the GPU's own maximum (``what`` None)."""
    recorded = (baseline or {}).get(gpu.get("pci_key")) or {}
    if recorded.get("width") is not None or recorded.get("gen") is not None:
        return recorded.get("width"), recorded.get("gen"), "this node's baseline"
    platform = platform or {}
    if platform.get("width") is not None or platform.get("gen") is not None:
        return platform.get("width"), platform.get("gen"), "the platform's declared value"
    return None, None, None


def judge(gpu, platform=None, baseline=None):
    """PCIe width and generation against the GPU's maximum, or against a declared reference.

    Some platforms run GPUs at a reduced width or generation by design (a VM's virtual root port, a
    board wired x8): there the operator declares the platform's value (``expected_pcie_width``,
    ``expected_pcie_gen``) or the node keeps a baseline of what each GPU trained at when it was good,
    and the link fails only below that. Without either, a width below the maximum fails and a
    generation below it warns under load.
    """
    pcie = gpu.get("pcie") or {}
    finding = Finding()
    width, width_max = pcie.get("width_current"), pcie.get("width_max")
    gen, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
    if width is None and gen is None:
        return check("pcie_link", "skip", "PCIe link not reported", gpu)
    ref_width, ref_gen, what = _pcie_reference(gpu, platform, baseline)
    idle = (gpu.get("clock_events") or {}).get("gpu_idle") or gpu.get("performance_state") in _IDLE_PSTATES
    if what is None or ref_width is None:
        if width is not None and width_max is not None and width < width_max:
            finding.add(
                "fail",
                "PCIe link x%d, capable of x%d: reseat or inspect the GPU and riser; %s"
                % (width, width_max, PCIE_WIDTH_HINT % (width, width)),
                "hardware_inspection",
            )
    elif width is not None and width < ref_width:
        finding.add(
            "fail",
            "PCIe link x%d, below x%d of %s (%s): reseat or inspect the GPU and riser"
            % (width, ref_width, what, PCIE_SETTINGS[what]),
            "hardware_inspection",
        )
    elif width is not None and width_max is not None and width < width_max:
        finding.details.append("x%d of x%d, as %s (x%d)" % (width, width_max, what, ref_width))
    if what is None or ref_gen is None:
        if gen is not None and gen_max is not None and gen < gen_max:
            if idle:
                finding.details.append(
                    "Gen%d of Gen%d while idle (the link trains down to save power)" % (gen, gen_max)
                )
            else:
                finding.add(
                    "warn", "PCIe Gen%d, capable of Gen%d under load; %s" % (gen, gen_max, PCIE_GEN_HINT % (gen, gen))
                )
    elif gen is not None and gen < ref_gen:
        if idle:
            finding.details.append("Gen%d of Gen%d while idle (the link trains down to save power)" % (gen, ref_gen))
        else:
            finding.add(
                "warn", "PCIe Gen%d under load, below Gen%d of %s (%s)" % (gen, ref_gen, what, PCIE_SETTINGS[what])
            )
    elif gen is not None and gen_max is not None and gen < gen_max:
        finding.details.append("Gen%d of Gen%d, as %s (Gen%d)" % (gen, gen_max, what, ref_gen))
    if finding.status == "pass" and finding.details:
        finding.details.insert(0, "Gen%s x%s" % (gen, width))
    return finding.result("pcie_link", gpu, "Gen%s x%s" % (gen, width))
