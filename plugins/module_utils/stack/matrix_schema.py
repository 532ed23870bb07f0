# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The schema of the NVIDIA stack compatibility matrix, checked in pure Python.

:func:`schema_errors` checks a loaded matrix (``matrix/nvidia_stack.yml``, see docs/compatibility-matrix.md)
and returns every problem it finds, each naming where it is; :mod:`stack_matrix` loads the file and refuses
a matrix with any. The vocabulary of the schema (branch kinds, OS families, version matches) is here; the
packaging rules' (components, flavors, placeholders) and their checks are in :mod:`matrix_packaging_schema`.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit, dcgm_exporter
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_packaging_schema import (
    FLAVORS,
    PackagingRulesMixin,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    parse_cuda,
    parse_driver,
    parse_nccl,
)

SCHEMA_VERSION = 1
BRANCH_KINDS = ("ltsb", "production", "feature")
OPEN_MODULES = ("required", "recommended", "unsupported")
FAMILIES = ("debian", "redhat")
MATCH_KINDS = ("major", "major_minor")
# The CPU architecture of the hosts a GPU model sits in (gpus[].host_arch; absent: x86_64). Grace hosts are arm64.
HOST_ARCHES = ("x86_64", "arm64")
_EOL_RE = re.compile(r"\d{4}-(0[1-9]|1[0-2])", re.ASCII)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)

TOP_KEYS = {
    "schema_version": True,
    "sources": True,
    "driver_branches": True,
    "cuda": True,
    "nccl": True,
    "dcgm": True,
    "architectures": False,
    "container_toolkit": False,
    "gpus": True,
    "operating_systems": True,
    "packaging": True,
    "open_questions": False,
}


def normalize_name(name):
    """Case- and space-insensitive key for GPU names: ``'NVIDIA  H100 80GB hbm3'`` -> ``'nvidiah10080gbhbm3'``."""
    return re.sub(r"[\s_]+", "", str(name)).lower()


