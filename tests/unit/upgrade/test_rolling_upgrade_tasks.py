"""The order of the rolling upgrade role's steps where a lost controller would otherwise leave a node drained."""

from __future__ import annotations

from pathlib import Path

import yaml

MAIN = Path(__file__).resolve().parents[3] / "roles" / "rolling_upgrade" / "tasks" / "main.yml"


def upgrade_block() -> list[dict]:
    tasks = yaml.safe_load(MAIN.read_text(encoding="utf-8"))
    return next(task for task in tasks if task.get("name") == "Upgrade the node")["block"]


def test_the_node_is_given_back_before_anything_records_its_upgrade_as_finished():
    """A controller lost after the record and before the give-back would leave the node drained with its stack fact
    saying upgraded: the re-run would count it done. Given back first, the fact stays pending until then."""
    names = [task.get("name") for task in upgrade_block()]
    give_back = next(
        index
        for index, task in enumerate(upgrade_block())
        if (task.get("gpuops.cluster.upgrade_drain") or {}).get("state") == "restored"
    )
    assert names[give_back].startswith("Give the node back to its scheduler")
    finished = names.index("Record the new stack as current on the node")
    released = names.index("Give the slot back (the node is in service again), its record built from its steps")
    assert give_back < finished < released
    gate = names.index("Fail the node when its gate failed")
    assert gate < give_back  # never given back before its gate passed


ROLE = MAIN.parents[1]


def test_the_declared_mig_layout_is_applied_again_after_each_driver_change_and_before_its_gate():
    """Issue 29 item 3: a driver change loses the MIG instances; the role applies the layout again (tasks/mig.yml)
    after the install and after a rollback's reinstall, each before the gate that judges it, only where declared."""
    block = upgrade_block()
    names = [task.get("name") for task in block]
    install = names.index("Install the target stack (the role reboots when the loaded module differs)")
    reapply = names.index("Re-apply the declared MIG layout after the driver change")
    assert install < reapply < names.index("Health gate")
    assert block[reapply]["ansible.builtin.include_tasks"] == "mig.yml"
    assert block[reapply]["when"] == "gpuops_mig is defined"
    tasks = yaml.safe_load(MAIN.read_text(encoding="utf-8"))
    rescue = next(task for task in tasks if task.get("name") == "Upgrade the node")["rescue"]
    rollback = next(task for task in rescue if task.get("name") == "Roll back to the previous stack")["block"]
    names = [task.get("name") for task in rollback]
    reapply = names.index("Re-apply the declared MIG layout after the rollback's driver change")
    assert names.index("Reinstall the previous stack") < reapply < names.index("Gate the previous stack")
    assert rollback[reapply]["ansible.builtin.include_tasks"] == "mig.yml"
    assert rollback[reapply]["when"] == "gpuops_mig is defined"


def test_the_mig_layout_is_applied_with_the_options_the_gate_judges_by():
    mig = yaml.safe_load((ROLE / "tasks" / "mig.yml").read_text(encoding="utf-8"))
    applies = [task["gpuops.cluster.gpu_mig"] for task in mig if "gpuops.cluster.gpu_mig" in task]
    assert len(applies) == 2  # and again after a reboot where a GPU's mode waited for one
    for args in applies:
        assert args == {
            "config": "{{ gpuops_mig }}",
            "config_name": "{{ rolling_upgrade_mig_declared.config }}",
            "profile_set": "{{ rolling_upgrade_mig_profile_set }}",
        }
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    # derived as playbooks/health_check.yml derives mig_declared and mig_profile_set, and given to every gpu_health call
    assert (
        "gpuops.cluster.mig_declared(gpuops_mig_config | default(None), gpuops_gpu | default(None))"
        in (variables["rolling_upgrade_mig_declared"])
    )
    assert "gpuops_gpu | gpuops.cluster.mig_profile_set" in variables["rolling_upgrade_mig_profile_set"]
    assert variables["rolling_upgrade_mig_options"] == {
        "mig_profile_set": "{{ rolling_upgrade_mig_profile_set }}",
        "mig_declared": "{{ rolling_upgrade_mig_declared }}",
    }
    assert "combine(rolling_upgrade_mig_health)" in variables["rolling_upgrade_health_options"]
    assert "if gpuops_mig is defined else {}" in variables["rolling_upgrade_mig_health"]


def test_the_canary_gate_and_soak_go_to_the_node_the_window_admitted_as_canary():
    """The plan's preview may name a canary that the run then defers (its job outlasts the wait); the strategy's
    Window admits another node as canary. The gate level and the soak follow the slot record, not the preview."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loaded = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    variables = {name: trust_as_template(value) if isinstance(value, str) else value for name, value in loaded.items()}
    settings = {"canary_gate_level": "extended", "gate_level": "quick"}

    def gate(slot, preview_canaries):
        names = dict(
            variables,
            rolling_upgrade_settings=settings,
            rolling_upgrade_slot={"admitted": True, "slot": slot},
            inventory_hostname="b",
            hostvars={"localhost": {"rolling_upgrade_window": {"canary": preview_canaries}}},
        )
        return Templar(loader=DataLoader(), variables=names).template(trust_as_template("{{ rolling_upgrade_gate }}"))

    assert gate({"canary": True}, ["a"]) == "extended"  # the replacement canary of a deferred "a"
    assert gate({"canary": False}, ["b"]) == "quick"  # planned as canary, admitted after another one


def test_the_nodes_record_is_built_from_registered_results_not_threaded_through_set_fact():
    """Issue 28 item 4: set_fact in the role at most 3 (the survey's decision, the plan, the rescue's failure); every
    slot release hands the node's start and steps to the task that builds the record (node_record.build)."""
    tasks_dir = ROLE / "tasks"
    count = sum(text.count("ansible.builtin.set_fact:") for text in (p.read_text() for p in tasks_dir.glob("*.yml")))
    assert count <= 3
    tasks = yaml.safe_load(MAIN.read_text(encoding="utf-8"))
    upgrade = next(task for task in tasks if task.get("name") == "Upgrade the node")

    def slot_tasks(items):
        for task in items:
            for key in ("block", "rescue"):
                yield from slot_tasks(task.get(key) or [])
            if "gpuops.cluster.upgrade_slot" in task:
                yield task

    releases = [task for task in slot_tasks(tasks) if task["gpuops.cluster.upgrade_slot"].get("state") == "released"]
    assert len(releases) == 3  # deferred, upgraded, and the rescue's
    for task in releases:
        assert task["gpuops.cluster.upgrade_slot"] == {"state": "released", "node": "{{ rolling_upgrade_node_of }}"}
        assert task["register"] == "rolling_upgrade_released"
    assert upgrade["rescue"][0]["ansible.builtin.set_fact"] == {
        "rolling_upgrade_failure": {
            "task": "{{ ansible_failed_task.name | default(None) }}",
            "msg": "{{ ansible_failed_result.msg | default(None) }}",
        }
    }
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert (
        variables["rolling_upgrade_node_of"] == "{{ rolling_upgrade_node_start | combine(rolling_upgrade_node_steps) }}"
    )
