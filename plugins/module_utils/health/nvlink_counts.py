# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many NVLink links a GPU must have up, from its model and the node's NVSwitches.

``nvidia-smi nvlink -s`` prints ``NVML: Unable to retrieve NVLink information as all links are
inActive`` for a GPU whose links are all down, the same as it would for nothing at all: only the GPU
model says whether links belong there. The matrix (``matrix/nvidia_stack.yml`` ``gpus``) says which
models sit behind NVSwitch but carries no link count, and the module runs on the node without the
matrix, so the counts live here, matched on the product name nvidia-smi prints (the matrix's
aliases; a unit test checks that every matrix model with ``nvswitch: true`` and no PCIe form is
covered, and that PCIe/NVL forms are not).

Sources (links per GPU, bidirectional bandwidth):

- V100 SXM2/SXM3: 6 NVLink2 links, 300 GB/s (NVIDIA Tesla V100 GPU architecture whitepaper, 2017).
- A100 SXM4: 12 NVLink3 links, 600 GB/s (NVIDIA A100 Tensor Core GPU architecture whitepaper, 2020);
  ``nvidia-smi topo -m`` on a DGX A100 shows ``NV12`` between every pair (NVIDIA/DCGM issue 149).
- A800 SXM4: 400 GB/s NVLink (NVIDIA A800 datasheet): 8 links of 50 GB/s.
- H100 SXM5 (``NVIDIA H100 80GB HBM3``), H200 SXM, H20: 18 NVLink4 links, 900 GB/s (NVIDIA H100 Tensor
  Core GPU architecture whitepaper, 2022; the 18 ``Link N`` lines per GPU in stas00/ml-engineering's
  ``nvidia-smi nvlink -s`` capture, tests/fixtures/nvlink/).
- H800 SXM: 400 GB/s NVLink (NVIDIA H800 datasheet): 8 links; ``NV8`` in ``nvidia-smi topo -m``.
- B200, GB200: 18 NVLink5 links, 1.8 TB/s (NVIDIA Blackwell datasheet); 18 ``Link N`` lines per GB200
  in NVIDIA/k8s-test-infra issue 371.

PCIe and NVL cards (A100 PCIe, H100 PCIe/NVL, H200 NVL, L40S ...) may carry NVLink bridges, which are
optional: no links are required of them (a bridge that is fitted is still judged against its peers).

A node of one GPU without NVSwitch (:func:`node_expected_links`) needs no link whatever its model: an
SXM GPU passed through alone to a VM (one H200 of an HGX, driver 580.159.04: ``nvidia-smi nvlink -s``
prints nothing, the fabric state is N/A) has no peer to link to. NVLink is GPU to GPU (through NVSwitch
on HGX boards), so with one GPU and no NVSwitch there is nothing for a link to reach.
"""

from __future__ import annotations

import re

# (pattern on the product name, links, the matrix key it stands for); first match wins.
LINKS_BY_MODEL = (
    (r"\b(?:PCIE|NVL)\b", 0, "PCIe or NVL form: NVLink bridges are optional"),
    (r"V100-SXM[23]", 6, "v100-sxm2 / v100-sxm3"),
    (r"A100-SXM4", 12, "a100-sxm4"),
    (r"A800-SXM4", 8, "a800-sxm4"),
    (r"H100 80GB HBM3|H100-SXM|H100 SXM", 18, "h100-sxm"),
    (r"H800", 8, "h800-sxm"),
    (r"(?<![A-Z])H200|(?<![A-Z])H20\b", 18, "h200-sxm"),
    (r"\bG?B200\b", 18, "b200 / gb200"),
)


def links_for_model(product_name):
    """``(links, why)``: the NVLink links a GPU of this product name has; ``(None, why)`` when unknown."""
    name = " ".join((product_name or "").upper().replace("_", " ").split())
    if not name:
        return None, "no product name"
    for pattern, links, what in LINKS_BY_MODEL:
        if re.search(pattern, name):
            return links, what
    return None, "model not in the NVLink table"


def expected_links(gpu, nvswitch=None, override=None):
    """What a GPU must show in ``nvidia-smi nvlink -s``.

    Returns ``{links, reason}``: ``links`` an int (that many active links), ``-1`` (some links, count
    unknown: NVSwitches on the node or a fabric reported for the GPU, model not in the table) or 0 (none
    required). ``override`` (the module's ``expected_nvlinks``) wins; then the model; then NVSwitch.
    """
    if override is not None:
        return {"links": int(override), "reason": "expected_nvlinks=%d" % int(override)}
    links, what = links_for_model(gpu.get("product_name"))
    if links:
        return {"links": links, "reason": "an %s has %d NVLinks" % (gpu.get("product_name"), links)}
    if links == 0:
        return {"links": 0, "reason": what}
    fabric = (gpu.get("fabric") or {}).get("state")
    if nvswitch:
        return {"links": -1, "reason": "NVSwitches on this node (%s)" % ", ".join(nvswitch)}
    if fabric and fabric.lower() not in ("n/a", "not supported"):
        return {"links": -1, "reason": "the GPU reports an NVLink fabric (state %s)" % fabric}
    return {"links": 0, "reason": what}


ONE_GPU = "one GPU, no NVSwitch: no NVLink expected"


def _fabric_reported(gpu):
    state = (gpu.get("fabric") or {}).get("state")
    return bool(state) and state.lower() not in ("n/a", "not supported")


def node_expected_links(gpus, nvswitch=None, override=None, expected_gpu_count=None):
    """:func:`expected_links` for every GPU of a node, ``{index: {links, reason}}``.

    A node of one GPU, GPU 0 (a GPU 2 seen alone is one of several), with no ``expected_gpu_count`` above
    one (not a node that lost the others), no NVSwitch and no NVLink fabric reported for its GPU needs no
    link (:data:`ONE_GPU`, where its model would need some); a node of more GPUs keeps the model's count.
    ``override`` (``expected_nvlinks``) wins over both.
    """
    gpus = list(gpus or [])
    expected = {gpu["index"]: expected_links(gpu, nvswitch, override) for gpu in gpus}
    alone = (
        override is None
        and len(gpus) == 1
        and gpus[0]["index"] == 0
        and (expected_gpu_count or 1) <= 1
        and not nvswitch
        and not _fabric_reported(gpus[0])
    )
    if alone and expected[gpus[0]["index"]]["links"]:
        return {gpus[0]["index"]: {"links": 0, "reason": ONE_GPU}}
    return expected
