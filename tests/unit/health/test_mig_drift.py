"""The mig_layout check: a node whose MIG layout differs from the declared one fails, naming the GPU and the difference.

Fixtures: nvidia-smi/h200-1x-mig-3211.xml (the real H200 capture with MIG on: 3g.71gb, 2g.35gb, 2 x 1g.18gb; PCI
device 0x233510DE) and nvidia-smi/h200-1x-vm-idle.xml (an H200 with MIG off), both described in
tests/fixtures/README.md; the declared layouts are mig-parted v1 configs as an operator writes them.
"""

import copy
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.mig import mig_declared, mig_profile_set
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    mig_drift,
    mig_health,
    nvidia_smi_xml,
)

from .test_mig_health import H200_SET, MIG_XML, check, evaluate

IDLE_XML = "nvidia-smi/h200-1x-vm-idle.xml"
AS_READ = {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}


def declared(mig_devices=None, enabled=True, devices="all", **extra):
    entry = {"devices": devices, "mig-enabled": enabled, **extra}
    if enabled:
        entry["mig-devices"] = dict(AS_READ if mig_devices is None else mig_devices)
    return {"config": "pool", "entries": [entry]}


def layout_check(text, mig_declared_value, profile_set="h200"):
    """``profile_set``: "h200" (the H200's profile set), another set, or None (no profile names)."""
    options = {"mig_declared": mig_declared_value}
    if profile_set is not None:
        options["mig_profile_set"] = H200_SET if profile_set == "h200" else profile_set
    return check(evaluate(text, options=options), "mig_layout")


def test_the_declared_layout_as_read_passes(fixture_text):
    found = layout_check(fixture_text(MIG_XML), declared())
    assert found["status"] == "pass"
    assert found["gpu_index"] == 0
    assert found["detail"] == "GPU 0: declared 2x 1g.18gb + 1x 2g.35gb + 1x 3g.71gb, found the same"


def test_other_profiles_fail_naming_the_gpu_and_both_layouts(fixture_text):
    found = layout_check(fixture_text(MIG_XML), declared({"1g.18gb": 7}))
    assert found["status"] == "fail"
    assert found["detail"] == "GPU 0: declared 7x 1g.18gb, found 2x 1g.18gb + 1x 2g.35gb + 1x 3g.71gb"
    # the same instance count, one profile different
    found = layout_check(fixture_text(MIG_XML), declared({"3g.71gb": 1, "1g.35gb": 1, "1g.18gb": 2}))
    assert found["status"] == "fail"
    assert "declared 2x 1g.18gb + 1x 1g.35gb + 1x 3g.71gb, found 2x 1g.18gb + 1x 2g.35gb" in found["detail"]


def test_compute_instances_of_the_declared_devices_make_one_gpu_instance(fixture_text):
    # 1c.3g.71gb: 3 is one 3g.71gb GPU instance with three compute instances (mig_layout.gpu_instances)
    found = layout_check(fixture_text(MIG_XML), declared({"1c.3g.71gb": 3, "2g.35gb": 1, "1g.18gb": 2}))
    assert found["status"] == "pass", found


def test_mig_declared_on_with_the_mode_off_fails_and_says_a_pending_mode_needs_a_reset(fixture_text):
    text = fixture_text(IDLE_XML)
    found = layout_check(text, declared())
    assert found["status"] == "fail"
    assert found["detail"] == "GPU 0: MIG declared on, mode is off: apply the layout (gpuops.cluster.gpu_mig)"
    pending = re.sub(r"<pending_mig>Disabled</pending_mig>", "<pending_mig>Enabled</pending_mig>", text)
    assert pending != text
    found = layout_check(pending, declared())
    assert found["status"] == "fail"
    assert found["detail"] == "GPU 0: MIG declared on, mode is off (pending on: reset the GPU or reboot)"
    assert found["action"] == "reset_gpu"


def test_mig_declared_off_passes_a_gpu_with_it_off_and_fails_one_with_it_on(fixture_text):
    off = layout_check(fixture_text(IDLE_XML), declared(enabled=False))
    assert (off["status"], off["detail"]) == ("pass", "GPU 0: MIG declared off (config pool), mode is off")
    on = layout_check(fixture_text(MIG_XML), declared(enabled=False))
    assert on["status"] == "fail"
    assert on["detail"].startswith("GPU 0: MIG declared off, mode is on")


def test_a_pending_mode_that_undoes_the_declared_one_fails(fixture_text):
    text = re.sub(r"<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>", fixture_text(MIG_XML))
    found = layout_check(text, declared())
    assert found["status"] == "fail"
    assert "MIG declared on, mode is on but pending off: the next GPU reset turns it off" in found["detail"]


def test_no_declared_layout_skips_and_a_gpu_no_entry_applies_to_is_skipped(fixture_text):
    text = fixture_text(MIG_XML)
    assert layout_check(text, None)["status"] == "skip"
    assert layout_check(text, None)["detail"] == "no MIG layout declared (gpuops_mig)"
    other_gpus = declared(devices=[1, 2])
    assert layout_check(text, other_gpus)["status"] == "skip"
    other_model = declared(**{"device-filter": ["0x233010DE"]})  # an H100 SXM entry: not this H200
    found = layout_check(text, other_model)
    assert found["status"] == "skip"
    assert "no entry of gpuops_mig config pool applies to it" in found["detail"]
    this_model = declared(**{"device-filter": "0x233510DE"})
    assert layout_check(text, this_model)["status"] == "pass"


