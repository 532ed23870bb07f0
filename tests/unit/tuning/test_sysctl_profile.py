"""sysctl_profile: rendering, parsing, live reads, drift, scope, and the module's single reload."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import sysctl_profile as sp
from ansible_collections.gpuops.cluster.plugins.modules import sysctl_profile as module

from tests.unit.module_harness import FakeCommands, ModuleHarness, set_module_args, unbounded

PROFILE = {
    "kernel.numa_balancing": 0,
    "kernel.sched_autogroup_enabled": 0,
    "kernel.shmmax": "18446744073692774399",
    "vm.swappiness": 1,
    "vm.max_map_count": 1048576,
    "vm.dirty_ratio": 10,
    "vm.dirty_background_ratio": 5,
    "vm.zone_reclaim_mode": 0,
    "vm.nr_hugepages": 0,
    "vm.min_free_kbytes": 1048576,
    "net.core.rmem_max": 268435456,
    "net.core.wmem_max": 268435456,
    "net.core.rmem_default": 67108864,
    "net.core.wmem_default": 67108864,
    "net.core.netdev_max_backlog": 250000,
    "net.core.somaxconn": 4096,
    "net.ipv4.tcp_rmem": [4096, 87380, 134217728],
    "net.ipv4.tcp_wmem": "4096   65536\t134217728",
    "net.ipv4.tcp_timestamps": True,
    "net.ipv4.tcp_sack": 1,
}


def test_profile_has_twenty_keys():
    assert len(PROFILE) == 20


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, "1"), (False, "0"), (7, "7"), ([4096, 87380, 6291456], "4096 87380 6291456"), (" a\t b  c ", "a b c")],
)
def test_normalise_value(value, expected):
    assert sp.normalise_value(value) == expected


def test_render_is_sorted_deterministic_and_parses_back():
    first = sp.render(PROFILE)
    reordered = dict(reversed(list(PROFILE.items())))
    assert sp.render(reordered) == first
    body = [line for line in first.splitlines() if not line.startswith("#")]
    assert body == sorted(body)
    assert "net.ipv4.tcp_wmem = 4096 65536 134217728" in body
    assert sp.parse_dropin(first) == sp.normalise(PROFILE)


def test_parse_dropin_skips_comments_and_ignore_prefix():
    text = "# c\n; c\n\n-net.core.somaxconn = 1024\nvm.swappiness=10\nnot a line\nnet.ipv4.tcp_rmem = 1\t2   3\n"
    assert sp.parse_dropin(text) == {"net.core.somaxconn": "1024", "vm.swappiness": "10", "net.ipv4.tcp_rmem": "1 2 3"}


def test_normalise_rejects_none_and_empty_key():
    with pytest.raises(ValueError, match="no value"):
        sp.normalise({"vm.swappiness": None})
    with pytest.raises(ValueError, match="empty"):
        sp.normalise({" ": 1})


def test_key_to_path_swaps_dots_and_slashes():
    assert sp.key_to_path("net.ipv4.conf.eth0/100.rp_filter") == "net/ipv4/conf/eth0.100/rp_filter"


def test_read_live_and_drift(make_tree):
    root, _spec = make_tree("two_socket")
    live = sp.read_live(str(root), ["net.ipv4.tcp_rmem", "vm.swappiness", "dev.missing.key"])
    assert live == {"net.ipv4.tcp_rmem": "4096 131072 6291456", "vm.swappiness": "60", "dev.missing.key": None}
    found = sp.drift(live, {"net.ipv4.tcp_rmem": "4096  131072 6291456", "vm.swappiness": 1, "dev.missing.key": 3})
    assert found == {
        "dev.missing.key": {"live": None, "desired": "3"},
        "vm.swappiness": {"live": "60", "desired": "1"},
    }


@pytest.mark.parametrize(
    ("key", "namespaced"),
    [
        ("net.ipv4.tcp_rmem", True),
        ("net.core.somaxconn", True),
        ("net.core.rmem_max", False),
        ("net.ipv4.tcp_mem", False),
        ("vm.nr_hugepages", False),
        ("kernel.numa_balancing", False),
        ("kernel.shmmax", True),
        ("net.ipv6.conf.all.disable_ipv6", True),
    ],
)
def test_is_namespaced(key, namespaced):
    assert sp.is_namespaced(key) is namespaced


# ------------------------------------------------------------------ module
def fake_sysctl(root):
    """Stand-in for sysctl: -p FILE and -w key=value write the values into the fake /proc/sys."""

    def run(argv):
        pairs = []
        if argv[1] == "-p":
            pairs = list(sp.parse_dropin(Path(argv[2]).read_text()).items())
        else:
            pairs = [tuple(a.split("=", 1)) for a in argv[2:]]
        for key, value in pairs:
            target = root / "proc" / "sys" / sp.key_to_path(key)
            if target.exists():
                target.write_text(value + "\n")
        return 0, "", ""

    return run


def args(root, **extra):
    base = {"sysctls": PROFILE, "root": str(root), "apply_live": "always"}
    base.update(extra)
    return base


def test_module_twenty_keys_one_reload_then_none(make_tree, run_module, as_running_system):
    root, _unused = make_tree("two_socket")
    bins = {"sysctl": "/usr/sbin/sysctl"}
    first = run_module(module, args(root), run_command=fake_sysctl(root), bins=bins)
    assert first["changed"] is True
    assert first["_commands"] == [["/usr/sbin/sysctl", "-p", str(root / "etc/sysctl.d/90-gpuops-tuning.conf")]]
    assert first["drift"]["vm.swappiness"] == {"live": "60", "desired": "1"}
    assert first["drift_after"] == {}
    assert (root / "etc/sysctl.d/90-gpuops-tuning.conf").read_text() == sp.render(PROFILE)
    second = run_module(module, args(root), run_command=fake_sysctl(root), bins=bins)
    assert second["changed"] is False
    assert second["_commands"] == []
    assert second["drift"] == {}


def test_module_check_mode_changes_nothing(make_tree, run_module, as_running_system):
    root, _unused = make_tree("one_socket")
    result = run_module(module, args(root), bins={"sysctl": "/usr/sbin/sysctl"}, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["_commands"] == []
    assert not (root / "etc/sysctl.d/90-gpuops-tuning.conf").exists()
    assert (root / "proc/sys/vm/swappiness").read_text().strip() == "60"
    assert result["diff"]["before"] == ""
    assert "vm.swappiness = 1" in result["diff"]["after"]
    assert "vm.swappiness" in result["applied_live"]


def test_module_file_drift_only_rewrites_without_reload(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    live = {"vm.swappiness": "60"}
    target = root / "etc/sysctl.d/90-gpuops-tuning.conf"
    target.parent.mkdir(parents=True)
    target.write_text("vm.swappiness = 5\n")
    result = run_module(module, args(root, sysctls=live), bins={"sysctl": "/usr/sbin/sysctl"})
    assert result["changed"] is True
    assert result["file_changed"] is True
    assert result["_commands"] == []


def test_module_apply_live_never_persists_only(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, args(root, apply_live="never"), bins={"sysctl": "/usr/sbin/sysctl"})
    assert result["_commands"] == []
    assert {item["name"] for item in result["not_applied_live"]} == set(result["drift"])
    assert result["drift_after"] == result["drift"]


def test_module_in_container_applies_only_namespaced_keys(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    (root / "run").mkdir()
    (root / "run/.containerenv").write_text("")
    result = run_module(module, args(root, apply_live="auto"), run_command=fake_sysctl(root), bins={"sysctl": "/s"})
    # a root other than / never applies under auto; check the container split through a host-like root
    assert result["container"] == "podman"
    assert result["_commands"] == []
    assert all("root is" in item["reason"] for item in result["not_applied_live"])


def test_live_split_in_container():
    drifting = {"vm.swappiness": {}, "net.ipv4.tcp_rmem": {}, "net.core.rmem_max": {}}
    apply, skipped = sp._live_keys("auto", "podman", "/", drifting)
    assert apply == ["net.ipv4.tcp_rmem"]
    assert sorted(k for k, _unused in skipped) == ["net.core.rmem_max", "vm.swappiness"]
    apply, skipped = sp._live_keys("always", "podman", "/", drifting)
    assert sorted(apply) == sorted(drifting)
    assert skipped == []
    apply, skipped = sp._live_keys("auto", None, "/", drifting)
    assert sorted(apply) == sorted(drifting)


def test_module_failed_write_on_host_fails_with_hint(make_tree, run_module, as_running_system):
    root, _unused = make_tree("one_socket")
    result = run_module(
        module,
        args(root, sysctls={"vm.swappiness": 1}),
        run_command=lambda argv: (255, "", "sysctl: permission denied"),
        bins={"sysctl": "/usr/sbin/sysctl"},
    )
    assert result["_failed"] is True
    assert "vm.swappiness" in result["msg"]
    assert result["stderr"] == "sysctl: permission denied"


def test_module_state_absent_removes_file(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    target = root / "etc/sysctl.d/90-gpuops-tuning.conf"
    target.parent.mkdir(parents=True)
    target.write_text("vm.swappiness = 1\n")
    result = run_module(module, {"state": "absent", "root": str(root)})
    assert result["changed"] is True
    assert not target.exists()
    again = run_module(module, {"state": "absent", "root": str(root)})
    assert again["changed"] is False


def test_module_requires_sysctls_when_present(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, {"root": str(root)})
    assert result["_failed"] is True
    assert "sysctls" in result["msg"]


def test_module_never_runs_sysctl_under_another_root(make_tree, run_module):
    """Under a test tree or chroot, sysctl would act on the machine running the module: write the tree instead."""
    root, _unused = make_tree("two_socket")
    result = run_module(module, args(root), run_command=fake_sysctl(root), bins={"sysctl": "/usr/sbin/sysctl"})
    assert result["_commands"] == []
    assert result["command"] == []
    assert result["reloaded"] is True
    assert result["drift_after"] == {}
    assert (root / "proc/sys/vm/swappiness").read_text().strip() == "1"
    assert (root / "proc/sys/net/ipv4/tcp_rmem").read_text().strip() == "4096 87380 134217728"


def test_run_as_a_part_returns_what_the_module_returns(make_tree, run_module, as_running_system, monkeypatch):
    """sp.run on a module_parts.Part over a real AnsibleModule: the same result, and the same one reload."""
    root, _unused = make_tree("two_socket")
    options = args(root, sysctls={"vm.swappiness": 1, "net.ipv4.tcp_rmem": [4096, 87380, 134217728]})
    bins = {"sysctl": "/usr/sbin/sysctl"}
    commands = FakeCommands(fallback=lambda argv: fake_sysctl(root)(unbounded(argv)))
    ModuleHarness(monkeypatch, commands=commands, bins=dict(bins, timeout="/usr/bin/timeout"))
    with set_module_args({}, diff=True):
        execution = use_c_locale(basic.AnsibleModule(argument_spec={}, supports_check_mode=True))
    params, errors = validate(sp.MODULE_KWARGS, options)
    assert errors == []
    as_part = json.loads(json.dumps(sp.run(Part(execution, params))))
    assert as_part["changed"] is True
    assert commands.calls == [["/usr/bin/timeout", "-k", "5", "60", "/usr/sbin/sysctl", "-p", as_part["path"]]]

    shutil.rmtree(root)
    root, _unused = make_tree("two_socket")  # the same tree again, at the same path
    as_module = run_module(module, options, run_command=fake_sysctl(root), bins=bins, diff=True)
    assert as_module.pop("_commands") == [unbounded(call) for call in commands.calls]
    assert as_module.pop("_failed") is False
    assert as_part == as_module


def test_module_a_hung_sysctl_fails_saying_so(make_tree, run_module, as_running_system):
    root, _unused = make_tree("two_socket")
    result = run_module(module, args(root), run_command=lambda argv: (124, "", ""), bins={"sysctl": "/usr/sbin/sysctl"})
    assert result["_failed"] is True
    assert result["msg"] == "could not apply the sysctls live: /usr/sbin/sysctl did not finish in 60 s and was stopped"
    assert result["timed_out"] is True


# ------------------------------------------------------------------ keys that name no /proc/sys entry
ESCAPING_KEY = "kernel.//.//.//.etc.cron/d.x"  # kernel/../../../etc/cron.d/x: /etc/cron.d/x


@pytest.mark.parametrize(
    "key", ["vm.swappiness", "net.ipv4.conf.eth0/100.forwarding", "net.ipv4.conf.all.rp_filter", "-kernel.x"]
)
def test_a_key_naming_a_proc_sys_entry_is_accepted(key):
    assert sp.key_problem(key) is None
    assert sp.check_key(key) == key


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (ESCAPING_KEY, "has the part '//', which names the directory itself or its parent ('..')"),
        ("kernel./.x", "has the part '/', which names the directory itself or its parent ('.')"),
        ("kernel..x", "has an empty part"),
        (".kernel.x", "has an empty part"),
        ("kernel.x.", "has an empty part"),
        ("kernel.x y", "has the part 'x y', with a character no /proc/sys entry name has"),
        ("kernel.x=1", "has the part 'x=1', with a character"),
        ("kernel.x\n", "has the part 'x\\n', with a character"),
        ("", "is empty"),
    ],
)
def test_a_key_that_leaves_proc_sys_or_breaks_the_drop_in_is_refused(key, problem):
    assert sp.key_problem(key).startswith(problem)
    with pytest.raises(ValueError, match="write the name of a /proc/sys entry with dots between its parts"):
        sp.check_key(key)
    with pytest.raises(ValueError, match=re.escape("no part may be empty, '.' or '..'")):
        sp.key_to_path(key)


def test_module_refuses_a_key_that_leaves_proc_sys_and_writes_nothing(make_tree, run_module):
    root, _unused = make_tree("two_socket")
    (root / "etc" / "cron.d").mkdir(parents=True)
    sysctls = {"vm.swappiness": 1, ESCAPING_KEY: "* * * * * root touch /pwned"}
    result = run_module(module, args(root, sysctls=sysctls), bins={"sysctl": "/usr/sbin/sysctl"})
    assert result["_failed"] is True
    assert result["msg"].startswith("cannot render the sysctl profile: sysctl key 'kernel.//.//.//.etc.cron/d.x' has")
    assert result["msg"].endswith("fix the sysctls dict")
    assert not (root / "etc" / "cron.d" / "x").exists()
    assert not (root / "etc" / "sysctl.d" / "90-gpuops-tuning.conf").exists()
    assert result["_commands"] == []
