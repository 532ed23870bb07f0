"""gpuops-mig-apply on a node that runs slurmd: the layout file's slurm_gres makes the boot write the gres.conf
block for the devices it restored (before slurmd starts), with gres_sync as the module writes it."""

from __future__ import annotations

import json

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block

from tests.unit.mig.test_gpu_mig_module import MIXED, gpu0

# node: the fixture of the command tests, used by name
from tests.unit.mig.test_mig_node_command import command, node, write_layout  # noqa: F401  # pylint: disable=unused-import


def gres_options(lab, **more):
    return {
        "path": str(lab.root / "etc/slurm/gres.conf"),
        "nvml": "never",
        "node_names": ["gpu07"],
        "mig_minors_path": str(lab.root / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors"),
        **more,
    }


def test_the_boot_writes_the_block_for_the_instances_it_restored(node):  # noqa: F811
    conf = node.root / "etc/slurm/gres.conf"
    path = write_layout(node, gpu0(MIXED), slurm_gres=gres_options(node))
    code, out, err = command(node, path)
    assert (code, err) == (0, ""), out
    assert "gres.conf %s written (Gres=gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1)" % conf in out
    written = conf.read_text()
    assert gres_conf_block.recorded_gres(written) == "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"
    assert sum("MultipleFiles=/dev/nvidia0," in line for line in written.splitlines()) == 4
    assert oct(conf.stat().st_mode & 0o777) == "0o644"

    # nothing to do: the file is left as it is
    code, out, err = command(node, path, "--check")
    assert (code, err) == (0, "")
    assert "holds this node's GPUs" in out

    # the reboot loses the instances; the boot creates them again and the block names them
    node.reboot()
    code, out, err = command(node, path)
    assert code == 0, err
    assert conf.read_text() == written
    assert "holds this node's GPUs" in out


def test_check_fails_where_the_block_is_not_the_devices(node):  # noqa: F811
    conf = node.root / "etc/slurm/gres.conf"
    path = write_layout(node, gpu0(MIXED), slurm_gres=gres_options(node))
    assert command(node, path)[0] == 0
    edited = conf.read_text().replace("gpu:2g.20gb:1,", "")
    conf.write_text(edited)
    code, out, err = command(node, path, "--check")
    assert code == 1
    assert out == ""
    assert "MIG layout chosen is the node's, but gres.conf %s does not hold the devices in place" % conf in err
    assert conf.read_text() == edited  # --check wrote nothing


def test_an_operators_gpu_line_fails_the_boot_and_is_kept(node):  # noqa: F811
    conf = node.root / "etc/slurm/gres.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("AutoDetect=nvidia\n")
    path = write_layout(node, gpu0(MIXED), slurm_gres=gres_options(node))
    code, out, err = command(node, path)
    assert code == 1
    assert out == ""
    assert "applied: GPU 0" in err  # the layout is in place
    assert "but gres.conf %s not written" % conf in err
    assert "AutoDetect=nvidia" in err
    assert conf.read_text() == "AutoDetect=nvidia\n"


def test_a_wrong_slurm_gres_is_a_configuration_error(node):  # noqa: F811
    path = write_layout(node, gpu0(MIXED), slurm_gres={"path": 3, "nvml": "maybe", "nodes": []})
    code, _out, err = command(node, path)
    assert code == 2
    assert "slurm_gres: unknown key 'nodes'" in err
    assert "slurm_gres: path must be a str, not 3" in err
    assert "slurm_gres: nvml must be one of auto, always, never, not 'maybe'" in err


def test_without_slurm_gres_no_gres_conf_is_written(node):  # noqa: F811
    path = write_layout(node, gpu0(MIXED))
    assert json.loads(path.read_text()).get("slurm_gres") is None
    assert command(node, path)[0] == 0
    assert not (node.root / "etc/slurm").exists()
