"""Schema test of the shipped compatibility matrix, and proof that broken matrices are caught."""

from __future__ import annotations

import copy

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_schema import normalize_name, schema_errors
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    DEFAULT_MATRIX_PATH,
    MatrixError,
    StackMatrix,
    load_matrix,
)


@pytest.fixture(scope="module")
def raw():
    with open(DEFAULT_MATRIX_PATH, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture
def broken(raw):
    return copy.deepcopy(raw)


def test_shipped_matrix_is_valid(raw):
    assert schema_errors(raw) == []


def test_default_path_is_repo_matrix():
    assert DEFAULT_MATRIX_PATH.parts[-2:] == ("matrix", "nvidia_stack.yml")
    assert DEFAULT_MATRIX_PATH.is_file()


def test_shipped_matrix_covers_the_issue(raw):
    matrix = StackMatrix(raw)
    assert {535, 550, 570, 575, 580, 595, 610, 615, 620} <= set(matrix.branches)
    assert {"11.8", "12.0", "12.4", "12.8", "13.0"} <= set(matrix.cuda_releases)
    assert "12.7" not in matrix.cuda_releases
    for key in (
        "a100-sxm4",
        "a800-sxm4",
        "a30",
        "l4",
        "l40s",
        "h100-pcie",
        "h100-sxm",
        "h800-sxm",
        "h200-sxm",
        "gh200",
        "b200",
        "gb200",
        "v100-sxm2",
    ):
        assert key in matrix.gpus, key
    assert {os["id"] for os in matrix.operating_systems} == {"ubuntu2204", "ubuntu2404", "debian12", "rhel8", "rhel9"}
    assert {entry["major"] for entry in matrix.dcgm} == {3, 4}


def test_every_value_names_a_defined_source(raw):
    # schema_errors checks this; make sure the check is active by counting the entries it sees.
    sources = set(raw["sources"])
    entries = raw["driver_branches"] + raw["gpus"] + raw["nccl"] + raw["dcgm"] + raw["packaging"]
    entries += raw["architectures"]
    entries += [release for branch in raw["driver_branches"] for release in branch["releases"]]
    entries += [bad for branch in raw["driver_branches"] for bad in branch["known_bad"]]
    assert entries
    assert all(entry["source"] in sources for entry in entries)
    updates = [update for release in raw["cuda"]["releases"] for update in release["updates"]]
    assert all(update.get("source", "cuda_release_notes") in sources for update in updates)
    builds = [source for entry in raw["nccl"] for source in entry.get("build_sources", {}).values()]
    assert builds
    assert all(source in sources for source in builds)


# ------------------------------------------------------------------ the matrix audit (issue 19)

AUDITED_RELEASES = {
    535: ["535.274.02", "535.288.01", "535.309.01"],
    570: ["570.211.01"],
    580: ["580.126.16", "580.159.04", "580.167.08", "580.173.10", "580.178.04"],
    595: ["595.71.05", "595.91.07", "595.99.02"],
    610: ["610.43.02", "610.57.04"],
    615: ["615.71.09", "615.71.10", "615.78.08"],
    620: ["620.70.06"],
}


@pytest.mark.parametrize(("branch", "versions"), sorted(AUDITED_RELEASES.items()))
def test_audited_releases_are_listed_newest_last(branch, versions):
    releases = load_matrix().releases(branch)
    assert set(versions) <= set(releases)
    assert releases[-1] == versions[-1]


def test_570_26_is_a_cuda_minimum_not_a_release():
    matrix = load_matrix()
    assert "570.26" not in matrix.releases(570)
    assert matrix.cuda_min_driver("12.8") == "570.26"


def test_r615_is_a_feature_branch_of_cuda_13(raw):
    entry = load_matrix().branch(615)
    assert (entry["kind"], entry["eol"], entry["cuda_major_max"]) == ("feature", None, 13)
    assert entry["cuda_major_max_source"] == "unverified"
    assert raw["sources"][entry["source"]]["url"].startswith("https://github.com/NVIDIA/")


@pytest.mark.parametrize(
    ("cuda", "min_driver", "source"),
    [
        ("12.3.2", "545.23.08", "cuda_runfiles"),
        ("12.8.2", "570.211.01", "cuda_runfiles"),
        ("12.9.2", "575.57.08", "cuda_runfiles"),
        ("13.0.3", "580.126.20", "cuda_runfiles"),
        ("13.1.1", "590.48.01", "cuda_release_notes"),
        ("13.1.2", "590.48.01", "cuda_runfiles"),
        ("13.2.1", "595.58.03", "cuda_release_notes"),
        ("13.2.2", "595.71.05", "cuda_release_notes"),
    ],
)
def test_audited_cuda_updates(cuda, min_driver, source):
    matrix = load_matrix()
    assert matrix.cuda_min_driver(cuda) == min_driver
    update = next(u for u in matrix.cuda_releases[cuda[: cuda.rindex(".")]]["updates"] if u["version"] == cuda)
    assert update.get("source", "cuda_release_notes") == source


@pytest.mark.parametrize(
    ("nccl", "cuda"),
    [("2.25.1", "12.2"), ("2.22.3", "12.6"), ("2.28.9", "13.0"), ("2.29.2", "13.1"), ("2.31.2", "12.9")],
)
def test_audited_nccl_builds(nccl, cuda):
    assert nccl in load_matrix().nccl_for_cuda(cuda)


def test_every_branch_carries_known_bad_and_none_is_listed(raw):
    assert all(entry["known_bad"] == [] for entry in raw["driver_branches"])
    matrix = load_matrix()
    assert matrix.known_bad(580) == []
    assert matrix.known_bad(999) == []


@pytest.mark.parametrize("arch", ["maxwell", "pascal", "volta"])
def test_cuda13_and_dcgm_cuda13_end_before_turing(arch):
    entry = load_matrix().architecture(arch)
    assert (entry["cuda_major_max"], entry["dcgm_cuda_major_max"]) == (12, 12)
    assert entry["source"] == "cuda13_release_notes"
    assert entry["dcgm_cuda_major_max_source"] == "dcgm_cuda12_pre_turing"


def test_every_gpu_architecture_has_its_limits():
    matrix = load_matrix()
    for gpu in matrix.gpus.values():
        assert matrix.architecture(gpu["architecture"]) is not None, gpu["key"]
    assert matrix.cuda_major_max_for_gpu(matrix.gpu("v100-sxm2")) == 12
    assert matrix.dcgm_cuda_major_max_for_gpu(matrix.gpu("v100-sxm2")) == 12
    assert matrix.cuda_major_max_for_gpu(matrix.gpu("h100-sxm")) is None
    assert matrix.dcgm_cuda_major_max_for_gpu(matrix.gpu("h100-sxm")) is None
    assert matrix.cuda_major_max_for_gpu(None) is None


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("nvidia  h100 80gb hbm3", "h100-sxm"),
        ("h100", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2"),
        ("Tesla V100-PCIE-32GB", "v100-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
    ],
)
def test_gpu_lookup(name, key):
    assert load_matrix().gpu(name)["key"] == key


def test_nvswitch_only_on_sxm_forms():
    matrix = load_matrix()
    assert matrix.gpu("NVIDIA H100 80GB HBM3")["nvswitch"] is True
    assert matrix.gpu("NVIDIA H100 PCIe")["nvswitch"] is False
    assert matrix.gpu("NVIDIA H200 NVL")["nvswitch"] is False
    assert matrix.gpu("NVIDIA H200")["nvswitch"] is True


def test_unknown_gpu_is_none():
    assert load_matrix().gpu("NVIDIA RTX 9999") is None
    assert load_matrix().gpu(None) is None


@pytest.mark.parametrize(
    ("distribution", "version", "os_id"),
    [
        ("Ubuntu", "22.04", "ubuntu2204"),
        ("Ubuntu", "24.04", "ubuntu2404"),
        ("Debian", "12", "debian12"),
        ("Debian", "12.5", "debian12"),
        ("RedHat", "9.4", "rhel9"),
        ("Rocky", "9.4", "rhel9"),
        ("AlmaLinux", "8.10", "rhel8"),
        ("rocky", "8", "rhel8"),
    ],
)
def test_os_lookup(distribution, version, os_id):
    assert load_matrix().operating_system(distribution, version)["id"] == os_id


@pytest.mark.parametrize(
    ("distribution", "version"),
    [
        ("Ubuntu", "20.04"),
        ("Ubuntu", "22.10"),
        ("Debian", "11"),
        ("Rocky", "10.0"),
        ("Fedora", "40"),
        ("Debian", "120"),
    ],
)
def test_os_lookup_unknown(distribution, version):
    assert load_matrix().operating_system(distribution, version) is None


def test_cuda_min_driver_lookup():
    matrix = load_matrix()
    assert matrix.cuda_min_driver("12.4") == "550.54.14"
    assert matrix.cuda_min_driver("12.4.1") == "550.54.15"
    assert matrix.cuda_min_driver("12.7") is None
    assert matrix.cuda_min_driver("12.4.9") is None


def test_normalize_name():
    assert normalize_name(" NVIDIA  H100\t80GB ") == "nvidiah10080gb"


# ------------------------------------------------------------------ broken matrices are caught


def _errors(data):
    return "\n".join(schema_errors(data))


def test_unknown_source_id(broken):
    broken["driver_branches"][0]["source"] = "nowhere"
    assert "source 'nowhere' is not defined" in _errors(broken)


def test_field_source_without_field(broken):
    broken["gpus"][0]["nvlink5_source"] = "stack_facts"
    assert "'nvlink5_source' names a source for 'nvlink5'" in _errors(broken)


def test_unknown_key_typo(broken):
    broken["gpus"][0]["nvswtich"] = True
    assert "unknown key 'nvswtich'" in _errors(broken)


def test_missing_key(broken):
    del broken["driver_branches"][0]["kind"]
    assert "missing key 'kind'" in _errors(broken)


def test_release_of_wrong_branch(broken):
    broken["driver_branches"][0]["releases"].append({"version": "550.54.15", "source": "cuda_release_notes"})
    assert "550.54.15 is not a release of R535" in _errors(broken)


def test_releases_out_of_order(broken):
    broken["driver_branches"][0]["releases"].reverse()
    assert "oldest first" in _errors(broken)


def test_unquoted_version_float(broken):
    broken["cuda"]["releases"][0]["version"] = 11.8
    assert "must be a quoted string" in _errors(broken)


def test_malformed_eol(broken):
    broken["driver_branches"][0]["eol"] = "June 2026"
    assert "YYYY-MM" in _errors(broken)


def test_production_branch_needs_eol(broken):
    broken["driver_branches"][0]["eol"] = None
    assert "have a published end of life" in _errors(broken)


def test_cuda_update_min_driver_decreasing(broken):
    broken["cuda"]["releases"][-1]["updates"].append({"version": "13.2.1", "min_driver": "590.44.01"})
    assert "lower than the previous update" in _errors(broken)


def test_nccl_for_unknown_cuda(broken):
    broken["nccl"][0]["cuda"] = ["12.7"]
    assert "CUDA 12.7 is not in cuda.releases" in _errors(broken)


def test_duplicate_gpu_alias(broken):
    broken["gpus"][1]["aliases"].append("NVIDIA H100 80GB HBM3")
    assert "is also used by" in _errors(broken)


def test_bad_open_modules_value(broken):
    broken["gpus"][0]["open_modules"] = "maybe"
    assert "must be one of required, recommended, unsupported" in _errors(broken)


def test_packaging_overlap_is_caught(broken):
    for rule in broken["packaging"]:
        if rule["component"] == "fabricmanager" and "rhel" in rule["flavors"] and rule["branches"] == [535, 575]:
            rule["branches"] = [535, 580]
    assert "fabricmanager/rhel R580 open matches several rules" in _errors(broken)


def test_packaging_gap_at_r575_is_caught(broken):
    # The class of bug that left R575 without Fabric Manager: a range that stops at R570.
    for rule in broken["packaging"]:
        if rule["component"] == "fabricmanager" and "ubuntu" in rule["flavors"] and rule["branches"] == [535, 575]:
            rule["branches"] = [535, 570]
    assert "fabricmanager/ubuntu R575 open matches no rule" in _errors(broken)


def test_unknown_placeholder(broken):
    broken["packaging"][0]["packages"][0]["version"] = "{drivr}-1"
    assert "unknown placeholder {drivr}" in _errors(broken)


def _branch(data, number):
    return next(entry for entry in data["driver_branches"] if entry["branch"] == number)


def test_known_bad_is_read_by_the_accessor(broken):
    _branch(broken, 580)["known_bad"] = [
        {"version": "580.126.16", "reason": "pulled by NVIDIA", "source": "stack_facts"},
        {"version": "580.173.02", "reason": "FM does not start", "source": "unverified"},
    ]
    assert schema_errors(broken) == []
    assert StackMatrix(broken).known_bad(580) == ["580.126.16", "580.173.02"]


def test_known_bad_may_be_left_out(broken):
    del _branch(broken, 580)["known_bad"]
    assert schema_errors(broken) == []
    assert StackMatrix(broken).known_bad(580) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"version": "570.211.01", "reason": "x", "source": "stack_facts"}, "570.211.01 is not a release of R580"),
        ({"version": "580", "reason": "x", "source": "stack_facts"}, "must be an exact release, not a branch"),
        ({"version": "580.126.16", "reason": "x", "source": "nowhere"}, "source 'nowhere' is not defined"),
        ({"version": "580.126.16", "source": "stack_facts"}, "missing key 'reason'"),
        ({"version": "580.126.16", "reason": " ", "source": "stack_facts"}, "say why the release is skipped"),
        ({"version": 580.1, "reason": "x", "source": "stack_facts"}, "must be a quoted string"),
    ],
)
def test_known_bad_entries_are_checked(broken, bad, message):
    _branch(broken, 580)["known_bad"] = [bad]
    assert message in _errors(broken)


