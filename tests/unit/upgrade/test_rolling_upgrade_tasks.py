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
    upgraded = names.index("Record the node as upgraded")
    released = names.index("Give the slot back (the node is in service again)")
    assert give_back < finished < upgraded < released
    gate = names.index("Fail the node when its gate failed")
    assert gate < give_back  # never given back before its gate passed
