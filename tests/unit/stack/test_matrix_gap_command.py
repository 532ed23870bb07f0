"""The matrix gap's entry points (issue 27 item 4): the controller command tools/matrix_gap.py (make matrix-gap) on
a downloaded index, and the filters playbooks/matrix_gap.yml reads a node's index with (plugins/filter/matrix_gap.py).

Listings are the real excerpts of tests/fixtures/package_index/ (sources in its README.md).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import matrix_gap as gap_filters
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import DEFAULT_MATRIX_PATH

REPO = Path(__file__).resolve().parents[3]
LISTINGS = REPO / "tests" / "fixtures" / "package_index"
POLICY = LISTINGS / "ubuntu2204-apt-policy-libnccl-dev.txt"
MADISON = LISTINGS / "ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt"


def load_command():
    spec = importlib.util.spec_from_file_location("matrix_gap_command", REPO / "tools" / "matrix_gap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMAND = load_command()


@pytest.fixture
def matrix_without_2_28_7(tmp_path):
    """An operator's copy of the matrix without NCCL 2.28.7, which the ubuntu2204 libnccl-dev listing holds."""
    data = yaml.safe_load(DEFAULT_MATRIX_PATH.read_text(encoding="utf-8"))
    data["nccl"] = [entry for entry in data["nccl"] if entry["version"] != "2.28.7"]
    path = tmp_path / "matrix.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_gap_is_a_report_table_and_json(matrix_without_2_28_7, tmp_path, capsys):
    out = tmp_path / "gap.json"
    rc = COMMAND.main([str(POLICY), "--matrix", str(matrix_without_2_28_7), "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "nccl       2.28.7" in text
    assert 'add {version: "2.28.7", cuda: ["12.9", "13.0"], source: <id>} to nccl (oldest first)' in text
    report = json.loads(out.read_text())
    assert [gap["version"] for gap in report["gaps"] if gap["component"] == "nccl"][:1] == ["2.28.7"]
    assert report["format"] == "apt-cache policy"


def test_fail_on_gap_exits_1_only_when_there_is_a_gap(matrix_without_2_28_7, capsys):
    assert COMMAND.main([str(POLICY), "--matrix", str(matrix_without_2_28_7), "--fail-on-gap"]) == 1
    capsys.readouterr()
    # 610.57.04, 595.91.07 and 590.48.01 are all in the collection's matrix
    assert COMMAND.main([str(MADISON), "--fail-on-gap"]) == 0
    assert "No gap" in capsys.readouterr().out


def test_json_on_stdout(capsys):
    assert COMMAND.main([str(MADISON), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "apt-cache madison"
    assert report["watched"]["driver"] == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/nonexistent/Packages"], "cannot read /nonexistent/Packages: no such file or directory"),
        ([str(REPO / "README.md")], "unknown format"),
        ([str(MADISON), "--matrix", "/nonexistent/matrix.yml"], "cannot read the file"),
    ],
)
def test_bad_input_exits_2_with_what_to_fix(argv, message, capsys):
    assert COMMAND.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("matrix-gap: ")
    assert message in captured.err


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed")
def test_zstd_repodata_is_read_through_the_zstd_tool(tmp_path, capsys):
    # The versions of rhel9-dnf-repoquery-kmod.txt in createrepo_c's primary.xml layout (no NVIDIA primary.xml was
    # found to keep; tests/fixtures/package_index/README.md).
    primary = (
        '<?xml version="1.0"?><metadata xmlns="http://linux.duke.edu/metadata/common" packages="1">'
        '<package type="rpm"><name>kmod-nvidia-open-dkms</name><arch>noarch</arch>'
        '<version epoch="3" ver="595.71.05" rel="1.el9"/></package></metadata>'
    )
    (tmp_path / "repodata").mkdir()
    zstd = subprocess.run(["zstd", "-q", "-c"], input=primary.encode(), capture_output=True, check=True)
    (tmp_path / "repodata" / "x-primary.xml.zst").write_bytes(zstd.stdout)
    (tmp_path / "repodata" / "repomd.xml").write_text(
        '<repomd xmlns="http://linux.duke.edu/metadata/repo"><data type="primary">'
        '<location href="repodata/x-primary.xml.zst"/></data></repomd>'
    )
    assert COMMAND.main([str(tmp_path), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "rpm repodata"
    assert report["watched"]["driver"] == 1


def test_the_command_runs_as_a_script():
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "matrix_gap.py"), str(MADISON)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Matrix gaps in %s (apt-cache madison: 3 package versions read" % MADISON)


# ----------------------------------------------------------------------------- the playbook's filters


def test_query_on_apt_names_only_the_matrix_packages_the_node_knows():
    names = ["vim", "nvidia-open", "cuda-toolkit-13-0", "cuda-toolkit", "libnccl2", "nvidia-fabricmanager"]
    assert gap_filters.matrix_gap_query("apt", names) == [
        "apt-cache",
        "madison",
        "cuda-toolkit-13-0",
        "libnccl2",
        "nvidia-open",
    ]
    assert gap_filters.matrix_gap_query("apt", ["vim"]) is None


def test_query_on_dnf_lists_every_stream_with_globs():
    argv = gap_filters.matrix_gap_query("dnf")
    assert argv[:5] == ["dnf", "repoquery", "--quiet", "--showduplicates", "--disable-modular-filtering"]
    assert argv[5:7] == ["--qf", "%{name} %{epoch}:%{version}-%{release} %{repoid}\\n"]
    assert {"cuda-toolkit-*", "libnccl", "nvidia-driver", "kmod-nvidia-open-dkms"} <= set(argv[7:])


def test_report_of_a_node_read(matrix_without_2_28_7):
    madison = "".join(
        " libnccl2 | %s | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages\n" % v
        for v in ("2.28.7-1+cuda13.0", "2.28.3-1+cuda13.0")
    )  # the versions of the ubuntu2204 libnccl-dev listing, as madison prints them
    report = gap_filters.matrix_gap(madison, "apt", "gpu-h100", str(matrix_without_2_28_7))
    assert [(gap["component"], gap["version"]) for gap in report["gaps"]] == [("nccl", "2.28.7")]
    assert report["lines"][0].startswith("Matrix gaps in gpu-h100 (apt-cache madison")


def test_filters_refuse_what_they_cannot_read():
    with pytest.raises(AnsibleFilterError, match="package manager 'zypper' is not one the matrix gap reads"):
        gap_filters.matrix_gap_query("zypper")
    with pytest.raises(AnsibleFilterError, match="unexpected apt-cache madison line"):
        gap_filters.matrix_gap("E: no lists\n", "apt", "gpu-h100")
    with pytest.raises(AnsibleFilterError, match="cannot read the file"):
        gap_filters.matrix_gap("", "dnf", "n", "/nonexistent/matrix.yml")
