"""Write an operator's copy of the compatibility matrix that stops at a driver release (lab only).

An operator who keeps a copy of matrix/nvidia_stack.yml (gpuops_matrix_path) edits it after NVIDIA
publishes; the mirror the nodes read may already hold later releases. This writes such a copy: the
collection's matrix with the releases of RELEASE's branch newer than it left out, so a lab node asking for
the branch resolves, from its repository, to a release newer than any the copy lists.

Usage: python3 matrix_until.py RELEASE OUT     (e.g. 580.105.08 .../matrix-until-580.105.08.yml)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    driver_branch,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import matrix_at


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.exit(__doc__)
    release, out = argv[0], Path(argv[1])
    branch = driver_branch(release)
    matrix = yaml.safe_load((ROOT / "matrix" / "nvidia_stack.yml").read_text(encoding="utf-8"))
    entry = next(item for item in matrix["driver_branches"] if item["branch"] == branch)
    entry["releases"] = [item for item in entry["releases"] if compare_versions(item["version"], release) <= 0]
    if entry["releases"][-1]["version"] != release:
        sys.exit(f"matrix_until: {release} is not a release the matrix lists")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = f"# Written by extensions/molecule/lab/matrix_until.py: R{branch} releases up to {release} only.\n"
    out.write_text(text + yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    matrix_at(str(out))  # the copy must load as the collection's own does
    print(f"matrix_until: {out} lists R{branch} up to {release}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
