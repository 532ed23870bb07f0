"""Checks of the rolling upgrade's settings (module_utils/upgrade/upgrade_settings)."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.lookup.upgrade_settings import LookupModule
from ansible_collections.gpuops.cluster.plugins.module_utils import host_validation, variable_registry, variable_values
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    drain_adapter,
    upgrade_settings,
    window_input,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.upgrade_settings import canary_problems, problems

SPECS = variable_registry.load_specs()


def value_problems(name, value):
    """The registry's checks of one gpuops_upgrade_* value (type, choices, min)."""
    return variable_values.problems({"gpuops_upgrade_" + name: value}, SPECS)


# What the role reads when nothing is set: each setting's default (None: unset, no default).
UNSET = dict.fromkeys(("slurm_controller", "run_id", "report_path", "journal_path"))
DEFAULTS = UNSET | upgrade_settings.settings({})
RUN = {name: DEFAULTS[name] for name in upgrade_settings.RUN_SETTINGS}


def test_the_defaults_have_no_problem():
    assert problems(DEFAULTS, RUN, ["gpu1"]) == []


def test_the_defaults_pass_the_registry_checks():
    values = {upgrade_settings.PREFIX + name: value for name, value in upgrade_settings.DEFAULTS.items()}
    assert variable_values.problems(values, SPECS) == []


def test_the_registry_documents_each_default_as_written_in_python():
    """playbooks/vars/gpuops_variables.yml says each setting's default under ``default``; it cannot drift."""
    registry = yaml.safe_load((variable_registry.COLLECTION_ROOT / variable_registry.REGISTRY_PATH).read_text())
    entries = registry["gpuops_variables"]
    documented = {
        name[len(upgrade_settings.PREFIX) :]: entry["default"]
        for name, entry in entries.items()
        if name.startswith(upgrade_settings.PREFIX) and "default" in entry
    }
    assert documented == upgrade_settings.DEFAULTS


def test_the_window_defaults_are_the_planners():
    window = set(window_input.SETTINGS) & set(upgrade_settings.DEFAULTS) - {"deadline"}
    assert {name: upgrade_settings.DEFAULTS[name] for name in window} == {
        name: window_input.DEFAULTS[name] for name in window
    }
    assert window_input.DEFAULTS["max_job_wait"] == 3600  # the one place the wait is written
    # the operator's "auto" is the window's own default
    auto = upgrade_settings.DEFAULTS["deadline"]
    assert upgrade_settings.deadline_at(auto, 1000) == window_input.DEFAULTS["deadline"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", None),
        (None, None),
        (0, 0),
        ("0", 0),
        (3600, 4600),
        ("90m", 1000 + 5400),
        ("36h", 1000 + 36 * 3600),
        ("2d", 1000 + 2 * 86400),
        ("2026-12-06T18:00:00Z", 1796580000.0),
        ("2026-12-06T18:00:00", 1796580000.0),  # no zone: UTC
        ("2026-12-06T19:00:00+01:00", 1796580000.0),
    ],
)
def test_the_deadline_is_a_duration_a_time_zero_or_auto(value, expected):
    assert upgrade_settings.deadline_at(value, 1000) == expected


@pytest.mark.parametrize("value", ["tomorrow", "36x", -5, True, "2026-13-01T00:00:00Z"])
def test_a_deadline_that_is_neither_is_refused_before_any_node(value):
    (problem,) = upgrade_settings.problems({"deadline": value})
    assert problem.startswith("gpuops_upgrade_deadline: ")
    assert "set a duration, a time, 0 (wait for no job) or auto" in problem


def test_a_set_value_wins_and_null_takes_the_default():
    variables = {"gpuops_upgrade_max_job_wait": 7200, "gpuops_upgrade_drain": None, "gpuops_upgrade_waves": 3}
    found = upgrade_settings.settings(variables)
    assert set(found) == set(upgrade_settings.DEFAULTS)
    assert found["max_job_wait"] == 7200
    assert found["drain"] == "none"
    found["stop_services"].append("x")  # a caller's change does not reach the table
    assert "x" not in upgrade_settings.DEFAULTS["stop_services"]
    with pytest.raises(ValueError, match="as a mapping"):
        upgrade_settings.settings([])


