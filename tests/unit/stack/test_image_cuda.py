"""CUDA in container images (issue 19 item 3): every rule of image_cuda.py, at its boundaries.

The minimum drivers are the matrix's (CUDA release notes table, minor version compatibility floors
12.x 525.60.13 and 13.x R580); forward compatibility only on GPUs the matrix marks forward_compat.
"""

from __future__ import annotations

import copy
import datetime

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import image_cuda
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_schema import schema_errors
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    StackMatrix,
    default_matrix,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver import resolve, violations

TODAY = datetime.date(2026, 12, 2)


def run(request, gpu="h100-sxm", **kwargs):
    kwargs.setdefault("today", TODAY)
    return resolve(request, "Ubuntu", "22.04", gpu, **kwargs)


def found(request, gpu="h100-sxm", **kwargs):
    kwargs.setdefault("today", TODAY)
    return {v["rule"]: v["message"] for v in violations(request, "Ubuntu", "22.04", gpu, **kwargs)}


def runs_by(result):
    return {image["version"]: image["runs_by"] for image in result["image_cuda"]}


# ------------------------------------------------------------------ what the operator may write


@pytest.mark.parametrize(
    ("written", "version"),
    [
        ("12.8", "12.8"),
        ("13.0.2", "13.0.2"),
        (" 12.4 ", "12.4"),
        ("cu128", "12.8"),
        ("cu130", "13.0"),
        ("cu118", "11.8"),
        ("CU126", "12.6"),
    ],
)
def test_versions_and_wheel_tags(written, version):
    assert image_cuda.parse_image_cuda(written) == version


@pytest.mark.parametrize(
    ("written", "words"),
    [
        ("cu", "not a CUDA wheel tag"),
        ("cu12.8", "not a CUDA wheel tag"),
        ("cuda12", "not a CUDA wheel tag"),
        ("twelve", 'or a wheel tag such as "cu128"'),
        (12.8, "quote it"),
        (None, "must be a version string"),
    ],
)
def test_malformed_image_cuda_says_what_to_write(written, words):
    with pytest.raises(ValueError, match="image_cuda") as caught:
        image_cuda.parse_image_cuda(written)
    assert words in str(caught.value)


def test_malformed_entries_are_refused_each():
    messages = found({"driver": "580", "image_cuda": ["cux", "13.0"]})
    assert list(messages) == ["image_cuda.malformed"]
    assert "'cux'" in messages["image_cuda.malformed"]


@pytest.mark.parametrize("value", [{"cuda": "12.8"}, 12, True])
def test_image_cuda_must_be_a_list(value):
    messages = found({"driver": "580", "image_cuda": value})
    assert "must be a list" in messages["image_cuda.malformed"]


def test_a_single_string_is_one_image():
    assert runs_by(run({"driver": "580", "image_cuda": "cu130"})) == {"13.0": "driver"}


def test_empty_list_checks_nothing():
    assert run({"driver": "580", "image_cuda": []})["image_cuda"] == []


def test_unknown_cuda_is_refused_with_the_known_ones():
    messages = found({"driver": "580", "image_cuda": ["12.7"]})
    assert "image CUDA 12.7 is not in the compatibility matrix" in messages["image_cuda.unknown"]
    assert "12.6, 12.8" in messages["image_cuda.unknown"]
    both = violations({"driver": "580", "image_cuda": ["12.7", "cu139"]}, "Ubuntu", "22.04", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in both] == ["image_cuda.unknown", "image_cuda.unknown"]
    assert "image CUDA 13.9 (cu139)" in both[1]["message"]


def test_unknown_update_is_refused():
    messages = found({"driver": "580", "image_cuda": ["13.0.9"]})
    assert "not a known update of CUDA 13.0" in messages["image_cuda.unknown"]


def test_typo_in_the_new_keys_is_caught():
    request = {"driver": "580", "image_cdua": ["12.8"], "allow_forward_compt": True}
    messages = [v["message"] for v in violations(request, "Ubuntu", "22.04", "h100-sxm", today=TODAY)]
    assert any("unknown key 'image_cdua'" in m and "did you mean 'image_cuda'?" in m for m in messages)
    assert any("did you mean 'allow_forward_compat'?" in m for m in messages)


def test_allow_forward_compat_must_be_a_bool():
    messages = found({"driver": "580", "image_cuda": ["13.0"], "allow_forward_compat": "perhaps"})
    assert "allow_forward_compat must be true or false" in messages["request.malformed"]


# ------------------------------------------------------------------ rule 1: the driver meets the minimum


