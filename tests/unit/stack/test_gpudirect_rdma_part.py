"""node_stack's gpudirect_rdma part: nvidia-peermem loaded and persistent where the node's path is peermem, nothing
loaded and our modules-load.d file removed where it is DMA-BUF or none; idempotent, check mode, diff.

The node is a fake /sys and /proc tree (tests/unit/health/test_gpudirect_rdma.make_node, real /proc captures).
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import gpudirect_rdma_part
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import rdma_dropins
from ansible_collections.gpuops.cluster.plugins.modules import node_stack

from tests.unit.health.test_gpudirect_rdma import FIXTURES, INBOX_KALLSYMS, PROPRIETARY, make_node
from tests.unit.module_harness import FakeCommands, ModuleHarness, unbounded

CONF = "etc/modules-load.d/nvidia-peermem.conf"


@pytest.fixture
def harness(monkeypatch):
    return ModuleHarness(
        monkeypatch,
        commands=FakeCommands({"modprobe nvidia-peermem": (0, "", "")}, inside_timeout=True),
        bins={"timeout": "/usr/bin/timeout", "modprobe": "/usr/sbin/modprobe"},
    )


def part(harness, root, check=False, diff=False, **options):
    """The part's result; with ``diff``, the module's diff (node_stack gathers the parts' diffs) under ``diff``."""
    args = {"gpudirect_rdma": {"root": str(root), **options}}
    result = harness.run(node_stack, args, check_mode=check, diff=diff)
    return dict(result["results"]["gpudirect_rdma"], diff=result.get("diff"))


def modprobes(harness):
    return [unbounded(call) for call in harness.commands.calls]


def driver_loaded(root):
    (root / "sys/module/nvidia").mkdir(parents=True)


def test_peermem_path_writes_the_file_and_loads_the_module_then_nothing_to_do(harness, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY)
    driver_loaded(tmp_path)
    first = part(harness, tmp_path, diff=True)
    assert (first["changed"], first["path"], first["loaded"]) == (True, "peermem", True)
    assert (tmp_path / CONF).read_text() == rdma_dropins.render_peermem()
    assert first["diff"][0]["after"] == "# Managed by gpuops.cluster.kernel_tuning: GPUDirect RDMA\nnvidia-peermem\n"
    assert modprobes(harness) == [["/usr/sbin/modprobe", "nvidia-peermem"]]
    (tmp_path / "sys/module/nvidia_peermem").mkdir()  # what modprobe did
    again = part(harness, tmp_path)
    assert (again["changed"], again["status"], again["loaded"]) == (False, "pass", False)
    assert len(harness.commands.calls) == 1


def test_check_mode_predicts_the_write_and_the_load_and_does_neither(harness, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY)
    driver_loaded(tmp_path)
    result = part(harness, tmp_path, check=True)
    assert (result["changed"], result["loaded"]) == (True, True)
    assert not (tmp_path / CONF).exists()
    assert harness.commands.calls == []


def test_a_first_install_writes_the_file_and_leaves_the_load_to_the_boot(harness, tmp_path):
    make_node(tmp_path, driver=None)  # nothing loaded yet: the flavour the stack installs stands in
    result = part(harness, tmp_path, flavor="proprietary")
    assert (result["changed"], result["path"], result["loaded"]) == (True, "peermem", False)
    assert result["notes"] == ["nvidia-peermem loads at the next boot (the NVIDIA driver is not loaded now)"]
    assert (tmp_path / CONF).exists()
    assert harness.commands.calls == []


def test_a_failed_load_names_the_dkms_rebuild(harness, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY)
    driver_loaded(tmp_path)
    harness.commands.add(
        "modprobe nvidia-peermem",
        (1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n"),
    )
    failed = harness.fail(node_stack, {"gpudirect_rdma": {"root": str(tmp_path)}})
    assert failed["failed_part"] == "gpudirect_rdma"
    assert "could not load nvidia-peermem" in failed["msg"]
    assert "Invalid argument" in failed["msg"]
    assert "dkms install --force nvidia/<driver version>" in failed["msg"]


def test_dmabuf_removes_our_stale_file_loads_nothing_and_leaves_an_operators_file(harness, tmp_path):
    make_node(tmp_path)
    driver_loaded(tmp_path)
    (tmp_path / "etc/modules-load.d").mkdir(parents=True)
    (tmp_path / CONF).write_text(rdma_dropins.render_peermem())
    result = part(harness, tmp_path, diff=True)
    assert (result["changed"], result["path"], result["loaded"]) == (True, "dmabuf", False)
    assert not (tmp_path / CONF).exists()
    assert result["diff"][0]["after"] == ""
    (tmp_path / CONF).write_text("nvidia-peermem\n")  # the operator's own
    assert part(harness, tmp_path)["changed"] is False
    assert (tmp_path / CONF).exists()
    assert harness.commands.calls == []


def test_none_and_no_hca_remove_our_file(harness, tmp_path):
    make_node(tmp_path, hcas=())
    (tmp_path / "etc/modules-load.d").mkdir(parents=True)
    (tmp_path / CONF).write_text(rdma_dropins.render_peermem())
    result = part(harness, tmp_path, setting="peermem")
    assert (result["changed"], result["path"], result["status"]) == (True, "none", "skip")
    assert not (tmp_path / CONF).exists()


def test_no_usable_path_changes_nothing_and_says_why(harness, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY, kallsyms=INBOX_KALLSYMS)
    driver_loaded(tmp_path)
    result = part(harness, tmp_path)
    assert (result["changed"], result["path"], result["status"]) == (False, None, "fail")
    assert "fix: use the open kernel modules" in result["detail"]
    peermem = part(harness, tmp_path, setting="peermem")
    assert (peermem["changed"], peermem["path"]) == (False, "peermem")
    assert "fails to load with 'Invalid argument'" in peermem["detail"]
    assert not (tmp_path / CONF).exists()
    assert harness.commands.calls == []


def test_plan_uses_the_installed_flavour_only_where_none_is_loaded():
    reading = {"hcas": [{"device": "mlx5_0", "link_layers": ["InfiniBand"]}], "flavor": None, "driver_version": None}
    reading.update(kernel="6.8.0-45-generic", peer_memory_symbols=True, peermem_loaded=False)
    assert gpudirect_rdma_part.plan(reading, "auto", "open")["decision"]["path"] == "dmabuf"
    assert gpudirect_rdma_part.plan(reading, "auto", "proprietary")["file"] == "present"
    loaded = dict(reading, flavor="proprietary", driver_version="550.127.08")
    assert gpudirect_rdma_part.plan(loaded, "auto", "open")["decision"]["path"] == "peermem"


GPUDIRECT = FIXTURES / "gpudirect"
PEERMEM_KO = "/lib/modules/6.8.0-45-generic/updates/dkms/nvidia-peermem.ko.zst"
IB_CORE_KO = "/lib/modules/6.8.0-45-generic/updates/dkms/ib_core.ko"
DKMS_STATUS = "nvidia/580.95.05, 6.8.0-45-generic, x86_64: installed\n"


@pytest.fixture
def node(harness, monkeypatch):
    """The part acting on the node's own modules (modinfo, modprobe and dkms answered as on a DKMS node)."""
    monkeypatch.setattr(gpudirect_rdma_part, "_on_node", lambda root: True)
    harness.bins.bins.update({"modinfo": "/usr/sbin/modinfo", "dkms": "/usr/sbin/dkms"})
    commands = harness.commands
    commands.add("modinfo -k 6.8.0-45-generic -n nvidia-peermem", PEERMEM_KO + "\n")
    commands.add("modinfo -k 6.8.0-45-generic -n ib_core", IB_CORE_KO + "\n")
    commands.add(
        ["modprobe", "--show-exports", IB_CORE_KO], (GPUDIRECT / "kmod30-show-exports-ib_core-ofed.txt").read_text()
    )
    commands.add("dkms status", DKMS_STATUS)
    commands.add("dkms build", (0, "", ""))
    commands.add("dkms install", (0, "", ""))
    return harness


def imports(harness, name):
    harness.commands.add(["modprobe", "--show-modversions", PEERMEM_KO], (GPUDIRECT / name).read_text())


def dkms_calls(harness):
    return [unbounded(call)[1:] for call in harness.commands.calls if unbounded(call)[0].endswith("dkms")]


def test_after_an_ofed_upgrade_the_driver_module_is_rebuilt_then_loaded_then_nothing_to_do(node, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY)
    driver_loaded(tmp_path)
    imports(node, "kmod30-show-modversions-peermem-other-ofed.txt")
    first = part(node, tmp_path)
    assert (first["changed"], first["rebuilt"], first["loaded"], first["build"]["state"]) == (True, True, True, "stale")
    assert dkms_calls(node) == [
        ["status"],
        ["build", "--force", "nvidia/580.95.05", "-k", "6.8.0-45-generic"],
        ["install", "--force", "nvidia/580.95.05", "-k", "6.8.0-45-generic"],
    ]
    assert "rebuilding nvidia/580.95.05 for kernel 6.8.0-45-generic" in first["notes"][0]
    # what dkms and modprobe did: the module fits, and it is loaded
    imports(node, "kmod30-show-modversions-peermem-same-ofed.txt")
    (tmp_path / "sys/module/nvidia_peermem").mkdir()
    before = len(node.commands.calls)
    again = part(node, tmp_path)
    assert (again["changed"], again["rebuilt"], again["build"]["state"]) == (False, False, "current")
    assert dkms_calls(node)[3:] == []
    assert len(node.commands.calls) - before == 4  # modinfo twice, modprobe twice: reads only


def test_check_mode_predicts_the_rebuild_and_runs_no_dkms_build(node, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY, peermem=True)
    imports(node, "kmod30-show-modversions-peermem-without-ofed.txt")
    result = part(node, tmp_path, check=True)
    assert (result["changed"], result["rebuilt"]) == (True, True)
    assert "built without the OFED peer-memory symbols" in result["notes"][0]
    assert result["notes"][1] == "the rebuilt nvidia-peermem loads at the next boot (the loaded one stays)"
    assert dkms_calls(node) == [["status"]]


def test_precompiled_modules_are_not_rebuilt_and_a_failed_load_names_the_build(node, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY)
    driver_loaded(tmp_path)
    imports(node, "kmod30-show-modversions-peermem-other-ofed.txt")
    node.commands.add("dkms status", "")
    node.commands.add(
        "modprobe nvidia-peermem", (1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': Exec format error\n")
    )
    failed = node.fail(node_stack, {"gpudirect_rdma": {"root": str(tmp_path)}})
    assert "Its build: " + PEERMEM_KO + " was built against another OFED" in failed["msg"]
    assert dkms_calls(node) == [["status"]]


def test_rebuild_false_and_an_unknown_build_change_nothing(node, tmp_path):
    make_node(tmp_path, driver=PROPRIETARY, peermem=True)
    assert part(node, tmp_path, rebuild=False)["build"] is None
    node.commands.add(
        ["modprobe", "--show-modversions", PEERMEM_KO],
        (1, "", (GPUDIRECT / "kmod30-show-modversions-no-versions.stderr").read_text()),
    )
    result = part(node, tmp_path)
    assert (result["changed"], result["build"]["state"]) == (False, "unknown")
    assert dkms_calls(node) == []
