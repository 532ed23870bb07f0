"""The rolling upgrade writes the node's gres.conf MIG lines again after it re-created the MIG instances (issue 29
items 3 and 4): with the mig_layout role's own steps and options, only where that role keeps the block, before the
gate, and without a drain of its own (the rolling upgrade's drain holds the node)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
MIG = ROLES / "rolling_upgrade" / "tasks" / "mig.yml"
MIG_LAYOUT = ROLES / "mig_layout"


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def action_index(tasks, action):
    return [index for index, task in enumerate(tasks) if action in task]


def test_the_gres_block_is_rewritten_after_the_layout_is_applied_again():
    tasks = load(MIG)
    names = [task["name"] for task in tasks]
    rewrite = names.index(
        "Rewrite the gres.conf block for the MIG devices now in place, and restart slurmd where it changed"
    )
    # after every gpu_mig call and the check that the layout is in place (after a reboot too); the last step
    assert max(action_index(tasks, "gpuops.cluster.gpu_mig")) < rewrite
    assert names.index("Fail the node when its MIG layout is still not the declared one") < rewrite
    assert rewrite == len(tasks) - 1
    assert tasks[rewrite]["ansible.builtin.include_role"] == {
        "name": "gpuops.cluster.mig_layout",
        "tasks_from": "slurm_gres.yml",
    }
    # the node is the rolling upgrade's to drain and give back: no drain or resume of mig_layout's here
    assert tasks[rewrite]["vars"]["__slurm_hold_held"] is False
    text = MIG.read_text(encoding="utf-8")
    assert "slurm_drain" not in text
    assert "tasks_from: drain" not in text


def test_the_rewrite_precedes_the_gate_after_the_upgrade_and_after_a_rollback():
    """tasks/mig.yml runs before the gate and before the rollback's gate (test_rolling_upgrade_tasks keeps that
    order in tasks/main.yml); the rewrite is its last step, so it is done before either gate judges the node."""
    main = load(ROLES / "rolling_upgrade" / "tasks" / "main.yml")
    upgrade = next(task for task in main if task.get("name") == "Upgrade the node")
    rollback = next(task for task in upgrade["rescue"] if task.get("name") == "Roll back to the previous stack")
    for block, gate in ((upgrade["block"], "Health gate"), (rollback["block"], "Gate the previous stack")):
        names = [task.get("name") for task in block]
        includes = [i for i, task in enumerate(block) if task.get("ansible.builtin.include_tasks") == "mig.yml"]
        assert len(includes) == 1
        assert includes[0] < names.index(gate)


def test_the_block_is_kept_where_mig_layout_keeps_it_with_its_options():
    """The same test as the mig_layout role (gpuops_slurm_gres, or the role's own mig_layout_slurm_gres, and
    slurmd.service installed), the same read of slurmd, and the options the role and the boot command write with."""
    tasks = load(MIG)
    read = next(task for task in tasks if task["name"] == "Read whether slurmd is installed and running")
    rewrite = tasks[-1]
    role_tasks = load(MIG_LAYOUT / "tasks" / "main.yml")
    role_read = next(task for task in role_tasks if task["name"] == "Read whether slurmd is installed and running")
    assert read["ansible.builtin.command"] == role_read["ansible.builtin.command"]
    assert read["check_mode"] is False
    assert read["changed_when"] is False
    assert read["when"] == "mig_layout_slurm_gres | default(gpuops_slurm_gres | default(true)) | bool"
    defaults = load(MIG_LAYOUT / "defaults" / "main.yml")
    assert defaults["mig_layout_slurm_gres"] == "{{ gpuops_slurm_gres | default(true) }}"
    assert role_read["when"] == "mig_layout_slurm_gres | bool"
    # installed: mig_layout's test (vars mig_layout_slurm) on the same registered read
    variables = load(MIG_LAYOUT / "vars" / "main.yml")
    assert "'LoadState=loaded' in __mig_layout_slurmd.stdout_lines | default([])" in variables["mig_layout_slurm"]
    assert rewrite["when"] == "'LoadState=loaded' in rolling_upgrade_mig_slurmd.stdout_lines | default([])"
    assert rewrite["vars"]["__mig_layout_slurmd"] == "{{ " + read["register"] + " }}"
    # the role's gres step writes with mig_layout_gres_options, which the boot command's layout file carries too
    gres = load(MIG_LAYOUT / "tasks" / "slurm_gres.yml")
    write = next(task for task in gres if "gpuops.cluster.slurm_gres" in task)
    assert write["gpuops.cluster.slurm_gres"]["path"] == "{{ mig_layout_gres_options.path }}"
    assert write["gpuops.cluster.slurm_gres"]["mig_minors_path"] == "{{ mig_layout_gres_options.mig_minors_path }}"
    assert "mig_layout_gres_options if mig_layout_slurm" in variables["mig_layout_content"]["slurm_gres"]
    restart = next(task for task in gres if "ansible.builtin.systemd_service" in task)
    assert restart["ansible.builtin.systemd_service"] == {"name": "slurmd", "state": "restarted"}
    assert restart["when"] == "__mig_layout_gres is changed and mig_layout_slurmd_running"
