"""The gpudirect_rdma decision: which GPUDirect RDMA path a node has (DMA-BUF, nvidia-peermem, none needed).

The node is a fake /sys and /proc tree under ``tmp_path``; the /proc/kallsyms lines of an OFED ib_core and the
/proc/driver/nvidia/version lines are real captures (tests/fixtures/gpudirect/README.md, tests/fixtures/stack/).
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    gpudirect_rdma,
    health_checks,
    health_options,
    node_command,
    node_reader,
)
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health

from .conftest import FIXTURES
from .test_node_reader import StandIn

OPEN = (FIXTURES / "stack/proc_version_open.txt").read_text()
PROPRIETARY = (FIXTURES / "stack/proc_version_proprietary.txt").read_text()
MOFED_KALLSYMS = (FIXTURES / "gpudirect/kallsyms-mofed-ib_core.txt").read_text()
# An inbox kernel: its ib_core has no peer-memory API (these names are upstream ib_core exports).
INBOX_KALLSYMS = "ffffffffc0a01230 T ib_register_client\t[ib_core]\nffffffffc0a04560 T ib_umem_dmabuf_get\t[ib_core]\n"


def make_node(
    root,
    hcas=(("mlx5_0", "InfiniBand"),),
    driver=OPEN,
    kernel="6.8.0-45-generic",
    kallsyms=MOFED_KALLSYMS,
    peermem=False,
):
    for device, layer in hcas:
        port = root / "sys/class/infiniband" / device / "ports/1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
    proc = root / "proc"
    (proc / "sys/kernel").mkdir(parents=True)
    if kernel is not None:
        (proc / "sys/kernel/osrelease").write_text(kernel + "\n")
    if kallsyms is not None:
        (proc / "kallsyms").write_text("ffffffff81000000 T _stext\n" + kallsyms)
    if driver is not None:
        (proc / "driver/nvidia").mkdir(parents=True)
        (proc / "driver/nvidia/version").write_text(driver)
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    return gpudirect_rdma.read(str(root))


def test_read_a_roce_and_an_infiniband_hca_with_ofed(tmp_path):
    reading = make_node(tmp_path, hcas=(("mlx5_0", "InfiniBand"), ("mlx5_1", "Ethernet")), peermem=True)
    assert reading == {
        "hcas": [
            {"device": "mlx5_0", "link_layers": ["InfiniBand"]},
            {"device": "mlx5_1", "link_layers": ["Ethernet"]},
        ],
        "peermem_loaded": True,
        "peer_memory_symbols": True,
        "flavor": "open",
        "driver_version": "550.127.08",
        "kernel": "6.8.0-45-generic",
    }


def test_read_a_node_without_anything(tmp_path):
    reading = gpudirect_rdma.read(str(tmp_path))
    assert reading == {
        "hcas": [],
        "peermem_loaded": False,
        "peer_memory_symbols": None,
        "flavor": None,
        "driver_version": None,
        "kernel": None,
    }


@pytest.mark.parametrize(
    ("text", "flavor", "version"),
    [
        (OPEN, "open", "550.127.08"),
        ((FIXTURES / "stack/proc_version_open_aarch64.txt").read_text(), "open", "570.133.20"),
        (PROPRIETARY, "proprietary", "550.127.08"),
        ("GCC version: gcc 12\n", None, None),
    ],
)
def test_the_module_flavour_from_real_proc_driver_version(text, flavor, version):
    parsed = gpudirect_rdma.parse_driver_version(text)
    assert (parsed or {}).get("flavor") == flavor
    assert (parsed or {}).get("version") == version


def test_the_symbol_is_matched_whole_not_inside_ksymtab_names(tmp_path):
    only_ksymtab = "ffffffffc09bd54c r __ksymtab_ib_register_peer_memory_client\t[ib_core]\n"
    assert make_node(tmp_path, kallsyms=only_ksymtab)["peer_memory_symbols"] is False
    assert make_node(tmp_path / "inbox", kallsyms=INBOX_KALLSYMS)["peer_memory_symbols"] is False


def test_no_hca_needs_nothing_whatever_the_setting(tmp_path):
    reading = make_node(tmp_path, hcas=())
    for setting in gpudirect_rdma.SETTINGS:
        decision = gpudirect_rdma.decide(reading, setting)
        assert (decision["path"], decision["status"]) == ("none", "skip")
        assert "no RDMA HCA" in decision["detail"]


def test_auto_takes_dmabuf_with_the_open_modules_on_a_new_kernel(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, kallsyms=INBOX_KALLSYMS))
    assert (decision["path"], decision["status"]) == ("dmabuf", "pass")
    assert "DMA-BUF (open kernel modules 550.127.08, kernel 6.8.0-45-generic)" in decision["detail"]


def test_auto_takes_dmabuf_even_where_ofed_offers_peermem_and_says_peermem_is_not_needed(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, peermem=True))
    assert (decision["path"], decision["status"]) == ("dmabuf", "pass")
    assert "nvidia_peermem is loaded too, not needed" in decision["detail"]


def test_auto_falls_back_to_peermem_with_the_proprietary_modules_and_ofed(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=PROPRIETARY, peermem=True))
    assert (decision["path"], decision["status"]) == ("peermem", "pass")
    assert "proprietary flavour" in decision["detail"]


def test_auto_falls_back_to_peermem_on_a_kernel_older_than_5_12(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, kernel="4.18.0-553.el8_10.x86_64"))
    assert (decision["path"], decision["status"]) == ("peermem", "fail")
    assert "older than the 5.12" in decision["detail"]
    assert "not loaded" in decision["detail"]
    assert decision["fix"].startswith("modprobe nvidia-peermem; if it fails with 'Invalid argument'")


def test_auto_with_nothing_usable_fails_with_both_fixes(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=PROPRIETARY, kallsyms=INBOX_KALLSYMS))
    assert (decision["path"], decision["status"]) == (None, "fail")
    assert "no GPUDirect RDMA path" in decision["detail"]
    assert "Invalid argument" in decision["detail"]
    assert "open kernel modules on Linux 5.12" in decision["fix"]
    assert "DOCA-OFED" in decision["fix"]


def test_auto_without_a_loaded_driver_cannot_choose(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=None))
    assert (decision["path"], decision["status"]) == (None, "fail")
    assert "cannot be chosen" in decision["detail"]
    assert "no NVIDIA kernel module is loaded" in decision["detail"]


def test_auto_fails_closed_when_kallsyms_cannot_be_read(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=PROPRIETARY, kallsyms=None))
    assert (decision["path"], decision["status"]) == (None, "fail")
    assert "/proc/kallsyms could not be read" in decision["detail"]


def test_peermem_asked_and_loaded_passes(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, hcas=(("mlx5_0", "Ethernet"),), peermem=True), "peermem")
    assert (decision["path"], decision["status"]) == ("peermem", "pass")
    assert decision["detail"] == "nvidia-peermem loaded, HCAs mlx5_0 (Ethernet)"


def test_peermem_asked_but_not_loaded_fails_with_the_rebuild_fix(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path), "peermem")
    assert (decision["path"], decision["status"]) == ("peermem", "fail")
    assert "not loaded (/sys/module/nvidia_peermem absent)" in decision["detail"]
    assert "dkms install --force nvidia/<driver version>" in decision["fix"]


def test_peermem_asked_without_the_peer_memory_symbols_fails_with_invalid_argument(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, kallsyms=INBOX_KALLSYMS), "peermem")
    assert (decision["path"], decision["status"]) == ("peermem", "fail")
    assert "fails to load with 'Invalid argument'" in decision["detail"]
    assert "install MLNX_OFED or DOCA-OFED" in decision["fix"]
    status, detail = gpudirect_rdma.findings(decision)[0]
    assert status == "fail"
    assert detail.endswith(decision["fix"])
    assert "; fix: install MLNX_OFED" in detail


@pytest.mark.parametrize(
    ("driver", "kernel", "blocker"),
    [(PROPRIETARY, "6.8.0-45-generic", "proprietary flavour"), (OPEN, "5.10.0-32-amd64", "older than the 5.12")],
)
def test_dmabuf_asked_where_it_cannot_serve_fails_naming_why(tmp_path, driver, kernel, blocker):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=driver, kernel=kernel), "dmabuf")
    assert (decision["path"], decision["status"]) == ("dmabuf", "fail")
    assert blocker in decision["detail"]
    assert "set gpuops_gpudirect_rdma: peermem" in decision["fix"]


def test_none_checks_nothing(tmp_path):
    decision = gpudirect_rdma.decide(make_node(tmp_path, driver=PROPRIETARY, kallsyms=INBOX_KALLSYMS), "none")
    assert (decision["path"], decision["status"]) == ("none", "skip")


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="gpuops_gpudirect_rdma must be one of auto, peermem, dmabuf, none"):
        gpudirect_rdma.decide({"hcas": []}, "on")


# --- the gpudirect_rdma check: the evaluator, the reader, the node command -------------------------------------
def rdma_checks(verdict):
    return [check for check in verdict["checks"] if check["name"] == "gpudirect_rdma"]


def test_the_check_reports_the_path_in_the_facts_and_passes(tmp_path):
    verdict = health_checks.evaluate({"gpudirect_rdma": make_node(tmp_path, kallsyms=INBOX_KALLSYMS)})
    assert verdict["facts"]["gpudirect_rdma"] == {"path": "dmabuf", "setting": "auto", "status": "pass"}
    (check,) = rdma_checks(verdict)
    assert check["status"] == "pass"
    assert check["detail"].startswith("DMA-BUF (open kernel modules 550.127.08")


def test_the_check_fails_the_node_with_the_fix_where_the_chosen_path_cannot_serve(tmp_path):
    reading = make_node(tmp_path, kallsyms=INBOX_KALLSYMS)
    verdict = health_checks.evaluate({"gpudirect_rdma": reading}, {"gpudirect_rdma": "peermem"})
    assert not verdict["healthy"]
    assert verdict["facts"]["gpudirect_rdma"] == {"path": "peermem", "setting": "peermem", "status": "fail"}
    (check,) = rdma_checks(verdict)
    assert check["status"] == "fail"
    assert "'Invalid argument'; fix: install MLNX_OFED or DOCA-OFED" in check["detail"]


def test_a_node_without_hcas_skips_the_check(tmp_path):
    verdict = health_checks.evaluate({"gpudirect_rdma": make_node(tmp_path, hcas=())}, {"gpudirect_rdma": "peermem"})
    (check,) = rdma_checks(verdict)
    assert check["status"] == "skip"
    assert verdict["facts"]["gpudirect_rdma"]["path"] == "none"


def test_not_read_skips_and_an_unknown_setting_is_refused(tmp_path):
    verdict = health_checks.evaluate({"unavailable": {"gpudirect_rdma": "offline triage"}})
    assert [(c["status"], c["detail"]) for c in rdma_checks(verdict)] == [("skip", "offline triage")]
    assert verdict["facts"]["gpudirect_rdma"] is None
    with pytest.raises(ValueError, match="gpuops_gpudirect_rdma must be one of"):
        health_checks.evaluate({"gpudirect_rdma": make_node(tmp_path)}, {"gpudirect_rdma": "yes"})


def test_the_reader_reads_files_only_at_quick_and_nothing_offline_or_skipped(tmp_path):
    make_node(tmp_path, peermem=True)
    module = StandIn(bins=())
    reading = node_reader.NodeReader(module, root=str(tmp_path)).gpudirect_rdma(offline=False)
    assert reading["peermem_loaded"] is True
    assert reading["hcas"] == [{"device": "mlx5_0", "link_layers": ["InfiniBand"]}]
    assert module.calls == []
    offline = node_reader.NodeReader(StandIn(), root=str(tmp_path))
    assert offline.gpudirect_rdma(offline=True) is None
    assert "gpudirect_rdma" in offline.unavailable
    skipping = node_reader.NodeReader(StandIn(skip_checks=["gpudirect_rdma"]), root=str(tmp_path))
    assert skipping.gpudirect_rdma(offline=False) is None


def test_the_setting_reaches_the_module_the_gate_and_the_node_command(tmp_path):
    assert health_options.health_options({"gpuops_gpudirect_rdma": "peermem"}, ["settle_timeout"]) == {
        "gpudirect_rdma": "peermem"
    }
    assert gpu_health.argument_spec()["gpudirect_rdma"]["choices"] == list(gpudirect_rdma.SETTINGS)
    path = tmp_path / "gpu-health.json"
    path.write_text('{"gpudirect_rdma": "dmabuf"}')
    config = node_command.load_config(str(path))
    assert node_command.evaluate_options(config)["gpudirect_rdma"] == "dmabuf"
    path.write_text('{"gpudirect_rdma": "on"}')
    with pytest.raises(node_command.ConfigError, match="gpudirect_rdma"):
        node_command.load_config(str(path))


def test_the_hcas_of_an_infiniband_fixture_tree_eight_ndr_and_one_roce():
    """tests/fixtures/infiniband/healthy-8x-ndr: a sysfs tree in the kernel's formats (README there)."""
    reading = gpudirect_rdma.read(str(FIXTURES / "infiniband/healthy-8x-ndr"))
    layers = {hca["device"]: hca["link_layers"] for hca in reading["hcas"]}
    assert len(layers) == 9
    assert sorted(map(tuple, layers.values())).count(("InfiniBand",)) == 8
    assert ("Ethernet",) in map(tuple, layers.values())
    # that tree has no /proc: no module loaded, the kernel and the symbols unknown; auto cannot choose, fails closed
    assert (reading["flavor"], reading["kernel"], reading["peer_memory_symbols"]) == (None, None, None)
    assert gpudirect_rdma.decide(reading)["status"] == "fail"