def test_the_last_matching_entry_wins_as_gpu_mig_applies_it(fixture_text):
    layout = declared({"1g.18gb": 7})
    layout["entries"].append({"devices": [0], "mig-enabled": True, "mig-devices": dict(AS_READ)})
    assert layout_check(fixture_text(MIG_XML), layout)["status"] == "pass"
    layout["entries"].reverse()
    assert layout_check(fixture_text(MIG_XML), layout)["status"] == "fail"


def test_unnamed_instances_with_the_count_equal_warn_that_they_cannot_be_compared(fixture_text):
    found = layout_check(fixture_text(MIG_XML), declared(), profile_set=None)
    assert found["status"] == "warn"
    assert "cannot be compared, no profile set to name them by (mig_profile_set)" in found["detail"]
    assert "GI 2 (71424 MiB, profile not named)" in found["detail"]


def test_unnamed_instances_with_the_count_different_fail(fixture_text):
    found = layout_check(fixture_text(MIG_XML), declared({"1g.18gb": 7}), profile_set=None)
    assert found["status"] == "fail"
    assert found["detail"].endswith("the instance count differs")
    assert found["detail"].startswith("GPU 0: declared 7x 1g.18gb, found ")


def gpu_and_layout(fixture_text, candidates):
    """The fixture's GPU and its layout, GI 2 read as ambiguous between ``candidates``."""
    gpu = nvidia_smi_xml.parse(fixture_text(MIG_XML))["gpus"][0]
    mig = copy.deepcopy(mig_health.layout(gpu, H200_SET))
    first = mig["gpu_instances"][0]
    assert first["profile"] == "3g.71gb"
    first["profile"] = None
    first["profile_candidates"] = candidates
    return gpu, mig


def test_an_ambiguous_instance_warns_when_a_candidate_fits_and_fails_when_none_does(fixture_text):
    gpu, mig = gpu_and_layout(fixture_text, ["3g.71gb", "4g.71gb"])
    status, detail, _action = mig_drift.judge(declared(), gpu, mig)
    assert status == "warn"
    assert "cannot be compared, their memory and engines fit several profiles (GI 2: 3g.71gb or 4g.71gb)" in detail
    status, detail, _action = mig_drift.judge(declared({"7g.141gb": 1, "2g.35gb": 1, "1g.18gb": 2}), gpu, mig)
    assert status == "fail"
    assert detail.endswith("their memory and engines fit none of 7g.141gb")


def test_named_instances_that_differ_fail_even_beside_an_unnamed_one(fixture_text):
    gpu, mig = gpu_and_layout(fixture_text, ["3g.71gb", "4g.71gb"])
    status, detail, _action = mig_drift.judge(declared({"3g.71gb": 1, "1g.35gb": 1, "1g.18gb": 2}), gpu, mig)
    assert status == "fail"
    assert detail.endswith("the named profiles differ")


def test_mig_declared_on_a_gpu_without_mig_fails(fixture_text):
    found = layout_check(fixture_text("nvidia-smi/l40s-1x.xml"), declared(), profile_set=None)
    assert found["status"] == "fail"
    assert found["detail"] == "GPU 0: MIG declared on, the GPU has no MIG mode"


def test_the_check_can_be_skipped_and_is_skipped_without_nvidia_smi(fixture_text):
    drifted = {"mig_declared": declared({"1g.18gb": 7}), "mig_profile_set": H200_SET}
    assert check(evaluate(fixture_text(MIG_XML), options=drifted), "mig_layout")["status"] == "fail"
    skipped = check(evaluate(fixture_text(MIG_XML), options=dict(drifted, skip_checks=["mig_layout"])), "mig_layout")
    assert (skipped["status"], skipped["detail"]) == ("skip", "skipped by skip_checks")
    without = health_checks.evaluate({"smi": None}, drifted)
    assert (check(without, "mig_layout")["status"], without["healthy"]) == ("skip", False)


# --- the filter ------------------------------------------------------------------------------------------------


def spec(mig_devices):
    return {
        "version": "v1",
        "mig-configs": {"pool": [{"devices": "all", "mig-enabled": True, "mig-devices": mig_devices}]},
    }


def test_the_filter_selects_the_config_and_the_check_reads_it(fixture_text):
    value = mig_declared(spec(dict(AS_READ)), "pool", "NVIDIA H200")
    assert value == {"config": "pool", "entries": spec(dict(AS_READ))["mig-configs"]["pool"]}
    found = layout_check(fixture_text(MIG_XML), value, profile_set=mig_profile_set("NVIDIA H200"))
    assert found["status"] == "pass", found


@pytest.mark.parametrize(
    ("config", "layout", "message"),
    [
        ("other", spec({"1g.18gb": 7}), "gpuops_mig_config is 'other', which gpuops_mig does not hold"),
        ("pool", spec({"1g.18gb": 8}), "8 x 1g.18gb, at most 7 fit"),
        ("pool", spec({"1g.10gb": 1}), "1g.10gb: no such MIG profile"),
    ],
)
def test_the_filter_refuses_a_layout_validation_refuses(config, layout, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        mig_declared(layout, config, "NVIDIA H200")
