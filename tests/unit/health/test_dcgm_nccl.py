"""dcgm_diag.parse and nccl_tests.parse."""

from ansible_collections.gpuops.cluster.plugins.module_utils.health import dcgm_diag, nccl_tests


def test_dcgm_pass(fixture_text):
    parsed = dcgm_diag.parse(fixture_text("dcgm/dcgmi-diag-r1-pass.json"))
    assert parsed["failed"] == []
    assert len(parsed["results"]) == 9


def test_dcgm_fail(fixture_text):
    parsed = dcgm_diag.parse(fixture_text("dcgm/dcgmi-diag-r2-pcie-fail.json"))
    (failure,) = parsed["failed"]
    assert (failure["test"], failure["gpu_index"]) == ("PCIe", 4)
    assert "below the expected" in failure["info"]


def test_dcgm_not_json():
    parsed = dcgm_diag.parse("Error: unable to connect to host engine")
    assert parsed["results"] == []
    assert parsed["warnings"]


def test_nccl(fixture_text):
    parsed = nccl_tests.parse(fixture_text("nccl-tests/all_reduce_perf-h100-8x.txt"))
    assert parsed["max_size_bytes"] == 17179869184
    assert parsed["busbw_gbps"] == 460.73
    assert parsed["avg_busbw_gbps"] == 443.63
    assert parsed["wrong"] == 0


def test_nccl_empty():
    assert nccl_tests.parse("")["busbw_gbps"] is None
