"""irq_affinity: cpulists, sysfs/proc readers, the planner on three topologies, and the module."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import Counter
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, PartFailed, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import irq_affinity as ia
from ansible_collections.gpuops.cluster.plugins.modules import irq_affinity as module

from tests.unit.module_harness import FakeCommands, ModuleHarness, set_module_args

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("", []), ("0", [0]), ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("0-7:2", [0, 2, 4, 6]), (" 3,1 ", [1, 3])],
)
def test_parse_cpulist(text, cpus):
    assert ia.parse_cpulist(text) == cpus


def test_format_cpulist_round_trips():
    assert ia.format_cpulist([5, 0, 1, 2, 9, 10]) == "0-2,5,9-10"
    assert ia.format_cpulist([]) == ""
    assert ia.parse_cpulist(ia.format_cpulist(range(0, 64, 3))) == list(range(0, 64, 3))
    with pytest.raises(ValueError, match="range"):
        ia.parse_cpulist("5-2")


def test_parse_interrupts_captured():
    parsed = ia.parse_interrupts((FIXTURES / "proc_interrupts.txt").read_text())
    assert sorted(parsed) == [0, 8, 9, 11, 120, 121, 122, 130]
    assert parsed[121] == {"name": "mlx5_comp0@pci:0000:17:00.0", "counts": [882211, 0, 0, 0]}
    assert parsed[11]["name"] == "nvidia"


def test_readers_two_socket(make_tree):
    root, spec = make_tree("two_socket")
    root = str(root)
    assert ia.read_online_cpus(root) == list(range(64))
    nodes = ia.read_nodes(root)
    assert nodes[0] == list(range(16)) + list(range(32, 48))
    assert ia.read_siblings(root, [3, 35]) == {3: [3, 35], 35: [3, 35]}
    nic = ia.read_device(root, "0000:99:00.0")
    assert nic["driver"] == "mlx5_core"
    assert nic["numa_node"] == 1
    assert nic["irqs"] == spec["irqs"]["0000:99:00.0"]
    assert len(nic["irqs"]) == 16
    assert ia.read_interrupts(root)[nic["irqs"][1]]["name"] == "mlx5_comp0@pci:0000:99:00.0"
    assert ia.read_affinity(root, [nic["irqs"][0], 99999]) == {nic["irqs"][0]: list(range(64)), 99999: None}


def test_resolve_devices_by_name_address_and_driver(make_tree):
    root, _unused = make_tree("two_socket")
    root = str(root)
    assert ia.resolve_devices(root, ["mlx5_4"]) == ["0000:99:00.0"]
    assert ia.resolve_devices(root, ["ibp23s0", "0000:17:00.0"]) == ["0000:17:00.0"]
    assert len(ia.resolve_devices(root, [], ["mlx5_core", "nvidia"])) == 16
    assert ia.resolve_devices(root, [], ["absent_driver"]) == []
    with pytest.raises(LookupError, match="eth9"):
        ia.resolve_devices(root, ["eth9"])
    with pytest.raises(LookupError, match="not found"):
        ia.read_device(root, "0000:ff:00.0")


def _plan(root, drivers, housekeeping=()):
    root = str(root)
    online = ia.read_online_cpus(root)
    devices = [ia.read_device(root, a) for a in ia.resolve_devices(root, [], drivers)]
    return devices, ia.plan(devices, online, ia.read_nodes(root), housekeeping, ia.read_siblings(root, online))


def test_plan_two_socket_keeps_irqs_on_the_device_node(make_tree):
    root, _unused = make_tree("two_socket")
    devices, planned = _plan(root, ["mlx5_core", "nvidia"], housekeeping=[0, 1, 16, 17, 32, 33, 48, 49])
    nodes = ia.read_nodes(str(root))
    for device in devices:
        for irq in device["irqs"]:
            (cpu,) = planned["irqs"][irq]
            assert cpu in nodes[device["numa_node"]]
            assert cpu not in (0, 1, 16, 17, 32, 33, 48, 49)
    # 4 NICs x 16 + 4 GPUs = 68 IRQs per node over 28 housekeeping-free CPUs: at most 3 IRQs per CPU,
    # and the 14 primary threads of node0 (2-15) each carry some before any second thread.
    load = Counter(cpus[0] for cpus in planned["irqs"].values())
    assert max(load.values()) <= 3
    assert all(load[cpu] >= 1 for cpu in range(2, 16))
    assert all(load[cpu] >= 1 for cpu in range(18, 32))


def test_plan_spreads_a_nic_queues_over_primary_threads_first(make_tree):
    root, _unused = make_tree("two_socket")
    _devices, planned = _plan(root, ["mlx5_core"])
    first_nic = planned["devices"][0]
    cpus = [planned["irqs"][irq][0] for irq in first_nic["irqs"]]
    assert cpus == list(range(16))
    second_nic = planned["devices"][1]
    assert [planned["irqs"][irq][0] for irq in second_nic["irqs"]] == list(range(32, 48))


def test_plan_one_socket(make_tree):
    root, _unused = make_tree("one_socket")
    devices, planned = _plan(root, ["nvidia", "mlx5_core"], housekeeping=[0, 8])
    gpu_irq = devices[1]["irqs"][0] if devices[1]["driver"] == "nvidia" else devices[0]["irqs"][0]
    nic = next(d for d in devices if d["driver"] == "mlx5_core")
    assert planned["irqs"][gpu_irq] == [1]
    assert [planned["irqs"][i][0] for i in nic["irqs"]] == [2, 3, 4, 5, 6, 7, 9, 10]


def test_plan_numa_less_uses_local_cpulist_and_legacy_irq(make_tree):
    root, _unused = make_tree("numa_less")
    devices, planned = _plan(root, ["mlx5_core", "nvidia"], housekeeping=[0])
    assert ia.read_nodes(str(root)) == {}
    gpu = next(d for d in devices if d["driver"] == "nvidia")
    assert gpu["irqs"] == [11]
    assert gpu["numa_node"] == -1
    assigned = sorted(cpus[0] for cpus in planned["irqs"].values())
    assert assigned == [1, 2, 3, 4, 5]
    assert all(d["note"] is None for d in planned["devices"])


def test_plan_falls_back_when_housekeeping_covers_the_node(make_tree):
    root, _unused = make_tree("two_socket")
    node0 = ia.read_nodes(str(root))[0]
    devices, planned = _plan(root, ["nvidia"], housekeeping=node0)
    assert planned["devices"][0]["note"].startswith("no local CPU")
    assert all(cpus[0] not in node0 for cpus in planned["irqs"].values())
    with pytest.raises(ValueError, match="housekeeping"):
        ia.plan(devices, [0, 1], {}, [0, 1])


def test_changes_and_persist_render(make_tree):
    root, _unused = make_tree("one_socket")
    devices, planned = _plan(root, ["mlx5_core"])
    current = ia.read_affinity(str(root), planned["irqs"])
    diff = ia.changes(planned["irqs"], current)
    assert len(diff) == 8
    first = devices[0]["irqs"][0]
    assert diff[first] == {"before": "0-15", "after": "0"}
    assert ia.changes(planned["irqs"], {**current, first: [0]}).get(first) is None
    text = ia.render_persist(devices, planned["irqs"])
    assert text.startswith(ia.PERSIST_HEADER)
    assert "0000:02:00.0 0 0\n" in text
    assert "0000:02:00.0 7 7\n" in text


def test_edit_irqbalance_args():
    script = "/usr/local/sbin/gpuops-irq-affinity"
    debian = '#Configuration for the irqbalance daemon\n#IRQBALANCE_ONESHOT=\n#IRQBALANCE_ARGS=""\n'
    edited = ia.edit_irqbalance_args(debian, script)
    assert edited == debian + f'IRQBALANCE_ARGS="--policyscript={script}"\n'
    assert ia.edit_irqbalance_args(edited, script) == edited
    rhel = 'IRQBALANCE_ARGS="--hintpolicy=subset --policyscript=/old"\n'
    assert ia.edit_irqbalance_args(rhel, script) == f'IRQBALANCE_ARGS="--hintpolicy=subset --policyscript={script}"\n'


# ------------------------------------------------------------------ module
def test_module_applies_persists_and_is_idempotent(make_tree, run_module):
    root, spec = make_tree("one_socket")
    args = {"drivers": ["mlx5_core", "nvidia"], "housekeeping_cpus": "0", "root": str(root), "apply_live": "always"}
    first = run_module(module, args, diff=True)
    assert first["changed"] is True
    assert len(first["applied_live"]) == 9
    nic_irq = spec["irqs"]["0000:02:00.0"][0]
    assert (root / f"proc/irq/{nic_irq}/smp_affinity_list").read_text().strip() == first["plan"][str(nic_irq)]
    assert (root / "etc/gpuops/irq-affinity.conf").read_text().count("\n") == 2 + 9
    assert any(d["before_header"].endswith("smp_affinity_list") for d in first["diff"])
    second = run_module(module, args)
    assert second["changed"] is False
    assert second["changes"] == {}


def test_module_check_mode_and_container_default(make_tree, run_module):
    root, _unused = make_tree("two_socket")
    args = {"drivers": ["mlx5_core"], "root": str(root), "apply_live": "always"}
    checked = run_module(module, args, check_mode=True)
    assert checked["changed"] is True
    assert len(checked["applied_live"]) == 128
    assert not (root / "etc/gpuops/irq-affinity.conf").exists()
    assert (root / "proc/irq/100/smp_affinity_list").read_text().strip() == "0-63"
    auto = run_module(module, {"drivers": ["mlx5_core"], "root": str(root)})
    assert auto["applied_live"] == []
    assert len(auto["not_applied_live"]) == 128
    assert (root / "proc/irq/100/smp_affinity_list").read_text().strip() == "0-63"


def test_module_unknown_device_fails_with_hint(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, {"devices": ["eth7"], "root": str(root)})
    assert result["_failed"] is True
    assert "lspci" in result["msg"]


def test_module_irqbalance_stop_in_chroot_disables_only(make_tree, run_module):
    root, _unused = make_tree("one_socket")

    def systemctl(argv):
        return (0, "enabled\n", "") if "is-enabled" in argv else (0, "", "")

    args = {"drivers": ["nvidia"], "irqbalance": "stop", "root": str(root), "apply_live": "never"}
    result = run_module(module, args, run_command=systemctl, bins={"systemctl": "/bin/systemctl"})
    assert result["irqbalance"]["action"] == "disabled"
    assert result["_commands"][-1] == ["/bin/systemctl", f"--root={root}", "disable", "irqbalance.service"]


def test_module_irqbalance_ban_writes_policyscript(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    (root / "etc/sysconfig").mkdir(parents=True)
    (root / "etc/sysconfig/irqbalance").write_text('IRQBALANCE_ARGS=""\n')
    args = {"drivers": ["nvidia"], "irqbalance": "ban", "root": str(root), "apply_live": "never"}
    result = run_module(module, args, bins={"systemctl": "/bin/systemctl"})
    assert result["irqbalance"]["action"] == "configured"
    assert "--policyscript=/usr/local/sbin/gpuops-irq-affinity" in (root / "etc/sysconfig/irqbalance").read_text()
    assert result["_commands"] == []


# ------------------------------------------------------------------ boot script, unit and link
# sha256 of what the role's templates (gpuops-irq-affinity.sh.j2, .service.j2) rendered with the role's paths:
# nodes that ran the template tasks see no change when the module takes over.
TEMPLATE_SCRIPT_SHA256 = "9e1aa294f9fe6d3de9ea6929d9452e75a718471ad018d2285b0f64d42d3c0cb8"
TEMPLATE_UNIT_SHA256 = "fc98f17e4ae5ef0015cba7d938e8e50ed080b06d6275cac6a0c7f8b726f5c8de"
SCRIPT = "/usr/local/sbin/gpuops-irq-affinity"
CONF = "/etc/gpuops/irq-affinity.conf"
UNIT = "etc/systemd/system/gpuops-irq-affinity.service"
LINK = "etc/systemd/system/multi-user.target.wants/gpuops-irq-affinity.service"


def test_render_boot_files_equal_the_former_templates():
    script = ia.render_boot_script(CONF)
    unit = ia.render_boot_unit(SCRIPT, CONF)
    assert hashlib.sha256(script.encode()).hexdigest() == TEMPLATE_SCRIPT_SHA256
    assert hashlib.sha256(unit.encode()).hexdigest() == TEMPLATE_UNIT_SHA256
    assert script.startswith("#!/bin/sh\n# Ansible managed\n")
    assert f"CONF={CONF}\n" in script
    assert f"ExecStart={SCRIPT}\n" in unit
    assert f"ConditionPathExists={CONF}\n" in unit


def test_render_boot_files_follow_the_paths_and_refuse_unsafe_ones():
    assert "CONF=/srv/irq.conf\n" in ia.render_boot_script("/srv/irq.conf")
    assert "ExecStart=/opt/bin/irq\n" in ia.render_boot_unit("/opt/bin/irq", "/srv/irq.conf")
    with pytest.raises(ValueError, match="absolute"):
        ia.render_boot_script("relative/irq.conf")
    with pytest.raises(ValueError, match="spaces"):
        ia.render_boot_unit("/opt/my script", CONF)


def test_boot_files_plan():
    files = ia.boot_files(SCRIPT, CONF)
    assert [(f["kind"], f["path"], f.get("mode"), f.get("link")) for f in files] == [
        ("script", SCRIPT, 0o755, None),
        ("unit", "/" + UNIT, 0o644, None),
        ("link", "/" + LINK, None, "/" + UNIT),
    ]


def boot_args(root):
    return {"drivers": ["nvidia"], "boot_unit": True, "root": str(root), "apply_live": "never"}


def test_module_installs_the_boot_unit_below_root(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    assert not (root / "usr/local/sbin").exists()
    checked = run_module(module, boot_args(root), check_mode=True, diff=True)
    assert checked["changed"] is True
    assert checked["changed_unit"] is True
    assert checked["boot_files"] == [str(root / SCRIPT.lstrip("/")), str(root / UNIT), str(root / LINK)]
    assert not (root / "usr/local/sbin").exists()
    assert not (root / "etc/systemd").exists()
    assert {d["before_header"] for d in checked["diff"]} >= set(checked["boot_files"])

    first = run_module(module, boot_args(root), diff=True)
    assert first["changed_unit"] is True
    script = root / SCRIPT.lstrip("/")
    assert script.read_text() == ia.render_boot_script(CONF)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / UNIT).stat().st_mode) == 0o644
    assert (root / UNIT).read_text() == ia.render_boot_unit(SCRIPT, CONF)
    assert os.readlink(root / LINK) == "/" + UNIT, "the link points at the unit as the node sees it"
    for directory in ("usr/local/sbin", "etc/systemd/system/multi-user.target.wants"):
        assert stat.S_IMODE((root / directory).stat().st_mode) == 0o755
    unit_diff = [d for d in first["diff"] if d["after_header"] == str(root / UNIT)]
    assert unit_diff == [
        dict(
            before="",
            after=ia.render_boot_unit(SCRIPT, CONF),
            before_header=str(root / UNIT),
            after_header=str(root / UNIT),
        )
    ]

    second = run_module(module, boot_args(root), diff=True)
    assert second["changed"] is False
    assert second["changed_unit"] is False
    assert second["boot_files"] == []


def test_module_changed_unit_only_when_the_unit_changes(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    run_module(module, boot_args(root))
    script = root / SCRIPT.lstrip("/")
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o700)
    fixed = run_module(module, boot_args(root))
    assert fixed["changed"] is True
    assert fixed["changed_unit"] is False
    assert fixed["boot_files"] == [str(script)]
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    (root / LINK).unlink()
    (root / LINK).write_text("not a link\n")
    relinked = run_module(module, boot_args(root), diff=True)
    assert relinked["boot_files"] == [str(root / LINK)]
    assert relinked["changed_unit"] is False
    assert os.readlink(root / LINK) == "/" + UNIT
    (root / UNIT).write_text("[Unit]\n")
    reunit = run_module(module, boot_args(root))
    assert reunit["changed_unit"] is True
    assert reunit["boot_files"] == [str(root / UNIT)]


def test_module_without_boot_unit_writes_no_boot_file(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    args = dict(boot_args(root), boot_unit=False)
    result = run_module(module, args)
    assert result["boot_files"] == []
    assert result["changed_unit"] is False
    assert not (root / "etc/systemd").exists()
    assert not (root / "usr/local/sbin").exists()


def test_module_refuses_a_directory_where_the_link_goes(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    (root / LINK).mkdir(parents=True)
    result = run_module(module, boot_args(root))
    assert result["_failed"] is True
    assert "is a directory" in result["msg"]


# ------------------------------------------------------------------ as a part of another module
def test_run_as_a_part_returns_what_the_module_returns(make_tree, monkeypatch):
    root, _unused = make_tree("one_socket")
    (root / "etc/sysconfig").mkdir(parents=True)
    (root / "etc/sysconfig/irqbalance").write_text('IRQBALANCE_ARGS=""\n')
    options = dict(boot_args(root), drivers=["mlx5_core", "nvidia"], housekeeping_cpus="0", irqbalance="ban")
    harness = ModuleHarness(
        monkeypatch, commands=FakeCommands(default=(0, "", "")), bins={"systemctl": "/bin/systemctl"}
    )
    expected = harness.run(module, options, check_mode=True, diff=True)
    assert expected["changed"] is True
    assert expected["irqbalance"]["action"] == "configured"

    params, errors = validate(ia.MODULE_KWARGS, options)
    assert errors == []
    with set_module_args({}, check_mode=True, diff=True):
        host = AnsibleModule(argument_spec={}, supports_check_mode=True)
    use_c_locale(host)
    assert json.loads(json.dumps(ia.run(Part(host, params)))) == expected
    assert not (root / "etc/gpuops/irq-affinity.conf").exists(), "the part ran in the host's check mode"

    bad = {"devices": ["eth7"], "root": str(root)}
    with pytest.raises(PartFailed) as failed:
        ia.run(Part(host, validate(ia.MODULE_KWARGS, bad)[0]))
    assert failed.value.msg == harness.fail(module, bad)["msg"]
