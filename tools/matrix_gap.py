# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""matrix-gap: what a downloaded repository index holds that the compatibility matrix lacks.

    python tools/matrix_gap.py INDEX [--modules FILE] [--matrix PATH] [--json FILE] [--fail-on-gap]
    make matrix-gap INDEX=<path> [MATRIX=<path>] [JSON=<file>]

INDEX: an apt Packages file (plain, .gz, .xz), a repository directory (repodata/repomd.xml, or a Packages file),
a primary.xml[.gz|.xz|.zst], a modules.yaml, or saved apt-cache madison / apt-cache policy / dnf repoquery output.
Prints a table of the driver releases, CUDA updates, NCCL builds and DCGM releases the matrix lacks, each with the
matrix rule(s) it needs; --json writes the same report as JSON ("-" for standard output). Exit status: 0 (a gap is a
report), 1 with --fail-on-gap when there is a gap, 2 on bad input (unreadable or unknown index, invalid matrix).
The logic is plugins/module_utils/stack/matrix_gap.py; a node's own index: playbooks/matrix_gap.yml.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A clone has .collections/ansible_collections/gpuops/cluster -> the repository; an installed collection sits in
# <path>/ansible_collections/gpuops/cluster.
sys.path.insert(0, str(ROOT / ".collections") if (ROOT / ".collections").is_dir() else str(ROOT.parents[2]))

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    matrix_gap,
    repository_listing,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    MatrixError,
    load_matrix,
)

EXIT_GAP = 1
EXIT_BAD_INPUT = 2
ZSTD_TIMEOUT = 120


def unzstd(data, what):
    """zstd-compressed repodata (primary.xml.zst, modules.yaml.zst) uncompressed by the zstd tool."""
    try:
        done = subprocess.run(
            ["zstd", "-d", "-c", "-q"], input=data, capture_output=True, timeout=ZSTD_TIMEOUT, check=False
        )
    except FileNotFoundError as exc:
        raise repository_listing.ListingError(
            "%s is zstd-compressed: install zstd, or decompress it first" % what
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise repository_listing.ListingError("%s: zstd did not finish in %d s" % (what, ZSTD_TIMEOUT)) from exc
    if done.returncode != 0:
        raise repository_listing.ListingError(
            "%s: zstd -d failed: %s" % (what, done.stderr.decode("utf-8", "replace").strip())
        )
    return done.stdout


def arguments(argv):
    parser = argparse.ArgumentParser(
        prog="matrix-gap",
        description=__doc__.split("\n\n", maxsplit=1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("index", help="the repository index: a file or a repository directory")
    parser.add_argument("--modules", help="a modules.yaml to read with a primary.xml given alone")
    parser.add_argument("--matrix", help="an operator's copy of the matrix (default: the collection's)")
    parser.add_argument("--json", dest="json_out", help="write the report as JSON to this file ('-': stdout)")
    parser.add_argument("--fail-on-gap", action="store_true", help="exit 1 when the matrix lacks anything found")
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(sys.argv[1:] if argv is None else argv)
    try:
        matrix = load_matrix(args.matrix or None)
        listing = repository_listing.read_listing(args.index, modules=args.modules, unzstd=unzstd)
        report = matrix_gap.gaps(matrix, listing["index"], listing["streams"], listing["source"], listing["format"])
    except (MatrixError, repository_listing.ListingError, matrix_gap.GapError) as exc:
        print("matrix-gap: %s" % exc, file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json_out == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join(matrix_gap.render(report)))
        if args.json_out:
            try:
                Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            except OSError as exc:
                print("matrix-gap: cannot write %s: %s" % (args.json_out, exc.strerror or exc), file=sys.stderr)
                return EXIT_BAD_INPUT
    return EXIT_GAP if args.fail_on_gap and report["gaps"] else 0


if __name__ == "__main__":
    sys.exit(main())
