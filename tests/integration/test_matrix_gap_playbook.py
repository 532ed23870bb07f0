"""playbooks/matrix_gap.yml end to end (issue 27 item 4): a node's own index, read through its package manager.

Runs on this machine (local connection, an apt machine) without changing it. ``apt-cache`` is a test double put
first on PATH: ``pkgnames`` and ``madison`` answer from the real ubuntu2404/sbsa listing
tests/fixtures/package_index/ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt, and every call is recorded.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from tests.integration.playbook_run import REPO, run_playbook

pytestmark = pytest.mark.integration

LISTING = REPO / "tests" / "fixtures" / "package_index" / "ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt"
FAKE_APT_CACHE = """#!/bin/sh
# apt-cache stand-in: pkgnames lists the listing's names, madison prints its lines for the names asked.
echo "$*" >> "{calls}"
case "$1" in
  pkgnames) printf 'vim\\nnvidia-open\\nnvidia-fabricmanager\\n' ;;
  madison) shift; for name in "$@"; do grep "^$name |" "{listing}"; done ;;
  *) exit 100 ;;
esac
"""


@pytest.fixture(scope="module")
def gap_run(tmp_path_factory):
    if not shutil.which("apt-get"):
        pytest.skip("the playbook's apt path needs an apt machine (ansible's pkg_mgr fact)")
    work = tmp_path_factory.mktemp("matrix_gap")
    fake = work / "bin" / "apt-cache"
    fake.parent.mkdir()
    fake.write_text(FAKE_APT_CACHE.format(calls=work / "calls", listing=LISTING))
    fake.chmod(0o755)
    data = yaml.safe_load((REPO / "matrix" / "nvidia_stack.yml").read_text(encoding="utf-8"))
    r610 = next(entry for entry in data["driver_branches"] if entry["branch"] == 610)
    r610["releases"] = [item for item in r610["releases"] if item["version"] != "610.57.04"]
    matrix = work / "matrix.yml"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    old_path = os.environ["PATH"]
    os.environ["PATH"] = os.pathsep.join([str(fake.parent), old_path])
    try:
        run = run_playbook(
            "playbooks/matrix_gap.yml",
            "tests/integration/inventories/valid/hosts.yml",
            work / "runner",
            extravars={"gpuops_matrix_path": str(matrix), "gpuops_matrix_gap_output_dir": str(work / "out")},
            limit="gpu-h100",
        )
    finally:
        os.environ["PATH"] = old_path
    assert run.rc == 0, run.stdout[-3000:]
    return run, work


def test_the_node_is_read_with_two_apt_cache_calls_naming_only_the_matrix_packages(gap_run):
    _run, work = gap_run
    assert (work / "calls").read_text().splitlines() == ["pkgnames", "madison nvidia-open"]


def test_the_release_the_matrix_lacks_is_printed_and_written_as_json(gap_run):
    run, work = gap_run
    lines = run.results_for(task="Show what the matrix lacks", host="gpu-h100")[0].result["msg"]
    assert lines[0].startswith("Matrix gaps in gpu-h100 (apt-cache madison: 3 package versions read")
    assert any('add {version: "610.57.04", source: <id>} to driver_branches[R610].releases' in line for line in lines)
    report = json.loads((work / "out" / "matrix-gap-gpu-h100.json").read_text())
    assert [(gap["component"], gap["version"]) for gap in report["gaps"]] == [("driver", "610.57.04")]