@pytest.mark.parametrize(
    ("driver", "image"),
    [
        ("570.86.15", "12.8"),  # above the GA minimum 570.26 (no published driver 570.26 exists)
        ("570.124.06", "12.8.1"),  # an update's minimum exactly
        ("580.65.06", "13.0"),
        ("580.65.06", "cu128"),  # an older major runs on a newer driver
        ("595.45.04", "13.2"),
        ("580.65.06", "11.8"),
    ],
)
def test_driver_at_the_minimum_runs_the_image(driver, image):
    result = run({"driver": driver, "image_cuda": [image]})
    (entry,) = result["image_cuda"]
    assert entry["runs_by"] == "driver"
    assert not any("image CUDA" in warning for warning in result["warnings"])


def test_reports_each_image_with_its_minimum():
    result = run({"driver": "580", "image_cuda": ["cu128", "13.0"]})
    assert result["image_cuda"] == [
        {"version": "12.8", "requested": "cu128", "min_driver": "570.26", "runs_by": "driver"},
        {"version": "13.0", "requested": "13.0", "min_driver": "580.65.06", "runs_by": "driver"},
    ]


def test_same_image_twice_is_checked_once():
    assert len(run({"driver": "580", "image_cuda": ["13.0", "13.0"]})["image_cuda"]) == 1


def test_a_minimum_inside_the_branch_becomes_the_nodes_floor():
    # 13.0.3 needs 580.126.20: a branch request must not take an older R580 release from the node's index.
    result = run({"driver": "580", "image_cuda": ["13.0.3"]})
    assert result["driver_request"]["floor"] == "580.126.20"
    assert set(result["driver_request"]) == {"branch", "exact", "floor", "skip", "upgrade"}


def test_the_highest_floor_wins():
    result = run({"driver": "580", "image_cuda": ["13.0", "13.0.2"]})
    assert result["driver_request"]["floor"] == "580.95.05"


def test_a_minimum_in_an_older_branch_sets_no_floor():
    assert run({"driver": "580", "image_cuda": ["12.8"]})["driver_request"]["floor"] is None


# ------------------------------------------------------------------ rule 2: minor version compatibility


@pytest.mark.parametrize(
    ("driver", "image", "needed"),
    [
        ("580.65.06", "13.2", "595.45.04"),  # 13.x on R580 or newer
        ("580.95.05", "13.0.3", "580.126.20"),  # an update's minimum above the exact release, same major
        ("535.309.01", "12.9", "575.51.03"),  # 12.x on 525.60.13 or newer
        ("570.211.01", "12.9", "575.51.03"),
    ],
)
def test_minor_version_compatibility_runs_with_a_warning(driver, image, needed):
    result = run({"driver": driver, "image_cuda": [image]})
    assert runs_by(result) == {image: "minor_version_compat"}
    (warning,) = [w for w in result["warnings"] if w.startswith("image CUDA")]
    assert "needs driver %s or newer" % needed in warning
    assert "minor version compatibility" in warning
    assert "PTX" in warning


def test_minor_version_compatibility_sets_no_floor_below_the_branch():
    assert run({"driver": "580", "image_cuda": ["13.2"]})["driver_request"]["floor"] is None


# ------------------------------------------------------------------ rule 3: forward compatibility or refusal


def test_newer_major_on_an_older_branch_is_refused_with_the_driver_it_needs():
    messages = found({"driver": "570", "image_cuda": ["cu128", "cu130"]})
    assert list(messages) == ["image_cuda.min_driver"]
    message = messages["image_cuda.min_driver"]
    assert message.startswith("image CUDA 13.0 (cu130) needs driver 580.65.06 or newer (R580+); ")
    assert "the request resolves to R570 (570.211.01)" in message
    assert "raise driver to R580 or newer" in message
    assert "build the image for CUDA 12.8 or older" in message
    assert "set allow_forward_compat: true if the image carries cuda-compat-13-0" in message


def test_refusal_names_minor_version_compatibility_when_it_would_help():
    data = copy.deepcopy(default_matrix().data)
    compat = next(e for e in data["cuda"]["minor_version_compat"] if e["major"] == 12)
    compat["min_driver"] = "570.26"  # a matrix where R535 is below the 12.x floor
    message = found({"driver": "535", "image_cuda": ["12.9"]}, matrix=StackMatrix(data))["image_cuda.min_driver"]
    assert "needs driver 575.51.03 or newer (R575+), or 570.26 or newer with minor version compatibility" in message


def test_refusal_does_not_repeat_the_floor_inside_the_same_branch():
    message = found({"driver": "570", "image_cuda": ["13.0"]})["image_cuda.min_driver"]
    assert "minor version compatibility" not in message


def test_forward_compat_on_a_data_center_gpu_when_asked():
    result = run({"driver": "570", "image_cuda": ["13.0"], "allow_forward_compat": True})
    assert runs_by(result) == {"13.0": "forward_compat"}
    (warning,) = [w for w in result["warnings"] if w.startswith("image CUDA")]
    assert "forward-compatibility package" in warning
    assert "cuda-compat-13-0" in warning
    assert "the host does not install it" in warning
    assert result["driver_request"]["floor"] is None


