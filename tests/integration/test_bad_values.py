"""Bad values are refused on the controller, before any host is contacted, on every entry playbook.

The hosts of ``inventories/bad_values`` cannot be reached (port 9): a task that
contacted one would show as unreachable or failed, so ``contacted(run) == []``
proves validation needed no host. Each entry playbook lists every problem of
every host once, and starts no later play.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .playbook_run import CONTROLLER_ONLY, PlaybookRun, run_playbook

pytestmark = pytest.mark.integration

BAD = "tests/integration/inventories/bad_values/hosts.yml"
VALIDATE_PLAY = "Validate the controller, the inventory and the requested stack"
STOP_TASK = "Stop the run when any host has a problem"


def contacted(run: PlaybookRun) -> list:
    """Results of tasks that reached (or tried to reach) a host: anything but a controller-only action."""
    return [
        r
        for r in run.results
        if r.event == "runner_on_unreachable" or (r.event != "runner_on_skipped" and r.action not in CONTROLLER_ONLY)
    ]


def refusal(run: PlaybookRun) -> str:
    """The validation play's one failure message; the run stopped there and contacted no host."""
    assert run.status == "failed", run.stdout[-3000:]
    assert run.plays_started == [VALIDATE_PLAY]
    # An unreachable host's failed read is reported in this message too, not on its own.
    (failure,) = [
        r for r in run.failures if r.task != "Read the distribution of hosts whose inventory does not name it"
    ]
    assert failure.task == STOP_TASK
    assert run.changed == []
    return failure.result["msg"]


def lines_of(message: str) -> dict[str, list[str]]:
    """``{host: [problems]}`` from the report's ``  - host: problem`` lines."""
    found: dict[str, list[str]] = {}
    for line in message.splitlines()[1:]:
        host, _sep, problem = line.strip().removeprefix("- ").partition(": ")
        found.setdefault(host, []).append(problem)
    return found


@pytest.fixture(scope="module")
def site_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("site")
    report = workdir / "health.json"
    run = run_playbook("site.yml", BAD, workdir / "runner", extravars={"gpuops_health_report_path": str(report)})
    run.health_report = report
    return run


@pytest.fixture(scope="module")
def site_problems(site_run):
    assert contacted(site_run) == []
    return lines_of(refusal(site_run))


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("reboot", "gpuops_reboot is 'sometimes'; set one of: auto, never, always"),
        ("kernel", "gpuops_kernel is 'newest': set latest, or a kernel release as uname -r prints it"),
        ("pin", "nvidia_stack_pin_priority is 500; set a whole number, at least 1001"),
        (
            "http-repo",
            "nvidia_stack_repo_url is 'http://mirror.example.com/cuda/repos/ubuntu2204/x86_64/': a plain http://",
        ),
        ("http-repo", "nvidia_stack_repo_key_url is 'http://mirror.example.com/keys/cuda.gpg': a plain http://"),
        ("empty-key", "item 0 (dcgm-mirror): key_url is empty; set the https:// URL of the key"),
        ("hugepages", "kernel_tuning_hugepages is -4; set a whole number, at least 0"),
        ("thp", "kernel_tuning_thp_mode is 'on'; set one of: always, madvise, never"),
        ("cpus", "kernel_tuning_irq_housekeeping_cpus is '0-': not a CPU list; write CPUs and ranges such as 0-3"),
        ("cmdline", "kernel argument 'quiet;reboot' holds whitespace, quotes or shell syntax"),
        ("profile", "kernel_tuning_profile is 'trainig'; set one of: training, inference, none"),
        ("one-string", "a single string; give a list with one kernel argument per item, e.g. ['iommu=pt', 'nokaslr']"),
        ("level", "gpuops_health_level is 'full'; set one of: quick, standard, extended"),
        ("count", "gpuops_health_expected_gpu_count is 'eight'; set a whole number"),
        ("template", "gpuops_health_expected_gpu_count cannot be read: "),
        ("release", "driver 550.90 is not a release the compatibility matrix knows for R550"),
        ("release", "set allow_unknown_release: true in the stack request"),
        ("matrix", "gpuops_matrix_path: compatibility matrix /nonexistent/nvidia_stack.yml is invalid"),
        ("matrix", "cannot read the file"),
        ("no-stack", "gpuops_stack is not set: set the NVIDIA stack for this host"),
        ("no-gpu", "gpuops_gpu is not set: set the host's GPU model"),
        (
            "sysctl-key",
            "kernel_tuning_sysctl_extra is {kernel.//.//.//.etc.cron/d.x: '* * * * * root touch /tmp/owned'}: key "
            "'kernel.//.//.//.etc.cron/d.x' has the part '//', which names the directory itself or its parent",
        ),
        (
            "epel-http",
            "nvidia_stack_epel_release_url is 'http://mirror.example.com/epel/epel-release-latest-9.noarch.rpm': "
            "a plain http:// URL",
        ),
    ],
)
def test_site_refuses_each_bad_value_naming_the_variable(site_problems, host, expected):
    assert any(expected in problem for problem in site_problems.get(host, [])), site_problems.get(host)