def test_the_lookup_templates_only_the_upgrade_settings():
    variables = {
        "gpuops_upgrade_max_job_wait": trust_as_template("{{ 60 * 30 }}"),
        "gpuops_upgrade_per_domain": {"rack": 1},
        "unrelated": trust_as_template("{{ undefined_variable_here }}"),  # never templated
    }
    loader = DataLoader()
    (found,) = LookupModule(loader=loader, templar=Templar(loader, variables)).run([], variables)
    assert found == dict(upgrade_settings.DEFAULTS, max_job_wait=1800, per_domain={"rack": 1})


def test_the_lookup_takes_no_terms_or_options():
    lookup = LookupModule(loader=DataLoader(), templar=Templar(DataLoader(), {}))
    with pytest.raises(AnsibleLookupError, match="takes no terms and no options"):
        lookup.run(["drain"], {})


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("drain", "slrum", "none, slurm, kubernetes"),
        ("drain", "Slurm", "none, slurm, kubernetes"),
        ("on_failure", "rolback", "halt, rollback"),
        ("on_drain_timeout", "skip", "halt, continue"),
        ("gate_level", "full", "quick, standard, extended"),
        ("canary_gate_level", "", "quick, standard, extended"),
    ],
)
def test_a_value_outside_its_choices_names_the_variable_and_the_choices(name, value, allowed):
    assert value_problems(name, value) == ["gpuops_upgrade_%s is %r; set one of: %s" % (name, value, allowed)]
    assert value_problems(name, DEFAULTS[name]) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_job_wait", "1h"), ("max_job_wait", -1), ("drain_poll_interval", 0), ("canary_soak_seconds", True)],
)
def test_seconds_must_be_whole_numbers_within_range(name, value):
    (found,) = value_problems(name, value)
    assert found.startswith("gpuops_upgrade_%s is %s; set a whole number" % (name, variable_values.show(value)))
    assert value_problems(name, DEFAULTS[name]) == []


def test_a_setting_not_set_is_none_and_its_default_applies():
    unset = dict.fromkeys(DEFAULTS)
    assert problems(unset, dict.fromkeys(RUN), ["gpu1"]) == []
    # set on the controller only: the host reads the same value
    assert problems(unset, dict(RUN, waves=[1, "50%"])) == []


def test_seconds_given_as_strings_on_the_command_line_are_accepted():
    assert value_problems("max_job_wait", "600") == []
    assert value_problems("drain_poll_interval", "5") == []


def test_drain_ahead_is_a_count_and_needs_slurm():
    assert value_problems("drain_ahead", "4") == []
    (found,) = value_problems("drain_ahead", -1)
    assert found.startswith("gpuops_upgrade_drain_ahead is -1; set a whole number")
    (without,) = problems(dict(DEFAULTS, drain_ahead=4), dict(RUN, drain_ahead=4), ["gpu1"])
    assert without == (
        "gpuops_upgrade_drain_ahead is 4 but gpuops_upgrade_drain is none: nodes are drained ahead of their slot "
        "only through Slurm; set gpuops_upgrade_drain: slurm, or gpuops_upgrade_drain_ahead: 0"
    )
    slurm = dict(DEFAULTS, drain="slurm", slurm_controller="ctl", drain_ahead=4)
    assert problems(slurm, dict(RUN, drain_ahead=4), ["gpu1", "ctl"]) == []


def test_slurm_needs_a_controller_that_is_in_the_inventory():
    missing = problems(dict(DEFAULTS, drain="slurm"), RUN, ["gpu1"])
    assert len(missing) == 1
    assert "gpuops_upgrade_slurm_controller is not set" in missing[0]
    unknown = problems(dict(DEFAULTS, drain="slurm", slurm_controller="slurmctl"), RUN, ["gpu1"])
    assert unknown == [
        "gpuops_upgrade_slurm_controller 'slurmctl' is not an inventory host; add it to the inventory "
        "or name the host that runs scontrol"
    ]
    assert problems(dict(DEFAULTS, drain="slurm", slurm_controller="slurmctl"), RUN, ["gpu1", "slurmctl"]) == []


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("per_domain", {"rack": 0}, "gpuops_upgrade_per_domain: per_domain.rack is 0: set a positive integer"),
        ("per_domain", [1], "gpuops_upgrade_per_domain: per_domain must map a domain kind"),
        ("partition_floor", 1.5, "gpuops_upgrade_partition_floor: partition_floor is 1.5: set a fraction above 0"),
        ("partition_floor", 0, "gpuops_upgrade_partition_floor: partition_floor is 0: set a fraction above 0"),
    ],
)
def test_bad_window_settings_are_reported(name, value, expected):
    found = problems(dict(DEFAULTS, **{name: value}), dict(RUN, **{name: value}))
    assert len(found) == 1
    assert found[0].startswith(expected)


