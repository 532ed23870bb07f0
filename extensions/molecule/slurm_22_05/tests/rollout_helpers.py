"""The rolling_upgrade scenario's test helpers, loaded for slurm_22_05's two GPU nodes.

Its module (extensions/molecule/rolling_upgrade/tests/test_rolling_upgrade.py) names a third node at import
(``FOREIGN_NODE = NODES[2]``, for a case of its four-node fleet that slurm_22_05 does not run); with two nodes
that line is read as no foreign node. Everything else is the module as it is. ``record`` writes slurm_22_05's own
figures.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "rolling_upgrade" / "tests" / "test_rolling_upgrade.py"
FOREIGN = "FOREIGN_NODE = NODES[2]\n"


def load() -> types.ModuleType:
    source = PATH.read_text(encoding="utf-8")
    source = source.replace(FOREIGN, "FOREIGN_NODE = NODES[2] if len(NODES) > 2 else None\n", 1)
    module = types.ModuleType("rolling_upgrade_cases")
    module.__file__ = str(PATH)
    sys.modules[module.__name__] = module
    exec(compile(source, str(PATH), "exec"), module.__dict__)
    return module


ru = load()
# slurm_22_05's own figures (the rollout's go to the rolling_upgrade scenario's file, through ru.record)
MEASURES = ru.REPO / ".lab" / "slurm_22_05_measures.json"


def record(key: str, value) -> None:
    """Add one figure to slurm_22_05's measures file."""
    ru.record(key, value, MEASURES)