def test_known_bad_must_be_a_list_in_order(broken):
    _branch(broken, 580)["known_bad"] = [
        {"version": "580.173.02", "reason": "x", "source": "stack_facts"},
        {"version": "580.126.16", "reason": "x", "source": "stack_facts"},
    ]
    assert "known_bad: entries must be listed oldest first" in _errors(broken)
    _branch(broken, 580)["known_bad"] = "580.126.16"
    assert "known_bad: must be a list" in _errors(broken)


def test_gpu_architecture_must_be_listed(broken):
    broken["gpus"][0]["architecture"] = "kepler"
    assert "'kepler' is not under architectures:" in _errors(broken)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cuda_major_max": "12"}, "cuda_major_max: must be an integer"),
        ({"dcgm_cuda_major_max": None}, "dcgm_cuda_major_max: must be an integer"),
        ({"source": "nowhere"}, "source 'nowhere' is not defined"),
        ({"sm": 70}, "unknown key 'sm'"),
    ],
)
def test_architecture_entries_are_checked(broken, change, message):
    broken["architectures"][2].update(change)
    assert message in _errors(broken)


def test_architecture_listed_twice(broken):
    broken["architectures"].append(dict(broken["architectures"][0]))
    assert "architectures[maxwell]: is listed twice" in _errors(broken)