@pytest.mark.parametrize("domains", ["r07", {"rack": 7}, {"": "r07"}])
def test_bad_domains_of_a_host_are_reported(domains):
    found = problems(dict(DEFAULTS, domains=domains), RUN)
    assert found == [
        "gpuops_upgrade_domains is %r; map each kind of failure domain to this host's member, "
        "such as {rack: r07, nvlink: nvl72-3}" % (domains,)
    ]


def test_good_window_settings_and_domains_pass():
    settings = {"per_domain": {"rack": 1, "nvlink": "2"}, "partition_floor": 0.85}
    assert problems(dict(DEFAULTS, domains={"rack": "r07"}, **settings), dict(RUN, **settings)) == []


def test_bad_max_unavailable_is_reported():
    found = problems(dict(DEFAULTS, max_unavailable="150%"), dict(RUN, max_unavailable="150%"))
    assert found == [
        "gpuops_upgrade_max_unavailable: max_unavailable size '150%' must be a percentage above 0% and at most 100%"
    ]


@pytest.mark.parametrize(
    ("name", "value"), [("per_domain", {"rack": 1}), ("max_unavailable", 2), ("run_id", "r1"), ("barrier", True)]
)
def test_a_run_setting_set_for_some_hosts_only_is_reported(name, value):
    found = problems(dict(DEFAULTS, **{name: value}), RUN)
    assert len(found) == 1
    assert found[0].startswith("gpuops_upgrade_%s is %r on this host but %r for the run" % (name, value, RUN[name]))
    assert "group_vars/all or -e" in found[0]


def test_every_problem_is_listed_at_once():
    values = {
        "gpuops_upgrade_drain": "slrum",
        "gpuops_upgrade_on_failure": "rolback",
        "gpuops_upgrade_drain_poll_interval": "x",
    }
    values["gpuops_upgrade_partition_floor"] = 2.0
    found = host_validation.findings(
        values,
        names=list(values),
        checks=["upgrade"],
        run_values={"gpuops_upgrade_partition_floor": 2.0},
        groups={"all": ["gpu1"]},
    )
    assert len(found["problems"]) == 4, found
    assert [p.split(" ")[0] for p in found["problems"][:3]] == [
        "gpuops_upgrade_drain",
        "gpuops_upgrade_drain_poll_interval",
        "gpuops_upgrade_on_failure",
    ]
    assert found["problems"][3].startswith("gpuops_upgrade_partition_floor: partition_floor is 2.0")


GROUPS = {"all": ["gpu1", "gpu2", "gpu3"], "gpu_nodes": ["gpu1", "gpu2", "gpu3"], "canary": ["gpu2"]}


def test_a_named_canary_group_must_exist():
    (found,) = canary_problems("canaries", GROUPS, ["gpu1", "gpu2", "gpu3"])
    assert found.startswith("gpuops_upgrade_canary_group is 'canaries', which is not an inventory group")
    assert "canary, gpu_nodes" in found
    assert canary_problems("canary", GROUPS, ["gpu1", "gpu2", "gpu3"]) == []


def test_unset_canary_group_falls_back_only_when_the_default_group_is_missing():
    assert canary_problems(None, {"all": ["gpu1"], "gpu_nodes": ["gpu1"]}, ["gpu1"]) == []
    (found,) = canary_problems(None, GROUPS, ["gpu1", "gpu3"])
    assert found.startswith("canary host(s) gpu2 of group 'canary' are not in this run")


