"""The cdi_spec check on NVIDIA's own nvidia-ctk output (tests/fixtures/cdi/nct-generate-default.yaml).

The fixture is the expected specification of the "default" case of NVIDIA/nvidia-container-toolkit
cmd/nvidia-ctk/cdi/generate/generate_test.go (commit d34b304, after v1.20.0): one GPU named "0" and "all", driver
999.88.77 in the libcuda.so mount and the enable-cuda-compat hook. The tests give it the GPUs and the driver of a
node by rewriting its kind, device list and release, as nvidia-ctk would write them for that node.
"""

import json
import re

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec, health_checks, nvidia_smi_xml

from .conftest import FIXTURES

NCT = (FIXTURES / "cdi" / "nct-generate-default.yaml").read_text(encoding="utf-8")
H100 = nvidia_smi_xml.parse((FIXTURES / "nvidia-smi" / "h100-sxm-8x-healthy.xml").read_text(encoding="utf-8"))
DRIVER = H100["driver_version"]


def spec_for(names, driver=DRIVER, kind=cdi_spec.KIND):
    """The fixture as nvidia-ctk writes it for ``names`` and ``driver``: its device block repeated per name."""
    head, _sep, rest = NCT.partition("devices:\n")
    block, _sep, edits = rest.partition("containerEdits:\n")
    gpu0 = block.split('    - name: "all"')[0]
    devices = "".join(gpu0.replace('name: "0"', 'name: "%s"' % name) for name in [*names, "all"])
    text = head + "devices:\n" + devices + "containerEdits:\n" + edits
    return text.replace("999.88.77", driver).replace("kind: example.com/device", "kind: " + kind)


def every_gpu(smi=None):
    smi = H100 if smi is None else smi
    return [str(gpu["index"]) for gpu in smi["gpus"]] + [gpu["uuid"] for gpu in smi["gpus"]]


def reading(specs, toolkit=True, refresh_unit=True):
    return {"toolkit": toolkit, "refresh_unit": refresh_unit, "specs": specs}


def test_parse_reads_nvidias_output():
    parsed = cdi_spec.parse(NCT)
    assert parsed == {
        "cdi_version": "0.5.0",
        "kind": "example.com/device",
        "devices": ["0", "all"],
        "driver_versions": ["999.88.77"],
    }


def test_parse_reads_the_json_format_too():
    data = {
        "cdiVersion": "0.7.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0"}, {"name": "GPU-1"}, {"name": "all"}],
        "containerEdits": {"mounts": [{"hostPath": "/usr/lib64/libnvidia-ml.so.580.65.06"}]},
    }
    parsed = cdi_spec.parse(json.dumps(data, indent=2))
    assert parsed["devices"] == ["0", "GPU-1", "all"]
    assert parsed["driver_versions"] == ["580.65.06"]


@pytest.mark.parametrize("text", ["", "just text\n", "{not json", "devices:\n  - name: a\n"])
def test_parse_refuses_what_is_no_spec(text):
    with pytest.raises(cdi_spec.SpecError):
        cdi_spec.parse(text)


def test_fresh_spec_passes():
    found = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": spec_for(every_gpu())}), H100)
    assert found == [("pass", "/var/run/cdi/nvidia.yaml is for driver %s and lists every GPU" % DRIVER)]


def test_no_toolkit_skips_not_passes():
    [(status, detail)] = cdi_spec.findings(reading({}, toolkit=False), H100)
    assert status == "skip"
    assert "not installed" in detail


def test_missing_spec_fails_with_the_fix():
    [(status, detail)] = cdi_spec.findings(reading({}), H100)
    assert status == "fail"
    assert "systemctl restart nvidia-cdi-refresh.service" in detail
    [(status, detail)] = cdi_spec.findings(reading({}, refresh_unit=False), H100)
    assert "nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml" in detail


def test_spec_of_the_previous_driver_fails():
    old = spec_for(every_gpu(), driver="550.127.05")
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": old}), H100)
    assert status == "fail"
    assert "it is for driver 550.127.05, the loaded driver is %s" % DRIVER in detail
    assert detail.endswith("systemctl restart nvidia-cdi-refresh.service")


def test_a_gpu_missing_from_the_spec_fails():
    names = [name for name in every_gpu() if name not in ("7", H100["gpus"][7]["uuid"])]
    [(status, detail)] = cdi_spec.findings(reading({"/etc/cdi/nvidia.yaml": spec_for(names)}), H100)
    assert status == "fail"
    assert "it lists no device for GPU 7 (%s)" % H100["gpus"][7]["uuid"] in detail
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in detail


