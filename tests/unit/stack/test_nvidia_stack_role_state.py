"""The nvidia_stack role keeps no computed state in vars/ and builds the pin-free apt-get install in one place.

Measured with tests/tooling/role_state_count.py (issue 26 item 8): before, 22 of the 25 entries of
roles/nvidia_stack/vars/main.yml were templated, 6 of them reading a result a task registers later.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.tooling import role_state_count

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_stack"


def test_vars_main_holds_only_static_values():
    figures = role_state_count.measure(ROLE)
    assert figures["vars_entries"] > 0
    assert figures["vars_templated"] == []
    assert figures["vars_reading_registered"] == []


def test_the_pass_reads_its_first_read_not_an_alias_of_a_registered_result():
    """Every task file takes the plan and the exact versions from ansible_facts.gpu_stack_before (the module's
    documented fact), none through a variable that reads the registered first read."""
    texts = {path.name: path.read_text(encoding="utf-8") for path in (ROLE / "tasks").glob("*.yml")}
    readers = [name for name, text in texts.items() if "gpu_stack_before" in text]
    assert {"main.yml", "pin.yml", "move.yml", "facts.yml"} <= set(readers)
    for name, text in texts.items():
        for alias in ("__nvidia_stack_before", "__nvidia_stack_exact"):
            assert alias not in text, f"{name} reads {alias}"
        if name != "read.yml":
            assert "__nvidia_stack_facts_before" not in text, f"{name} reads the registered first read"


def test_the_role_builds_the_pin_free_install_in_one_place():
    """move.yml (check mode) and prestage.yml (pre-staging) take the argument list from the filter only."""
    for name in ("move.yml", "prestage.yml"):
        text = (ROLE / "tasks" / name).read_text(encoding="utf-8")
        assert "gpuops.cluster.apt_install_argv" in text, name
        assert "Dir::Etc::PreferencesParts" not in text, f"{name} builds the apt-get install list itself"
        assert yaml.safe_load(text)


def test_the_measure_counts_reads_in_another_file(tmp_path):
    role = tmp_path / "demo"
    (role / "vars").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "vars" / "main.yml").write_text(
        '---\n__demo_static: [a, b]\n__demo_alias: "{{ __demo_result.value }}"\n', encoding="utf-8"
    )
    (role / "tasks" / "main.yml").write_text(
        "---\n- name: Read\n  ansible.builtin.command: [true]\n  register: __demo_result\n"
        '- name: Use\n  ansible.builtin.debug:\n    msg: "{{ __demo_alias }} {{ __demo_static }}"\n',
        encoding="utf-8",
    )
    figures = role_state_count.measure(role)
    assert figures["names"] == 3
    assert figures["read_elsewhere"] == ["__demo_alias", "__demo_result", "__demo_static"]
    assert figures["vars_entries"] == 2
    assert figures["vars_templated"] == ["__demo_alias"]
    assert figures["vars_reading_registered"] == ["__demo_alias"]