def test_canary_checks_run_with_the_other_settings_when_groups_are_given():
    found = problems(
        dict(DEFAULTS, canary_group="canaries"),
        dict(RUN, canary_group="canaries"),
        GROUPS["all"],
        groups=GROUPS,
        fleet=GROUPS["all"],
    )
    assert len(found) == 1
    assert "'canaries', which is not an inventory group" in found[0]


# Checks of the run as a whole: forks against the window, per_domain against the declared domains.


@pytest.mark.parametrize(
    ("max_unavailable", "fleet", "forks", "window"),
    [(8, 100, 5, 8), ("10%", 256, 5, 25), (None, 256, 24, 25)],
)
def test_forks_below_the_window_are_refused_with_the_fix(max_unavailable, fleet, forks, window):
    (found,) = upgrade_settings.run_problems(max_unavailable, fleet, forks=forks)
    assert found.startswith("forks is %d but the window takes up to %d node(s) at once" % (forks, window))
    assert "run with --forks %d" % window in found
    assert "lower gpuops_upgrade_max_unavailable to %d" % forks in found


@pytest.mark.parametrize(
    ("max_unavailable", "fleet", "forks"),
    [(8, 100, 8), ("10%", 256, 25), (None, 10, 5), (4, 10, None), ("bad", 10, 1), (2, 10, "x")],
)
def test_forks_at_least_the_window_or_unknown_pass(max_unavailable, fleet, forks):
    assert upgrade_settings.run_problems(max_unavailable, fleet, forks=forks) == []


def test_per_domain_kind_no_host_declares_is_refused():
    (found,) = upgrade_settings.run_problems(
        None, 3, per_domain={"rack": 1}, domains_by_host={"gpu1": {}, "gpu2": None}
    )
    assert found.startswith("gpuops_upgrade_per_domain limits 'rack', but no host of the run declares a rack")
    assert "gpuops_upgrade_domains: {rack: r07}" in found
    (found,) = upgrade_settings.run_problems(
        None, 2, per_domain={"rack": 1, "nvlink": 1}, domains_by_host={"gpu1": {"rack": "r1"}, "gpu2": {}}
    )
    assert "limits 'nvlink'" in found
    assert found.endswith("(kinds declared: rack)")


def test_per_domain_kind_one_host_declares_passes():
    domains = {"gpu1": {"rack": "r1"}, "gpu2": {}}
    assert upgrade_settings.run_problems(None, 2, per_domain={"rack": 1}, domains_by_host=domains) == []
    assert upgrade_settings.run_problems(None, 2, per_domain={}, domains_by_host={}) == []


def test_run_problems_are_listed_once_under_the_first_host_of_the_run():
    from ansible_collections.gpuops.cluster.plugins.filter.validation import validation_findings

    host = {"names": [], "variables": {}, "unreadable": {}}
    run = {"gpuops_upgrade_max_unavailable": 4, "gpuops_upgrade_per_domain": {"rack": 1}}
    common = {"checks": ["upgrade"], "run": run, "fleet": ["gpu2", "gpu1"], "forks": 2, "domains": {}}
    first = validation_findings(host, this_host="gpu1", **common)["problems"]
    assert [p.split(" ")[0] for p in first] == ["forks", "gpuops_upgrade_per_domain"]
    assert validation_findings(host, this_host="gpu2", **common)["problems"] == []
    common["checks"] = []
    assert validation_findings(host, this_host="gpu1", **common)["problems"] == []


@pytest.mark.parametrize(
    ("name", "replacement"),
    [
        ("gpuops_upgrade_waves", "set gpuops_upgrade_max_unavailable"),
        ("gpuops_upgrade_drain_timeout", "replaced in 0.3.0 by gpuops_upgrade_max_job_wait"),
    ],
)
def test_a_removed_setting_names_what_replaced_it(name, replacement):
    found = host_validation.findings({name: [1, "25%"]}, names=[name], checks=["upgrade"], groups={"all": ["gpu1"]})
    assert len(found["problems"]) == 1, found
    assert found["problems"][0].startswith("%s was removed: " % name)
    assert replacement in found["problems"][0]
    assert "did you mean" not in found["problems"][0]


