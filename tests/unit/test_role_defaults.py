"""Every role's defaults/main.yml and meta/argument_specs.yml describe the same variables, with equal defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(path.parent.parent for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"))
ROLE_DIRS = sorted(path for path in (ROOT / "roles").iterdir() if path.is_dir()) if (ROOT / "roles").is_dir() else []


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def spec_options(role: Path) -> dict:
    options = {}
    for entry_point in (load(role / "meta" / "argument_specs.yml").get("argument_specs") or {}).values():
        options.update((entry_point or {}).get("options") or {})
    return options


def test_there_are_roles_to_check():
    assert ROLES, "no roles/*/meta/argument_specs.yml found"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda path: path.name)
def test_every_role_has_an_argument_spec(role):
    assert (role / "meta" / "argument_specs.yml").is_file(), f"{role.name}: meta/argument_specs.yml is missing"


@pytest.mark.parametrize("role", ROLES, ids=lambda path: path.name)
def test_defaults_and_argument_spec_name_the_same_variables(role):
    defaults = load(role / "defaults" / "main.yml") if (role / "defaults" / "main.yml").is_file() else {}
    options = spec_options(role)
    assert sorted(set(defaults) - set(options)) == [], f"{role.name}: defaults without an argument spec entry"
    with_default = {name for name, option in options.items() if "default" in option}
    assert sorted(with_default - set(defaults)) == [], f"{role.name}: spec defaults missing from defaults/main.yml"


# A role default that reads a collection variable ("{{ gpuops_upgrade_drain | default('none') }}")
# cannot be a typed spec default; its description says the default instead ("Default: C(none).").
COLLECTION_DEFAULT = re.compile(r"^\{\{ (gpuops_[a-z0-9_]+) \| default\((.*)\) \}\}$")


@pytest.mark.parametrize("role", ROLES, ids=lambda path: path.name)
def test_defaults_equal_the_argument_spec_defaults(role):
    defaults = load(role / "defaults" / "main.yml") if (role / "defaults" / "main.yml").is_file() else {}
    options = spec_options(role)
    differing = {}
    for name, value in defaults.items():
        if name not in options:
            continue
        reads = COLLECTION_DEFAULT.match(value) if isinstance(value, str) else None
        if reads and "default" not in options[name]:
            text = " ".join(options[name].get("description") or [])
            said = "Default: C(%s)." % reads.group(2).replace("'", "")
            if said not in text or reads.group(1) not in text:
                differing[name] = {"defaults/main.yml": value, "description must say": [said, reads.group(1)]}
        elif options[name].get("default") != value:
            differing[name] = {"defaults/main.yml": value, "argument_specs.yml": options[name].get("default")}
    assert differing == {}, f"{role.name}: defaults differ"


@pytest.mark.parametrize("role", ROLES, ids=lambda path: path.name)
def test_role_variables_carry_the_role_prefix(role):
    prefix = f"{role.name}_"
    names = set(spec_options(role)) | set(
        load(role / "defaults" / "main.yml") if (role / "defaults" / "main.yml").is_file() else {}
    )
    assert sorted(name for name in names if not name.startswith(prefix)) == []


@pytest.mark.parametrize("role", ROLES, ids=lambda path: path.name)
def test_every_option_is_documented_with_a_type(role):
    undocumented = [
        name for name, option in spec_options(role).items() if not option.get("description") or not option.get("type")
    ]
    assert undocumented == []
