# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/matrix_gap.yml over module_utils/stack/matrix_gap.py.

Documentation for each filter lives in the sidecar YAML next to this file (matrix_gap_query.yml, matrix_gap.yml).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import matrix_gap as gap
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_index
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import MatrixError, matrix_at

PREFIX = "gpuops.cluster."
PACKAGE_MANAGERS = ("apt", "dnf")


def _matrix(matrix_path, filter_name):
    try:
        return matrix_at(matrix_path or None)
    except MatrixError as exc:
        raise AnsibleFilterError("%s%s: %s" % (PREFIX, filter_name, exc)) from exc


def _package_manager(value, filter_name):
    if value not in PACKAGE_MANAGERS:
        raise AnsibleFilterError(
            "%s%s: package manager %r is not one the matrix gap reads (apt or dnf)" % (PREFIX, filter_name, value)
        )
    return value


def matrix_gap_query(package_manager, names=None, matrix_path=None):
    """The argv that reads every version of the matrix's packages from the node's index (None: nothing to read)."""
    _package_manager(package_manager, "matrix_gap_query")
    matrix = _matrix(matrix_path, "matrix_gap_query")
    if package_manager == "apt":
        # apt-cache madison takes names only, no globs (apt 2.6.1: 'libnccl*' prints nothing), hence pkgnames first.
        wanted = gap.watched_names(matrix, names or [])
        return ["apt-cache", "madison", *wanted] if wanted else None
    # --disable-modular-filtering: "list also packages of inactive module streams" (dnf 4,
    # dnf/cli/commands/repoquery.py; dnf5 has it too, per its changelog), so every nvidia-driver stream is read.
    query = ["dnf", "repoquery", "--quiet", "--showduplicates", "--disable-modular-filtering"]
    return [*query, "--qf", package_index.DNF_QUERY_FORMAT, *gap.query_globs(matrix)]


def matrix_gap(output, package_manager, source="", matrix_path=None):
    """The gap report (matrix_gap.gaps) of one read's output, with ``lines`` to print."""
    _package_manager(package_manager, "matrix_gap")
    matrix = _matrix(matrix_path, "matrix_gap")
    try:
        if package_manager == "apt":
            index, fmt = package_index.parse_apt_madison(output or ""), "apt-cache madison"
        else:
            index, fmt = package_index.parse_dnf_repoquery(output or ""), "dnf repoquery"
        report = gap.gaps(matrix, index, source=source, listing_format=fmt)
    except (package_index.PackageIndexError, gap.GapError) as exc:
        raise AnsibleFilterError("%smatrix_gap: %s: %s" % (PREFIX, source or "the index", exc)) from exc
    return dict(report, lines=gap.render(report))


class FilterModule:
    """gpuops.cluster matrix gap filters."""

    def filters(self):
        return {"matrix_gap_query": matrix_gap_query, "matrix_gap": matrix_gap}
