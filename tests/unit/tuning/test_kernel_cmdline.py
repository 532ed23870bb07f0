"""kernel_cmdline: argument maths, GRUB_CMDLINE_LINUX edits, grubby planning and the module."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, PartFailed, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import kernel_cmdline as kc
from ansible_collections.gpuops.cluster.plugins.modules import kernel_cmdline as module

from tests.unit.module_harness import FakeCommands, ModuleHarness, set_module_args

GRUB = """# If you change this file, run 'update-grub' afterwards.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200 intel_idle.max_cstate=3"
#GRUB_TERMINAL=console
"""

GRUBBY_INFO = """index=0
kernel="/boot/vmlinuz-5.14.0-427.el9.x86_64"
args="ro crashkernel=1G-4G:192M rhgb quiet"
root="/dev/mapper/rl-root"
initrd="/boot/initramfs-5.14.0-427.el9.x86_64.img"
title="Rocky Linux (5.14.0-427.el9.x86_64) 9.4 (Blue Onyx)"
id="abc-5.14.0-427.el9.x86_64"
index=1
kernel="/boot/vmlinuz-0-rescue-abc"
args="ro crashkernel=1G-4G:192M rhgb quiet iommu=pt"
root="/dev/mapper/rl-root"
"""


def test_apply_changes_add_replace_remove():
    current = ["quiet", "iommu=on", "console=tty0", "console=ttyS0", "splash"]
    after = kc.apply_changes(current, ["iommu=pt", "hugepages=16"], ["splash", "quiet"])
    assert after == ["iommu=pt", "console=tty0", "console=ttyS0", "hugepages=16"]
    assert kc.apply_changes(after, ["iommu=pt", "hugepages=16"], ["splash", "quiet"]) == after


def test_apply_changes_repeated_key_keeps_exact_values_in_order():
    current = ["console=ttyS0", "ro", "console=tty0"]
    assert kc.apply_changes(current, ["console=tty0", "console=ttyS1"], []) == ["console=tty0", "console=ttyS1", "ro"]


def test_apply_changes_bare_flag_replaces_value_and_exact_remove():
    assert kc.apply_changes(["nosmt=force"], ["nosmt"], []) == ["nosmt"]
    assert kc.apply_changes(["a=1", "a=2"], [], ["a=1"]) == ["a=2"]
    assert kc.apply_changes(["a=1", "a=2", "b"], [], ["a"]) == ["b"]


def test_validate_args_refuses_whitespace_quotes_and_shell():
    assert kc.validate_args([" iommu=pt "]) == ["iommu=pt"]
    for bad in ["a b", 'x="1"', "$(reboot)", "`id`", "", "=1", "quiet;reboot", "a|b", "a&b", "a>b"]:
        with pytest.raises(kc.CmdlineError):
            kc.validate_args([bad])


def test_split_args_keeps_quoted_values():
    assert kc.split_args('ro  dyndbg="file x.c +p" quiet') == ["ro", 'dyndbg="file x.c +p"', "quiet"]


def test_parse_grub_default_last_assignment_wins():
    text = GRUB + 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX"\n'
    with pytest.raises(kc.CmdlineError, match="shell expansion"):
        kc.parse_grub_default(text)
    assert kc.parse_grub_default(GRUB) == ["console=tty0", "console=ttyS0,115200", "intel_idle.max_cstate=3"]


def test_edit_grub_default_keeps_other_lines_and_is_idempotent():
    edited = kc.edit_grub_default(GRUB, ["intel_idle.max_cstate=1", "iommu=pt"], ["console"])
    assert edited.splitlines()[:5] == GRUB.splitlines()[:5]
    assert 'GRUB_CMDLINE_LINUX="intel_idle.max_cstate=1 iommu=pt"' in edited
    assert edited.endswith("#GRUB_TERMINAL=console\n")
    assert kc.edit_grub_default(edited, ["intel_idle.max_cstate=1", "iommu=pt"], ["console"]) == edited


def test_edit_grub_default_quoting_styles():
    assert (
        kc.edit_grub_default("GRUB_CMDLINE_LINUX='quiet'\n", ["iommu=pt"], [])
        == "GRUB_CMDLINE_LINUX='quiet iommu=pt'\n"
    )
    assert kc.edit_grub_default("GRUB_CMDLINE_LINUX=\n", ["iommu=pt"], []) == 'GRUB_CMDLINE_LINUX="iommu=pt"\n'
    assert kc.edit_grub_default("X=1", ["iommu=pt"], []) == 'X=1\nGRUB_CMDLINE_LINUX="iommu=pt"\n'
    assert kc.edit_grub_default("X=1\n", [], ["quiet"]) == "X=1\n"
    kept = 'export GRUB_CMDLINE_LINUX="a"  # tuned\n'
    assert kc.edit_grub_default(kept, ["b"], []) == 'export GRUB_CMDLINE_LINUX="a b"  # tuned\n'


def test_overriding_dropins():
    dropins = {
        "50-cloudimg.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n',
        "60-extra.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX nomodeset"\n',
        "70-bad.cfg": 'GRUB_CMDLINE_LINUX="nomodeset"\n',
    }
    assert kc.overriding_dropins(dropins) == ["70-bad.cfg"]


def test_pending_compares_only_managed_arguments():
    running = kc.parse_proc_cmdline("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet iommu=pt\n")
    assert kc.pending(running, ["iommu=pt"], []) == []
    assert kc.pending(running, ["iommu=pt", "hugepages=8"], ["quiet"]) == ["hugepages=8", "-quiet"]


def test_grubby_parse_and_plan():
    entries = kc.parse_grubby_info(GRUBBY_INFO)
    assert [e["index"] for e in entries] == [0, 1]
    assert entries[0]["args"] == ["ro", "crashkernel=1G-4G:192M", "rhgb", "quiet"]
    argv = kc.grubby_plan("/usr/sbin/grubby", entries, ["iommu=pt"], ["rhgb"])
    assert argv == ["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=rhgb", "--args=iommu=pt"]
    done = [dict(e, args=kc.apply_changes(e["args"], ["iommu=pt"], ["rhgb"])) for e in entries]
    assert kc.grubby_plan("/usr/sbin/grubby", done, ["iommu=pt"], ["rhgb"]) == []


# ------------------------------------------------------------------ module
def grub_root(make_tree):
    root, _unused = make_tree("one_socket")
    (root / "etc/default").mkdir(parents=True)
    (root / "etc/default/grub").write_text(GRUB)
    return root


def test_module_grub_default_edits_updates_and_reports_reboot(make_tree, run_module, as_running_system):
    root = grub_root(make_tree)
    args = {"args": ["iommu=pt"], "remove_args": ["quiet"], "root": str(root), "apply_live": "always"}
    bins = {"update-grub": "/usr/sbin/update-grub"}
    result = run_module(module, args, bins=bins, diff=True)
    assert result["changed"] is True
    assert result["bootloader"] == "grub_default"
    assert result["_commands"] == [["/usr/sbin/update-grub"]]
    assert "iommu=pt" in result["args_after"]
    assert result["reboot_required"] is True
    assert result["pending_reboot"] == ["iommu=pt", "-quiet"]
    assert "iommu=pt" in (root / "etc/default/grub").read_text()
    assert result["diff"]["before"] == GRUB
    again = run_module(module, args, bins=bins)
    assert again["changed"] is False
    assert again["_commands"] == []
    assert again["reboot_required"] is True


def test_module_check_mode_writes_nothing(make_tree, run_module, as_running_system):
    root = grub_root(make_tree)
    args = {"args": ["iommu=pt"], "root": str(root), "apply_live": "always"}
    result = run_module(module, args, bins={"update-grub": "/usr/sbin/update-grub"}, check_mode=True)
    assert result["changed"] is True
    assert result["_commands"] == []
    assert result["command"] == ["/usr/sbin/update-grub"]
    assert (root / "etc/default/grub").read_text() == GRUB


def test_module_without_live_apply_edits_file_and_lists_update_grub(make_tree, run_module):
    root = grub_root(make_tree)
    result = run_module(module, {"args": ["iommu=pt"], "root": str(root)}, bins={})
    assert result["changed"] is True
    assert result["_commands"] == []
    assert result["not_applied_live"][0]["name"] == "update-grub"


def test_module_missing_update_grub_fails_with_hint(make_tree, run_module, as_running_system):
    root = grub_root(make_tree)
    result = run_module(module, {"args": ["iommu=pt"], "root": str(root), "apply_live": "always"}, bins={})
    assert result["_failed"] is True
    assert "apply_live=never" in result["msg"]


def test_module_grubby_runs_one_update(make_tree, run_module, as_running_system):
    root, _unused = make_tree("one_socket")
    (root / "boot/loader/entries").mkdir(parents=True)

    def grubby(argv):
        return (0, GRUBBY_INFO, "") if argv[1] == "--info=ALL" else (0, "", "")

    args = {"args": ["iommu=pt"], "remove_args": ["rhgb"], "root": str(root), "apply_live": "always"}
    result = run_module(module, args, run_command=grubby, bins={"grubby": "/usr/sbin/grubby"})
    assert result["bootloader"] == "grubby"
    assert result["changed"] is True
    assert result["_commands"][1] == [
        "/usr/sbin/grubby",
        "--update-kernel=ALL",
        "--remove-args=rhgb",
        "--args=iommu=pt",
    ]
    assert len(result["_commands"]) == 2


def test_module_rejects_add_and_remove_of_same_key(make_tree, run_module):
    root = grub_root(make_tree)
    result = run_module(module, {"args": ["iommu=pt"], "remove_args": ["iommu"], "root": str(root)})
    assert result["_failed"] is True
    assert "both added and removed" in result["msg"]


def test_module_never_runs_bootloader_commands_under_another_root(make_tree, run_module):
    root = grub_root(make_tree)
    args = {"args": ["iommu=pt"], "root": str(root), "apply_live": "always"}
    result = run_module(module, args, bins={"update-grub": "/usr/sbin/update-grub", "grubby": "/usr/sbin/grubby"})
    assert result["_commands"] == []
    assert result["not_applied_live"][0]["reason"].startswith("root is")
    grubby = run_module(module, dict(args, bootloader="grubby"), bins={"grubby": "/usr/sbin/grubby"})
    assert grubby["_failed"] is True
    assert grubby["_commands"] == []


# ------------------------------------------------------------------ as a part of another module
def test_run_as_a_part_returns_what_the_module_returns(make_tree, monkeypatch, as_running_system):
    root, _unused = make_tree("one_socket")
    (root / "boot/loader/entries").mkdir(parents=True)
    options = {"args": ["iommu=pt"], "remove_args": ["rhgb"], "root": str(root), "apply_live": "always"}
    commands = FakeCommands({"grubby --info=ALL": GRUBBY_INFO}, inside_timeout=True)
    harness = ModuleHarness(
        monkeypatch, commands=commands, bins={"grubby": "/usr/sbin/grubby", "timeout": "/usr/bin/timeout"}
    )
    expected = harness.run(module, options, check_mode=True, diff=True)
    assert expected["changed"] is True
    assert expected["bootloader"] == "grubby"
    module_calls = list(commands.calls)

    params, errors = validate(kc.MODULE_KWARGS, options)
    assert errors == []
    with set_module_args({}, check_mode=True, diff=True):
        host = AnsibleModule(argument_spec={}, supports_check_mode=True)
    use_c_locale(host)
    commands.calls.clear()
    assert json.loads(json.dumps(kc.run(Part(host, params)))) == expected
    assert commands.calls == module_calls == [["/usr/bin/timeout", "-k", "5", "60", "/usr/sbin/grubby", "--info=ALL"]]

    both = dict(options, remove_args=["iommu"])
    with pytest.raises(PartFailed) as failed:
        kc.run(Part(host, validate(kc.MODULE_KWARGS, both)[0]))
    assert failed.value.msg == harness.fail(module, both)["msg"]