def test_matrix_without_architectures_sets_no_limit(broken):
    del broken["architectures"]
    matrix = StackMatrix(broken)
    assert matrix.cuda_major_max_for_gpu(matrix.gpu("v100-sxm2")) is None


@pytest.mark.parametrize(
    ("build_sources", "message"),
    [
        ({"12.9": "stack_facts"}, "CUDA 12.9 is not one of the release's builds"),
        ({"12.2": "nowhere"}, "source 'nowhere' is not defined"),
        (["12.2"], "must map a CUDA build to a source id"),
    ],
)
def test_nccl_build_sources_are_checked(broken, build_sources, message):
    entry = next(e for e in broken["nccl"] if e["version"] == "2.25.1")
    entry["build_sources"] = build_sources
    assert message in _errors(broken)


def test_packaging_covers_r615(raw):
    # R615 sits inside open-ended ranges: every component and flavor resolves to exactly one rule.
    matrix = StackMatrix(raw)
    for component in ("driver", "fabricmanager", "nvsdm", "imex", "cuda", "nccl", "dcgm4"):
        for flavor in ("ubuntu", "debian", "rhel"):
            for modules in ("open", "proprietary"):
                assert matrix.packaging_rule(component, flavor, 615, modules) is not None, (component, flavor)


def test_schema_version(broken):
    broken["schema_version"] = 2
    assert "schema_version: must be 1" in _errors(broken)


