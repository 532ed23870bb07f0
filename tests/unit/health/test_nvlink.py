"""nvlink.parse_status / parse_errors on nvidia-smi nvlink -s / -e output."""

from ansible_collections.gpuops.cluster.plugins.module_utils.health import nvlink


def test_status_healthy(fixture_text):
    parsed = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-healthy.txt"))
    assert parsed["warnings"] == []
    assert len(parsed["gpus"]) == 8
    gpu = parsed["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["uuid"] == "GPU-1c7a6f02-8d2e-4b71-9a55-0e4f3b7c2d10"
    assert len(gpu["links"]) == 18
    assert all(link["active"] and link["speed_gbps"] == 26.562 for link in gpu["links"])


def test_status_inactive_link(fixture_text):
    parsed = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-link-inactive.txt"))
    inactive = [(g["index"], link["link"]) for g in parsed["gpus"] for link in g["links"] if not link["active"]]
    assert inactive == [(2, 7)]


def test_status_without_links(fixture_text):
    parsed = nvlink.parse_status(fixture_text("nvlink/l40s-status.txt"))
    assert parsed["gpus"][0]["links"] == []


def test_status_all_inactive_message():
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\n"
        "NVML: Unable to retrieve NVLink information as all links are inActive\n"
    )
    parsed = nvlink.parse_status(text)
    assert parsed["gpus"][0]["all_inactive"] is True
    assert parsed["warnings"] == []


def test_errors(fixture_text):
    parsed = nvlink.parse_errors(fixture_text("nvlink/h100-8x-errors-crc.txt"))
    assert parsed["warnings"] == []
    link = parsed["gpus"][2]["links"][7]
    assert link == {"link": 7, "counters": {"replay_errors": 14, "recovery_errors": 3, "crc_errors": 912}}
    assert parsed["gpus"][0]["links"][0]["counters"] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}


def test_errors_comma_separated_line():
    parsed = nvlink.parse_errors(
        "GPU 0: NVIDIA H100\n   Link 1: Replay Errors: 142, Recovery Errors: 3, CRC Errors: 891\n"
    )
    assert parsed["gpus"][0]["links"][0]["counters"] == {"replay_errors": 142, "recovery_errors": 3, "crc_errors": 891}


def test_garbage_is_a_warning():
    assert nvlink.parse_status("Link 0: 26 GB/s\n")["warnings"]
    assert nvlink.parse_errors("GPU 0: X\n what is this\n")["warnings"]
