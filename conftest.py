"""Make ``ansible_collections.gpuops.cluster`` importable from a plain clone.

``.collections/ansible_collections/gpuops/cluster`` is a committed symlink to
the repository root, so putting ``.collections`` on ``sys.path`` is enough.
"""

import sys
from pathlib import Path

_COLLECTIONS = Path(__file__).resolve().parent / ".collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))