class _Checker(PackagingRulesMixin):
    def __init__(self, matrix):
        self.matrix = matrix
        self.errors = []
        self.source_ids = set()

    def error(self, where, message):
        self.errors.append("%s: %s" % (where, message))

    def keys(self, where, item, required, optional=()):
        if not isinstance(item, dict):
            self.error(where, "must be a mapping, got %s" % type(item).__name__)
            return False
        for key in required:
            if key not in item:
                self.error(where, "missing key '%s'" % key)
        allowed = set(required) | set(optional)
        for key in item:
            if key not in allowed:
                self.error(where, "unknown key '%s' (allowed: %s)" % (key, ", ".join(sorted(allowed))))
        return True

    def sources(self, where, item, fields=()):
        """Every entry names a known source; ``<field>_source`` keys too."""
        if "source" in item and item["source"] not in self.source_ids:
            self.error(where, "source '%s' is not defined under sources:" % (item["source"],))
        for key, value in item.items():
            if key.endswith("_source") and key != "source":
                field = key[: -len("_source")]
                if field not in item:
                    self.error(where, "'%s' names a source for '%s', which the entry does not have" % (key, field))
                if value not in self.source_ids:
                    self.error(where, "%s '%s' is not defined under sources:" % (key, value))
        del fields

    def text(self, where, value, parser=None):
        if not isinstance(value, str):
            self.error(where, "must be a quoted string, got %s %r" % (type(value).__name__, value))
            return False
        if parser is not None:
            try:
                parser(value)
            except ValueError as exc:
                self.error(where, str(exc))
                return False
        return True

    def integer(self, where, value, allow_none=False):
        if value is None and allow_none:
            return True
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(where, "must be an integer, got %r" % (value,))
            return False
        return True

    def choice(self, where, value, choices):
        if value not in choices:
            self.error(where, "must be one of %s, got %r" % (", ".join(choices), value))
            return False
        return True

    def listing(self, where, value):
        if not isinstance(value, list):
            self.error(where, "must be a list, got %s" % type(value).__name__)
            return []
        return value

    def ordered(self, where, values, key):
        """Values must be unique and listed oldest first."""
        seen = set()
        previous = None
        for value in values:
            if value in seen:
                self.error(where, "duplicate entry %s" % (value,))
            seen.add(value)
            if previous is not None and key(previous, value) >= 0:
                self.error(where, "entries must be listed oldest first: %s comes after %s" % (value, previous))
            previous = value

    # -- sections

    def check(self):
        matrix = self.matrix
        if not isinstance(matrix, dict):
            self.error("matrix", "must be a mapping at the top level")
            return self.errors
        self.keys(
            "matrix", matrix, [k for k, req in TOP_KEYS.items() if req], [k for k, req in TOP_KEYS.items() if not req]
        )
        if matrix.get("schema_version") != SCHEMA_VERSION:
            self.error("schema_version", "must be %d, got %r" % (SCHEMA_VERSION, matrix.get("schema_version")))
        self.check_sources(matrix.get("sources"))
        branches = self.check_branches(self.listing("driver_branches", matrix.get("driver_branches", [])))
        cudas = self.check_cuda(matrix.get("cuda"))
        self.check_nccl(self.listing("nccl", matrix.get("nccl", [])), cudas)
        self.check_dcgm(self.listing("dcgm", matrix.get("dcgm", [])))
        self.check_container_toolkit(self.listing("container_toolkit", matrix.get("container_toolkit", [])))
        architectures = None
        if "architectures" in matrix:
            architectures = self.check_architectures(self.listing("architectures", matrix["architectures"]))
        self.check_gpus(self.listing("gpus", matrix.get("gpus", [])), architectures)
        self.check_oses(self.listing("operating_systems", matrix.get("operating_systems", [])), cudas)
        self.check_packaging(self.listing("packaging", matrix.get("packaging", [])), branches)
        questions = matrix.get("open_questions", [])
        for index, question in enumerate(self.listing("open_questions", questions)):
            self.text("open_questions[%d]" % index, question)
        return self.errors

    def check_sources(self, sources):
        if not isinstance(sources, dict) or not sources:
            self.error("sources", "must be a non-empty mapping of id -> {title, url, retrieved}")
            return
        for source_id, entry in sources.items():
            where = "sources.%s" % source_id
            self.source_ids.add(source_id)
            if not self.keys(where, entry, ["title", "url", "retrieved"]):
                continue
            self.text(where + ".title", entry["title"]) if "title" in entry else None
            if "retrieved" in entry and not (
                isinstance(entry["retrieved"], str) and _DATE_RE.fullmatch(entry["retrieved"])
            ):
                self.error(where + ".retrieved", 'must be a quoted date "YYYY-MM-DD", got %r' % (entry["retrieved"],))

    def check_branches(self, branches):
        numbers = []
        for index, entry in enumerate(branches):
            where = "driver_branches[%d]" % index
            if not self.keys(
                where,
                entry,
                ["branch", "kind", "eol", "cuda_major_max", "releases", "source"],
                ["eol_source", "cuda_major_max_source", "kind_source", "known_bad"],
            ):
                continue
            where = "driver_branches[R%s]" % entry.get("branch")
            self.sources(where, entry)
            if not self.integer(where + ".branch", entry.get("branch")):
                continue
            branch = entry["branch"]
            numbers.append(branch)
            self.choice(where + ".kind", entry.get("kind"), BRANCH_KINDS)
            eol = entry.get("eol")
            if eol is not None and not (isinstance(eol, str) and _EOL_RE.fullmatch(eol)):
                self.error(where + ".eol", 'must be a quoted "YYYY-MM" or null, got %r' % (eol,))
            if entry.get("kind") in ("ltsb", "production") and eol is None:
                self.error(where + ".eol", "LTSB and production branches have a published end of life: set it")
            self.integer(where + ".cuda_major_max", entry.get("cuda_major_max"))
            versions = []
            for rel_index, release in enumerate(self.listing(where + ".releases", entry.get("releases", []))):
                rel_where = "%s.releases[%d]" % (where, rel_index)
                if not self.keys(rel_where, release, ["version", "source"]):
                    continue
                self.sources(rel_where, release)
                if self.text(rel_where + ".version", release.get("version"), parse_driver):
                    parts = parse_driver(release["version"])
                    if len(parts) < 2:
                        self.error(rel_where + ".version", "must be an exact release, not a branch")
                    elif parts[0] != branch:
                        self.error(rel_where + ".version", "%s is not a release of R%d" % (release["version"], branch))
                    else:
                        versions.append(release["version"])
            self.ordered(where + ".releases", versions, compare_versions)
            self.check_known_bad(where, branch, entry.get("known_bad", []))
        self.ordered("driver_branches", numbers, lambda a, b: (a > b) - (a < b))
        return set(numbers)

    def check_known_bad(self, where, branch, entries):
        """known_bad: releases of this branch a branch request skips, each with its reason and source."""
        versions = []
        for index, bad in enumerate(self.listing(where + ".known_bad", entries)):
            bad_where = "%s.known_bad[%d]" % (where, index)
            if not self.keys(bad_where, bad, ["version", "reason", "source"]):
                continue
            self.sources(bad_where, bad)
            if self.text(bad_where + ".reason", bad.get("reason")) and not bad["reason"].strip():
                self.error(bad_where + ".reason", "say why the release is skipped")
            if self.text(bad_where + ".version", bad.get("version"), parse_driver):
                parts = parse_driver(bad["version"])
                if len(parts) < 2:
                    self.error(bad_where + ".version", "must be an exact release, not a branch")
                elif parts[0] != branch:
                    self.error(bad_where + ".version", "%s is not a release of R%d" % (bad["version"], branch))
                else:
                    versions.append(bad["version"])
        self.ordered(where + ".known_bad", versions, compare_versions)

    def check_cuda(self, cuda):
        known = set()
        if not self.keys("cuda", cuda, ["minor_version_compat", "releases"]):
            return known
        majors = []
        for index, entry in enumerate(self.listing("cuda.minor_version_compat", cuda.get("minor_version_compat", []))):
            where = "cuda.minor_version_compat[%d]" % index
            if self.keys(where, entry, ["major", "min_driver", "source"]):
                self.sources(where, entry)
                self.integer(where + ".major", entry.get("major"))
                self.text(where + ".min_driver", entry.get("min_driver"), parse_driver)
                majors.append(entry.get("major"))
        versions = []
        for index, entry in enumerate(self.listing("cuda.releases", cuda.get("releases", []))):
            where = "cuda.releases[%d]" % index
            if not self.keys(where, entry, ["version", "updates", "source"]):
                continue
            self.sources(where, entry)
            if not self.text(where + ".version", entry.get("version"), parse_cuda):
                continue
            version = entry["version"]
            parts = parse_cuda(version)
            if len(parts) != 2:
                self.error(where + ".version", "must be MAJOR.MINOR, got %r" % (version,))
                continue
            where = "cuda.releases[%s]" % version
            versions.append(version)
            known.add(version)
            if parts[0] not in majors:
                self.error(where, "CUDA major %d has no minor_version_compat entry" % parts[0])
            updates = self.listing(where + ".updates", entry.get("updates", []))
            if not updates:
                self.error(where + ".updates", "must list at least the GA release")
            update_versions = []
            previous_min = None
            for up_index, update in enumerate(updates):
                up_where = "%s.updates[%d]" % (where, up_index)
                if not self.keys(up_where, update, ["version", "min_driver"], ["source"]):
                    continue
                self.sources(up_where, update)
                if self.text(up_where + ".version", update.get("version"), parse_cuda):
                    if parse_cuda(update["version"])[:2] != parts or len(parse_cuda(update["version"])) != 3:
                        self.error(up_where + ".version", "must be %s.<update>, got %r" % (version, update["version"]))
                    else:
                        update_versions.append(update["version"])
                if self.text(up_where + ".min_driver", update.get("min_driver"), parse_driver):
                    if previous_min is not None and compare_versions(update["min_driver"], previous_min) < 0:
                        self.error(up_where + ".min_driver", "is lower than the previous update's minimum driver")
                    previous_min = update["min_driver"]
            self.ordered(where + ".updates", update_versions, compare_versions)
        self.ordered("cuda.releases", versions, compare_versions)
        return known

    def check_nccl(self, entries, cudas):
        versions = []
        for index, entry in enumerate(entries):
            where = "nccl[%d]" % index
            if not self.keys(where, entry, ["version", "cuda", "source"], ["cuda_source", "build_sources"]):
                continue
            self.sources(where, entry)
            if self.text(where + ".version", entry.get("version"), parse_nccl):
                versions.append(entry["version"])
                where = "nccl[%s]" % entry["version"]
            builds = self.listing(where + ".cuda", entry.get("cuda", []))
            if not builds:
                self.error(where + ".cuda", "must list at least one CUDA X.Y the release is built for")
            for build in builds:
                if self.text(where + ".cuda", build, parse_cuda) and build not in cudas:
                    self.error(where + ".cuda", "CUDA %s is not in cuda.releases" % build)
            build_sources = entry.get("build_sources", {})
            if not isinstance(build_sources, dict):
                self.error(where + ".build_sources", "must map a CUDA build to a source id")
                continue
            for build, source in build_sources.items():
                if build not in builds:
                    self.error(where + ".build_sources", "CUDA %s is not one of the release's builds" % (build,))
                if source not in self.source_ids:
                    self.error(where + ".build_sources", "source '%s' is not defined under sources:" % (source,))
        self.ordered("nccl", versions, compare_versions)

    def check_dcgm(self, entries):
        versions = []
        for index, entry in enumerate(entries):
            where = "dcgm[%d]" % index
            optional = ["cuda_majors_source", *dcgm_exporter.DCGM_ENTRY_KEYS]
            if not self.keys(where, entry, ["version", "major", "cuda_majors", "source"], optional):
                continue
            self.sources(where, entry)
            for problem in dcgm_exporter.release_problems(entry):
                self.error(where + ".exporter", problem)
            if self.text(where + ".version", entry.get("version"), parse_nccl):
                versions.append(entry["version"])
                if (
                    self.integer(where + ".major", entry.get("major"))
                    and parse_nccl(entry["version"])[0] != entry["major"]
                ):
                    self.error(where + ".major", "does not match version %s" % entry["version"])
            for major in self.listing(where + ".cuda_majors", entry.get("cuda_majors", [])):
                self.integer(where + ".cuda_majors", major)
        self.ordered("dcgm", versions, compare_versions)

    def check_container_toolkit(self, entries):
        versions = []
        for index, entry in enumerate(entries):
            where = "container_toolkit[%d]" % index
            if self.keys(where, entry, container_toolkit.RELEASE_KEYS, container_toolkit.OPTIONAL_KEYS):
                self.sources(where, entry, ["min_driver"])
                problems = container_toolkit.release_problems(entry)
                for problem in problems:
                    self.error(where, problem)
                if not problems:
                    versions.append(entry["version"])
        self.ordered("container_toolkit", versions, compare_versions)

    def check_architectures(self, entries):
        """Return the architecture names; each has cuda_major_max (int or null), optional dcgm_cuda_major_max."""
        names = set()
        for index, entry in enumerate(entries):
            where = "architectures[%d]" % index
            if not self.keys(
                where,
                entry,
                ["name", "cuda_major_max", "source"],
                ["cuda_major_max_source", "dcgm_cuda_major_max", "dcgm_cuda_major_max_source"],
            ):
                continue
            if not self.text(where + ".name", entry.get("name")):
                continue
            where = "architectures[%s]" % entry["name"]
            if entry["name"] in names:
                self.error(where, "is listed twice")
            names.add(entry["name"])
            self.sources(where, entry)
            self.integer(where + ".cuda_major_max", entry.get("cuda_major_max"), allow_none=True)
            if "dcgm_cuda_major_max" in entry:
                self.integer(where + ".dcgm_cuda_major_max", entry["dcgm_cuda_major_max"])
        return names

    def check_gpus(self, gpus, architectures=None):
        names = {}
        for index, entry in enumerate(gpus):
            where = "gpus[%d]" % index
            if not self.keys(
                where,
                entry,
                ["key", "architecture", "nvswitch", "open_modules", "min_branch", "last_branch", "aliases", "source"],
                [
                    "min_driver",
                    "nvlink5",
                    "imex",
                    "forward_compat",
                    "host_arch",
                    "host_arch_source",
                    "min_branch_source",
                    "last_branch_source",
                    "aliases_source",
                    "forward_compat_source",
                ],
            ):
                continue
            where = "gpus[%s]" % entry.get("key")
            self.sources(where, entry)
            self.text(where + ".key", entry.get("key"))
            if (
                self.text(where + ".architecture", entry.get("architecture"))
                and architectures is not None
                and entry["architecture"] not in architectures
            ):
                self.error(
                    where + ".architecture",
                    "%r is not under architectures: (known: %s)"
                    % (entry["architecture"], ", ".join(sorted(architectures))),
                )
            for flag in ("nvswitch", "nvlink5", "imex", "forward_compat"):
                if flag in entry and not isinstance(entry[flag], bool):
                    self.error(where + "." + flag, "must be true or false, got %r" % (entry[flag],))
            self.choice(where + ".open_modules", entry.get("open_modules"), OPEN_MODULES)
            if "host_arch" in entry:
                self.choice(where + ".host_arch", entry["host_arch"], HOST_ARCHES)
            self.integer(where + ".min_branch", entry.get("min_branch"))
            self.integer(where + ".last_branch", entry.get("last_branch"), allow_none=True)
            if (
                isinstance(entry.get("min_branch"), int)
                and isinstance(entry.get("last_branch"), int)
                and entry["last_branch"] < entry["min_branch"]
            ):
                self.error(where, "last_branch is below min_branch")
            if (
                "min_driver" in entry
                and self.text(where + ".min_driver", entry["min_driver"], parse_driver)
                and parse_driver(entry["min_driver"])[0] != entry.get("min_branch")
            ):
                self.error(where + ".min_driver", "must be a release of min_branch R%s" % entry.get("min_branch"))
            if entry.get("open_modules") == "required" and entry.get("architecture") == "volta":
                self.error(where, "volta GPUs cannot require open kernel modules")
            aliases = self.listing(where + ".aliases", entry.get("aliases", []))
            for name in [entry.get("key"), *aliases]:
                if not isinstance(name, str) or not name.strip():
                    self.error(where + ".aliases", "names must be non-empty strings, got %r" % (name,))
                    continue
                norm = normalize_name(name)
                if norm in names and names[norm] != entry.get("key"):
                    self.error(where, "name %r is also used by gpus[%s]" % (name, names[norm]))
                names[norm] = entry.get("key")

    def check_oses(self, oses, cudas):
        seen = set()
        for index, entry in enumerate(oses):
            where = "operating_systems[%d]" % index
            if not self.keys(
                where,
                entry,
                [
                    "id",
                    "distributions",
                    "version",
                    "match",
                    "family",
                    "flavor",
                    "repo_dist",
                    "package_manager",
                    "source",
                ],
                ["min_cuda", "min_cuda_source", "min_branch", "min_branch_source"],
            ):
                continue
            where = "operating_systems[%s]" % entry.get("id")
            self.sources(where, entry)
            self.choice(where + ".family", entry.get("family"), FAMILIES)
            self.choice(where + ".flavor", entry.get("flavor"), FLAVORS)
            self.choice(where + ".match", entry.get("match"), MATCH_KINDS)
            self.choice(where + ".package_manager", entry.get("package_manager"), ("apt", "dnf"))
            if entry.get("family") == "debian" and entry.get("package_manager") != "apt":
                self.error(where + ".package_manager", "debian family uses apt")
            if entry.get("family") == "redhat" and entry.get("package_manager") != "dnf":
                self.error(where + ".package_manager", "redhat family uses dnf")
            version = entry.get("version")
            if self.text(where + ".version", version):
                fields = version.split(".")
                expected = 1 if entry.get("match") == "major" else 2
                if len(fields) != expected or not all(f.isdigit() for f in fields):
                    self.error(
                        where + ".version",
                        "must have %d numeric field(s) for match %s" % (expected, entry.get("match")),
                    )
            if (
                "min_cuda" in entry
                and self.text(where + ".min_cuda", entry["min_cuda"], parse_cuda)
                and entry["min_cuda"] not in cudas
            ):
                self.error(where + ".min_cuda", "CUDA %s is not in cuda.releases" % entry["min_cuda"])
            if "min_branch" in entry:
                self.integer(where + ".min_branch", entry["min_branch"])
            for distribution in self.listing(where + ".distributions", entry.get("distributions", [])):
                key = (distribution, version)
                if key in seen:
                    self.error(where, "%s %s is listed twice" % (distribution, version))
                seen.add(key)


def schema_errors(matrix):
    """Return every schema problem of a loaded matrix as a list of strings (empty when valid)."""
    return _Checker(matrix).check()
