"""slurm_gres against the lab's simulated nvidia-smi (run as a subprocess), gres.conf in a temporary directory."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block
from ansible_collections.gpuops.cluster.plugins.modules import slurm_gres

from tests.unit.mig.test_gpu_mig_module import SIM


def args(lab, **more):
    return {
        "path": str(lab.root / "etc/slurm/gres.conf"),
        "nvidia_smi_path": str(SIM),
        "mig_minors_path": str(lab.root / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors"),
        "plugin_dirs": [str(lab.root / "usr/lib/x86_64-linux-gnu/slurm-wlm")],
        "node_names": ["gpu07"],
        **more,
    }


def split_gpu0(lab):
    for argv in (("-i", "0", "-mig", "1"), ("-i", "0", "-r"), ("mig", "-i", "0", "-cgi", "9,19,19", "-C")):
        assert lab.smi(*argv)[0] == 0, argv


def test_whole_gpus_then_a_mig_layout_then_nothing_to_do(harness, lab):
    conf = lab.root / "etc/slurm/gres.conf"
    first = harness.run(slurm_gres, args(lab), diff=True)
    assert first["changed"] is True
    assert first["gres_changed"] is True
    assert first["gres"] == "gpu:h100_80gb_hbm3:2"
    assert first["lines"][1:] == [
        "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia0",
        "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia1",
    ]
    assert conf.read_text() == "\n".join([gres_conf_block.BEGIN, *first["lines"], gres_conf_block.END]) + "\n"
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    again = harness.run(slurm_gres, args(lab))
    assert again["changed"] is False
    assert again["gres_changed"] is False

    split_gpu0(lab)
    predicted = harness.run(slurm_gres, args(lab), check_mode=True)
    assert predicted["changed"] is True
    assert predicted["gres"] == "gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"
    assert "Type=h100_80gb_hbm3 File=/dev/nvidia0" in conf.read_text()  # check mode wrote nothing
    applied = harness.run(slurm_gres, args(lab))
    assert applied["gres_changed"] is True
    mig_lines = [line for line in applied["lines"] if "MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap" in line]
    assert len(mig_lines) == 3
    assert harness.run(slurm_gres, args(lab))["changed"] is False


def test_the_nvml_plugin_makes_it_autodetect_and_still_records_the_gres(harness, lab):
    plugin = lab.root / "usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("")
    result = harness.run(slurm_gres, args(lab))
    assert result["nvml"] is True
    assert result["lines"] == ["# slurm.conf for this node: Gres=gpu:h100_80gb_hbm3:2", "AutoDetect=nvml"]
    split_gpu0(lab)
    changed = harness.run(slurm_gres, args(lab))
    assert changed["gres_changed"] is True  # the file's AutoDetect line is the same; the devices are not
    assert changed["lines"][1:] == ["AutoDetect=nvml"]


def test_an_operators_gpu_line_fails_and_nothing_is_written(harness, lab):
    conf = lab.root / "etc/slurm/gres.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("AutoDetect=nvidia\n")
    failure = harness.fail(slurm_gres, args(lab))
    assert "AutoDetect=nvidia" in failure["msg"]
    assert "nothing was changed" in failure["msg"]
    assert conf.read_text() == "AutoDetect=nvidia\n"
