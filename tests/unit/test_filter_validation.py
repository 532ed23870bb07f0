import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.validation import validation_report


def test_every_problem_of_every_host_is_listed():
    report = validation_report(
        {
            "gpu02": {"problems": ["unknown GPU 'H1000'"], "warnings": []},
            "gpu01": {
                "problems": ["CUDA 12.7 does not exist", "unknown variable gpuops_stak"],
                "warnings": ["R535 is end of life"],
            },
            "gpu03": {"problems": [], "warnings": []},
        }
    )
    assert report["failed"] is True
    assert report["hosts_failed"] == ["gpu01", "gpu02"]
    assert report["lines"] == [
        "gpu01: CUDA 12.7 does not exist",
        "gpu01: unknown variable gpuops_stak",
        "gpu02: unknown GPU 'H1000'",
    ]
    assert report["warnings"] == ["gpu01: R535 is end of life"]
    assert report["text"].startswith("gpuops.cluster validation failed on 2 of 3 host(s)")
    assert "  - gpu02: unknown GPU 'H1000'" in report["text"]


def test_clean_findings_pass():
    report = validation_report({"gpu01": {"problems": [], "warnings": []}})
    assert report["failed"] is False
    assert report["lines"] == []


def test_non_mapping_is_rejected():
    with pytest.raises(AnsibleFilterError, match=r"validation_report"):
        validation_report(["gpu01"])