def test_not_a_mapping():
    assert schema_errors(["x"]) == ["matrix: must be a mapping at the top level"]


def test_load_matrix_reports_every_error(tmp_path, broken):
    broken["schema_version"] = 2
    broken["gpus"][0]["nvswtich"] = True
    path = tmp_path / "matrix.yml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    assert len(caught.value.errors) == 2
    assert str(path) in str(caught.value)


def test_load_matrix_missing_file(tmp_path):
    with pytest.raises(MatrixError, match=r"cannot read the file"):
        load_matrix(tmp_path / "absent.yml")


def test_load_matrix_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("a: [", encoding="utf-8")
    with pytest.raises(MatrixError, match=r"not valid YAML"):
        load_matrix(path)


def test_matrix_at_loads_a_path_once(tmp_path):
    import shutil

    from ansible_collections.gpuops.cluster.plugins.module_utils.stack import stack_matrix

    copy = tmp_path / "nvidia_stack.yml"
    shutil.copy(stack_matrix.DEFAULT_MATRIX_PATH, copy)
    assert stack_matrix.matrix_at(str(copy)) is stack_matrix.matrix_at(str(copy))
    assert stack_matrix.matrix_at(None) is stack_matrix.default_matrix()
    with pytest.raises(stack_matrix.MatrixError, match="cannot read the file"):
        stack_matrix.matrix_at(str(tmp_path / "absent.yml"))
