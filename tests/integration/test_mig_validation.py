"""A MIG layout the host's GPU cannot hold stops site.yml in validation, before any host is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .playbook_run import run_playbook
from .test_bad_values import VALIDATE_PLAY, contacted, lines_of, refusal

pytestmark = pytest.mark.integration

# An operator's mig-parted file as it is (mig-parted's v1 schema), one per fleet, a config chosen per group.
MIG_FILE = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "inference": [
            {"device-filter": ["0x233010DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"device-filter": ["0x233510DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
        ],
        "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}],
    },
}


def test_site_refuses_a_layout_the_gpu_cannot_hold_without_contacting_a_host(tmp_path: Path):
    mig_file = tmp_path / "mig.yaml"
    mig_file.write_text(yaml.safe_dump(MIG_FILE), encoding="utf-8")
    base = {"gpuops_stack": {"driver": "580", "cuda": "13.0"}, "gpuops_os": "Ubuntu", "gpuops_os_version": "22.04"}
    hosts = {
        "h100-ok": dict(base, gpuops_gpu="h100-sxm", gpuops_mig_config="inference"),
        "h200-ok": dict(base, gpuops_gpu="NVIDIA H200", gpuops_mig_config="inference"),
        "h100-big": dict(base, gpuops_gpu="h100-sxm", gpuops_mig_config="too-big"),
        "l40s-mig": dict(base, gpuops_gpu="l40s", gpuops_mig_config="too-big"),
        "l40s-off": dict(base, gpuops_gpu="l40s", gpuops_mig_config="all-disabled"),
    }
    inventory = {
        "all": {
            "vars": {
                "ansible_host": "127.0.0.1",
                "ansible_port": 9,
                # the operator's file, read as it is on the controller
                "gpuops_mig": "{{ lookup('ansible.builtin.file', '%s') | from_yaml }}" % mig_file,
            },
            "children": {"gpu_nodes": {"hosts": hosts}},
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    report = tmp_path / "health.json"
    run = run_playbook("site.yml", path, tmp_path / "runner", extravars={"gpuops_health_report_path": str(report)})
    assert contacted(run) == []
    problems = lines_of(refusal(run))
    assert sorted(problems) == ["h100-big", "l40s-mig"]
    (big,) = problems["h100-big"]
    assert big.startswith("gpuops_mig config too-big entry 0 on h100-sxm (gpuops_gpu 'h100-sxm'): 9 memory slices of 8")
    (l40s,) = problems["l40s-mig"]
    assert "enables MIG on l40s (gpuops_gpu 'l40s'), which has no MIG" in l40s
    assert run.tasks_run_outside(VALIDATE_PLAY) == []
