"""The collection's block in gres.conf: the operator's lines kept, GPU lines of this node outside it refused."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block as blk

OPERATOR = "# site gres.conf\nName=nic File=/dev/infiniband/uverbs0\nNodeName=cpu[01-04] Name=gpu Count=0\n"


def test_the_block_is_added_after_the_operators_lines_and_replaced_in_place():
    first = blk.merged(OPERATOR, blk.block("gpu:h200:1", ["Name=gpu Type=h200 File=/dev/nvidia0"]), ["gpu07"])
    assert first.startswith(OPERATOR + "\n" + blk.BEGIN + "\n")
    assert blk.recorded_gres(first) == "gpu:h200:1"
    second = blk.merged(first + "Name=mps Count=100\n", blk.block("gpu:3g.71gb:2", ["AutoDetect=nvml"]), ["gpu07"])
    assert second.count(blk.BEGIN) == 1
    assert "Name=gpu Type=h200" not in second
    assert second.endswith(blk.END + "\nName=mps Count=100\n")
    assert blk.recorded_gres(second) == "gpu:3g.71gb:2"
    assert blk.recorded_gres(OPERATOR) is None


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("Name=gpu Type=h100 File=/dev/nvidia[0-7]", ["gpu07"]),
        ("autodetect=nvml", ["gpu07"]),
        ("NodeName=gpu[01-08] Name=gpu File=/dev/nvidia0", ["gpu07"]),
        ("NodeName=a,gpu07 AutoDetect=nvidia", ["gpu07"]),
    ],
)
def test_this_nodes_gpus_given_another_way_are_refused(line, names):
    with pytest.raises(blk.BlockError, match="outside the block") as caught:
        blk.merged(OPERATOR + line + "\n", blk.block("gpu:h100:8", []), names)
    assert line in str(caught.value)


def test_other_nodes_gpu_lines_and_comments_stay():
    text = OPERATOR + "NodeName=gpu[01-06,08] Name=gpu File=/dev/nvidia0\n# Name=gpu File=/dev/nvidia9\n"
    assert blk.merged(text, blk.block("gpu:h100:1", []), ["gpu07"]).startswith(text)


def test_a_torn_block_is_refused():
    with pytest.raises(blk.BlockError, match="no '# END"):
        blk.merged(blk.BEGIN + "\nName=gpu File=/dev/nvidia0\n", [], ["gpu07"])