def test_index_names_alone_are_enough():
    names = [str(gpu["index"]) for gpu in H100["gpus"]]
    [(status, _detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": spec_for(names)}), H100)
    assert status == "pass"


def test_wrong_kind_or_no_driver_release_fails():
    other = spec_for(every_gpu(), kind="example.com/device")
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": other}), H100)
    assert status == "fail"
    assert "its kind is example.com/device" in detail
    bare = re.sub(r"\S*999\.88\.77\S*", "x", NCT).replace("kind: example.com/device", "kind: nvidia.com/gpu")
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": bare}), H100)
    assert status == "fail"
    assert "names no driver release" in detail


def test_stale_spec_in_the_other_directory_is_reported():
    specs = {
        "/var/run/cdi/nvidia.yaml": spec_for(every_gpu()),
        "/etc/cdi/nvidia.yaml": spec_for(every_gpu(), driver="550.127.05"),
    }
    found = cdi_spec.findings(reading(specs), H100)
    assert found[0][0] == "pass"
    status, detail = found[1]
    assert status == "warn"
    assert "/etc/cdi/nvidia.yaml is stale (runtimes read it too, after /var/run/cdi/nvidia.yaml)" in detail
    assert "remove it or run nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in detail


def test_unparsable_or_unreadable_spec_fails():
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": "garbage\n"}), H100)
    assert status == "fail"
    assert "does not parse" in detail
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": PermissionError("denied")}), H100)
    assert status == "fail"
    assert "cannot be read: denied" in detail


def mig_node(devices_per_gpu):
    smi = nvidia_smi_xml.parse((FIXTURES / "nvidia-smi" / "h100-sxm-8x-healthy.xml").read_text(encoding="utf-8"))
    for gpu in smi["gpus"]:
        gpu["mig_mode"] = {"current": gpu["index"] == 0, "pending": gpu["index"] == 0}
        gpu["mig_devices"] = devices_per_gpu if gpu["index"] == 0 else 0
    return smi


def test_mig_devices_must_be_listed():
    smi = mig_node(2)
    [(status, _detail)] = cdi_spec.findings(
        reading({"/var/run/cdi/nvidia.yaml": spec_for([*every_gpu(), "0:0", "0:1"])}), smi
    )
    assert status == "pass"
    [(status, detail)] = cdi_spec.findings(reading({"/var/run/cdi/nvidia.yaml": spec_for(every_gpu())}), smi)
    assert status == "fail"
    assert "it lists no MIG device 0:0, 0:1" in detail
    assert "issue 1828" in detail


def test_mig_devices_that_no_longer_exist_are_stale():
    specs = {"/var/run/cdi/nvidia.yaml": spec_for([*every_gpu(), "0:0", "0:1", "0:2"])}
    [(status, detail)] = cdi_spec.findings(reading(specs), mig_node(2))
    assert status == "fail"
    assert "MIG devices the GPUs do not have: 0:2" in detail


def test_read_takes_the_node_files(tmp_path):
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-ctk").write_text("")
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/nvidia.yaml").write_text(NCT)
    got = cdi_spec.read(str(tmp_path))
    assert got == {"toolkit": True, "refresh_unit": False, "specs": {"/etc/cdi/nvidia.yaml": NCT}}
    assert cdi_spec.read(str(tmp_path / "nothing")) == {"toolkit": False, "refresh_unit": False, "specs": {}}


def test_evaluate_judges_cdi_and_skips_it_when_not_read():
    inputs = {"smi": H100, "cdi": reading({"/var/run/cdi/nvidia.yaml": spec_for(every_gpu(), driver="1.2.3")})}
    result = health_checks.evaluate(inputs)
    [check] = [c for c in result["checks"] if c["name"] == "cdi_spec"]
    assert check["status"] == "fail"
    assert result["healthy"] is False
    [check] = [c for c in health_checks.evaluate({"smi": H100})["checks"] if c["name"] == "cdi_spec"]
    assert check["status"] == "skip"


def test_nvidia_smi_counts_mig_devices():
    """mig_devices/mig_device/index, the layout public nvidia-smi -q -x captures with MIG on show."""
    xml = (FIXTURES / "nvidia-smi" / "h200-1x-vm-idle.xml").read_text(encoding="utf-8")
    assert nvidia_smi_xml.parse(xml)["gpus"][0]["mig_devices"] == 0
    with_migs = xml.replace(
        "<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>",
        "<mig_devices><mig_device><index>0</index></mig_device><mig_device><index>1</index></mig_device></mig_devices>",
    )
    assert nvidia_smi_xml.parse(with_migs)["gpus"][0]["mig_devices"] == 2