def test_site_lists_every_host_once_and_only_the_bad_ones(site_run, site_problems):
    message = refusal(site_run)
    assert message.startswith("gpuops.cluster validation failed on 20 of 21 host(s); nothing was changed.")
    assert "good" not in site_problems
    # one problem per host, except the two that are wrong twice (http-repo, release) and the matrix's one line
    assert {host: len(problems) for host, problems in site_problems.items() if len(problems) != 1} == {"http-repo": 2}


def test_site_messages_show_no_internal_type_names(site_run):
    message = refusal(site_run)
    for internal in ("_AnsibleTagged", "_AnsibleLazyTemplate", "CapturedExceptionMarker", "Marker", "<class"):
        assert internal not in message


def test_site_writes_no_health_report_and_runs_no_later_play(site_run):
    assert site_run.tasks_run_outside(VALIDATE_PLAY) == []
    assert not site_run.health_report.exists()


def _write(tmp_path: Path, inventory: dict) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


def test_an_unreachable_host_is_reported_with_the_others_and_nothing_follows(tmp_path: Path):
    report = tmp_path / "health.json"
    base = {"gpuops_gpu": "h100-sxm", "gpuops_stack": {"driver": "580", "cuda": "13.0"}}
    inventory = {
        "all": {
            "vars": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_ssh_common_args": "-o ConnectTimeout=2"},
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        # no gpuops_os: its distribution is read, and the connection is refused
                        "far": base,
                        "typo": dict(base, gpuops_os="Ubuntu", gpuops_os_version="22.04", gpuops_reboot="sometimes"),
                    }
                }
            },
        }
    }
    run = run_playbook(
        "site.yml",
        _write(tmp_path, inventory),
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
    )
    problems = lines_of(refusal(run))
    assert [r.host for r in run.results if r.event == "runner_on_unreachable"] == ["far"]
    assert problems["far"][0].startswith("its distribution could not be read (")
    assert "gpuops_os and gpuops_os_version" in problems["far"][0]
    assert problems["typo"] == ["gpuops_reboot is 'sometimes'; set one of: auto, never, always"]
    assert run.tasks_run_outside(VALIDATE_PLAY) == []
    assert not report.exists()


def test_kernel_tuning_alone_validates_before_connecting(tmp_path: Path):
    run = run_playbook("playbooks/kernel_tuning.yml", BAD, tmp_path / "runner")
    assert contacted(run) == []
    problems = lines_of(refusal(run))
    assert "kernel_tuning_hugepages is -4; set a whole number, at least 0" in problems["hugepages"]
    assert "kernel_tuning_thp_mode is 'on'; set one of: always, madvise, never" in problems["thp"]
    # Tuning needs no stack: a host without one, or with an unknown release, is fine here.
    assert "no-stack" not in problems
    assert "release" not in problems


def test_health_check_alone_refuses_a_typo_in_the_level_as_such(tmp_path: Path):
    report = tmp_path / "health.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        BAD,
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report), "gpuops_target_hosts": "level:count:good"},
    )
    assert contacted(run) == []
    message = refusal(run)
    # gpuops_target_hosts is honoured: three hosts validated, two of them wrong
    assert message.startswith("gpuops.cluster validation failed on 2 of 3 host(s)")
    assert lines_of(message) == {
        "count": ["gpuops_health_expected_gpu_count is 'eight'; set a whole number"],
        "level": ["gpuops_health_level is 'full'; set one of: quick, standard, extended"],
    }
    assert "Unhealthy" not in run.stdout
    assert not report.exists()


def test_rolling_upgrade_reports_stack_and_settings_together(tmp_path: Path):
    run = run_playbook(
        "rolling_upgrade.yml",
        BAD,
        tmp_path / "runner",
        limit="good:release:level",
        extravars={
            "gpuops_upgrade_canary_group": "canaries",
            "gpuops_upgrade_drain": "slrum",
            "gpuops_upgrade_previous_stack": {"driver": "551", "cuda": "12.4"},
            # a list where the registry says a string: refused, never passed on to the nodes
            "gpuops_upgrade_maintenance_reservation": ["maint-2026-12"],
        },
    )
    assert contacted(run) == []
    problems = lines_of(refusal(run))
    for host in ("good", "release", "level"):
        found = problems[host]
        assert "gpuops_upgrade_drain is 'slrum'; set one of: none, slurm, kubernetes" in found
        assert "gpuops_upgrade_maintenance_reservation is ['maint-2026-12']; set a string" in found
        assert any(
            p.startswith("gpuops_upgrade_canary_group is 'canaries', which is not an inventory group") for p in found
        )
        assert any(
            p.startswith("gpuops_upgrade_previous_stack (the rollback target) does not resolve: driver branch R551")
            for p in found
        )
    assert any("driver 550.90 is not a release" in p for p in problems["release"])
    assert any(re.match(r"gpuops_health_level is 'full'", p) for p in problems["level"])