def test_every_removed_setting_has_its_replacement_written():
    removed = {name for name, spec in SPECS.items() if spec.get("format") == "removed"}
    assert removed == set(variable_values.REMOVED)


# Values of the wrong type, and values from the command line (-e name=value: always a string).


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("maintenance_reservation", ["maint-2026-12"], "gpuops_upgrade_maintenance_reservation is ['maint-2026-12']"),
        ("maintenance_reservation", {"name": "maint"}, "gpuops_upgrade_maintenance_reservation is {name: 'maint'}"),
        ("canary_group", ["canary"], "gpuops_upgrade_canary_group is ['canary']"),
        ("journal_path", ["/var/log/a"], "gpuops_upgrade_journal_path is ['/var/log/a']"),
        ("run_id", {"id": 1}, "gpuops_upgrade_run_id is {id: 1}"),
        ("plan_only", ["true"], "gpuops_upgrade_plan_only is ['true']"),
        ("max_job_wait", ["600"], "gpuops_upgrade_max_job_wait is ['600']"),
        ("per_domain", ["rack"], "gpuops_upgrade_per_domain is ['rack']"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused(name, value, expected):
    (found,) = value_problems(name, value)
    assert found.startswith(expected + "; set ")


def test_settings_from_the_command_line_take_the_registry_types():
    """-e gpuops_upgrade_plan_only=true gives the string 'true': the role must see the bool the registry declares."""
    types = {name: spec.get("type") for name, spec in SPECS.items()}
    given = {
        "gpuops_upgrade_plan_only": "true",
        "gpuops_upgrade_barrier": "no",
        "gpuops_upgrade_max_job_wait": "1800",
        "gpuops_upgrade_partition_floor": "0.5",
        "gpuops_upgrade_drain_ahead": "2",
        "gpuops_upgrade_max_unavailable": "10%",
        "gpuops_upgrade_maintenance_reservation": "maint-2026-12",
    }
    assert [value_problems(name[len("gpuops_upgrade_") :], value) for name, value in given.items()] == [[]] * 7
    found = upgrade_settings.settings(given, types)
    assert found["plan_only"] is True
    assert found["barrier"] is False
    assert found["max_job_wait"] == 1800
    assert found["partition_floor"] == 0.5
    assert found["drain_ahead"] == 2
    assert found["max_unavailable"] == "10%"
    assert found["maintenance_reservation"] == "maint-2026-12"
    # a value that does not convert is left as given: the validation play refuses it
    assert upgrade_settings.settings({"gpuops_upgrade_plan_only": "maybe"}, types)["plan_only"] == "maybe"


def test_the_lookup_gives_the_command_lines_strings_as_their_types():
    variables = {"gpuops_upgrade_plan_only": "true", "gpuops_upgrade_max_job_wait": "1800"}
    loader = DataLoader()
    (found,) = LookupModule(loader=loader, templar=Templar(loader, variables)).run([], variables)
    assert found["plan_only"] is True
    assert found["max_job_wait"] == 1800


def test_only_the_adapter_that_drains_ahead_may_have_drain_ahead():
    """The decision is the drain adapter's (drain_adapter.drains_ahead), the check names what to set."""
    assert [adapter for adapter in drain_adapter.ADAPTERS if drain_adapter.drains_ahead(adapter)] == ["slurm"]
    assert [adapter for adapter in drain_adapter.ADAPTERS if drain_adapter.reads_fleet(adapter)] == [
        "slurm",
        "kubernetes",
    ]
    for adapter in ("kubernetes", "none"):
        (found,) = problems({"drain": adapter, "drain_ahead": 2})
        assert found.startswith("gpuops_upgrade_drain_ahead is 2 but gpuops_upgrade_drain is %s" % adapter)
    assert problems({"drain_ahead": "1"})
    assert not problems({"drain_ahead": 0})
    assert (
        drain_adapter.window_settings(dict(upgrade_settings.DEFAULTS, drain="none", drain_ahead=4))["drain_ahead"] == 0
    )
    assert (
        drain_adapter.window_settings(dict(upgrade_settings.DEFAULTS, drain="slurm", drain_ahead=4))["drain_ahead"] == 4
    )