def test_forward_compat_accepts_the_yaml_words():
    assert runs_by(run({"driver": "570", "image_cuda": ["13.0"], "allow_forward_compat": "yes"})) == {
        "13.0": "forward_compat"
    }


def _matrix_with_workstation_gpu():
    """The shipped matrix plus an RTX workstation card, which NVIDIA gives no forward compatibility."""
    data = copy.deepcopy(default_matrix().data)
    data["gpus"].append(
        {
            "key": "rtx-6000-ada",
            "architecture": "ada",
            "nvswitch": False,
            "open_modules": "recommended",
            "min_branch": 525,
            "last_branch": None,
            "aliases": ["NVIDIA RTX 6000 Ada Generation"],
            "source": "unverified",
        }
    )
    return StackMatrix(data)


def test_forward_compat_refused_where_the_gpu_does_not_allow_it():
    matrix = _matrix_with_workstation_gpu()
    request = {"driver": "570", "image_cuda": ["13.0"], "allow_forward_compat": True}
    message = found(request, gpu="rtx-6000-ada", matrix=matrix)["image_cuda.min_driver"]
    assert "needs driver 580.65.06 or newer (R580+)" in message
    assert "cuda-compat-13-0) is not an option" in message
    assert "data center GPUs only" in message
    assert "rtx-6000-ada" in message


def test_no_forward_compat_hint_for_a_gpu_without_it():
    matrix = _matrix_with_workstation_gpu()
    message = found({"driver": "570", "image_cuda": ["13.0"]}, gpu="rtx-6000-ada", matrix=matrix)[
        "image_cuda.min_driver"
    ]
    assert "set allow_forward_compat" not in message


def test_allow_forward_compat_changes_nothing_where_the_driver_suffices():
    result = run({"driver": "580", "image_cuda": ["13.0"], "allow_forward_compat": True})
    assert runs_by(result) == {"13.0": "driver"}


# ------------------------------------------------------------------ the GPU architecture


@pytest.mark.parametrize("gpu", ["v100-sxm2", "v100-pcie"])
def test_cuda13_image_on_volta_is_refused_whatever_the_driver(gpu):
    for request in (
        {"driver": "580", "image_cuda": ["cu130"]},
        {"driver": "570", "image_cuda": ["cu130"], "allow_forward_compat": True},
    ):
        message = found(request, gpu=gpu)["image_cuda.gpu_architecture"]
        assert "image CUDA 13.0 (cu130) cannot run on %s (volta)" % gpu in message
        assert "build the image for CUDA 12.9 or older" in message


def test_cuda12_image_on_volta_runs():
    assert runs_by(run({"driver": "580", "image_cuda": ["cu129"]}, gpu="v100-sxm2")) == {"12.9": "driver"}


# ------------------------------------------------------------------ with and without the toolkit on the host


def test_images_are_checked_beside_a_host_toolkit():
    result = run({"driver": "580", "cuda": "13.0", "image_cuda": ["13.2"]})
    assert result["cuda_version"] == "13.0"
    assert runs_by(result) == {"13.2": "minor_version_compat"}


def test_image_problems_are_reported_when_the_driver_does_not_resolve():
    messages = found({"driver": "551", "image_cuda": ["12.7"]})
    assert {"driver.unknown_branch", "image_cuda.unknown"} <= set(messages)
    assert "image_cuda.min_driver" not in messages


def test_forward_compat_flag_defaults_to_false():
    matrix = _matrix_with_workstation_gpu()
    assert matrix.forward_compat_for_gpu(matrix.gpu("rtx-6000-ada")) is False
    assert matrix.forward_compat_for_gpu(matrix.gpu("h100-sxm")) is True
    assert matrix.forward_compat_for_gpu(None) is False


def test_every_shipped_gpu_is_a_data_center_gpu_with_forward_compat():
    # The matrix lists data center GPUs only; each says so with a source.
    for entry in default_matrix().data["gpus"]:
        assert entry.get("forward_compat") is True, entry["key"]
        assert entry.get("forward_compat_source") == "cuda_forward_compat", entry["key"]


# ------------------------------------------------------------------ the matrix's forward_compat field


def test_forward_compat_must_be_a_bool():
    data = copy.deepcopy(default_matrix().data)
    data["gpus"][0]["forward_compat"] = "yes"
    assert any("forward_compat: must be true or false" in error for error in schema_errors(data))


def test_forward_compat_source_needs_the_field():
    data = copy.deepcopy(default_matrix().data)
    del data["gpus"][0]["forward_compat"]
    assert any("'forward_compat_source' names a source for 'forward_compat'" in e for e in schema_errors(data))


def test_forward_compat_source_must_be_defined():
    data = copy.deepcopy(default_matrix().data)
    data["gpus"][0]["forward_compat_source"] = "somewhere"
    assert any("forward_compat_source 'somewhere' is not defined" in e for e in schema_errors(data))
