# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load, validate and query the NVIDIA stack compatibility matrix.

The matrix is ``matrix/nvidia_stack.yml`` at the collection root (see
docs/compatibility-matrix.md). :func:`schema_errors` checks a loaded matrix in
pure Python and returns every problem it finds; :class:`StackMatrix` wraps a
valid matrix with the lookups the resolver needs.
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit, dcgm_exporter
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    parse_cuda,
    parse_driver,
    parse_nccl,
)

DEFAULT_MATRIX_PATH = Path(__file__).resolve().parents[3] / "matrix" / "nvidia_stack.yml"

SCHEMA_VERSION = 1
BRANCH_KINDS = ("ltsb", "production", "feature")
OPEN_MODULES = ("required", "recommended", "unsupported")
FAMILIES = ("debian", "redhat")
FLAVORS = ("ubuntu", "debian", "rhel")
MATCH_KINDS = ("major", "major_minor")
KERNEL_MODULES = ("open", "proprietary", "any")
# The CPU architecture of the hosts a GPU model sits in (gpus[].host_arch; absent: x86_64). Grace hosts are arm64.
HOST_ARCHES = ("x86_64", "arm64")
COMPONENTS = (
    "driver",
    "fabricmanager",
    "nvsdm",
    "imex",
    "cuda",
    "nccl",
    "dcgm3",
    "dcgm4",
    "dcgm_exporter",
    "container_toolkit",
)
PLACEHOLDERS = frozenset(
    (
        "branch",
        "driver",
        "os_major",
        "cuda",
        "cuda_dashed",
        "cuda_full",
        "nccl",
        "dcgm",
        "dcgm_cuda_major",
        "dcgm_exporter",
        "container_toolkit",
    )
)
_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")
_EOL_RE = re.compile(r"\d{4}-(0[1-9]|1[0-2])", re.ASCII)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+.*{}_-]*")
# A package version template: a version's characters (Debian's and rpm's), * and {placeholders}.
_VERSION_TEMPLATE_RE = re.compile(r"[A-Za-z0-9.+~:_^*{}-]+")

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


class MatrixError(ValueError):
    """The matrix file cannot be read or does not follow the schema."""

    def __init__(self, errors, path=None):
        self.errors = list(errors)
        self.path = path
        where = " %s" % path if path else ""
        super().__init__("compatibility matrix%s is invalid:\n  - %s" % (where, "\n  - ".join(self.errors)))


def normalize_name(name):
    """Case- and space-insensitive key for GPU names: ``'NVIDIA  H100 80GB hbm3'`` -> ``'nvidiah10080gbhbm3'``."""
    return re.sub(r"[\s_]+", "", str(name)).lower()


# ----------------------------------------------------------------------------- schema


class _Checker:
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

    def check_packaging(self, rules, branches):
        usable = []
        for index, rule in enumerate(rules):
            where = "packaging[%d]" % index
            if not self.keys(
                where,
                rule,
                ["component", "flavors", "branches", "kernel_modules", "packages", "pins", "source"],
                ["dnf_module", "packages_source", "pins_source", "published"],
            ):
                continue
            where = "packaging[%d %s %s]" % (
                index,
                rule.get("component"),
                "/".join(map(str, rule.get("flavors") or [])),
            )
            self.sources(where, rule)
            ok = self.choice(where + ".component", rule.get("component"), COMPONENTS)
            ok = self.choice(where + ".kernel_modules", rule.get("kernel_modules"), KERNEL_MODULES) and ok
            for flavor in self.listing(where + ".flavors", rule.get("flavors", [])):
                ok = self.choice(where + ".flavors", flavor, FLAVORS) and ok
            span = rule.get("branches")
            if (
                not isinstance(span, list)
                or len(span) != 2
                or not self.integer(where + ".branches[0]", span[0])
                or not self.integer(where + ".branches[1]", span[1], allow_none=True)
            ):
                self.error(where + ".branches", "must be [min_branch, max_branch or null], got %r" % (span,))
                continue
            if span[1] is not None and span[1] < span[0]:
                self.error(where + ".branches", "max is below min")
                ok = False
            for bound in span:
                if bound is not None and bound not in branches:
                    self.error(where + ".branches", "R%s is not in driver_branches" % bound)
            if "dnf_module" in rule:
                self.template(where + ".dnf_module", rule["dnf_module"])
            published = rule.get("published", True)
            if not isinstance(published, bool):
                self.error(where + ".published", "must be true or false, got %r" % (published,))
                published = True
            packages = self.listing(where + ".packages", rule.get("packages", []))
            if published and not packages:
                self.error(where + ".packages", "must list at least one package")
            if not published and (packages or rule.get("pins")):
                self.error(where, "published: false (NVIDIA publishes no such packages) lists no packages and no pins")
            for p_index, package in enumerate(packages):
                p_where = "%s.packages[%d]" % (where, p_index)
                if self.keys(p_where, package, ["name", "version"]):
                    self.package_name(p_where + ".name", package.get("name"), glob=False)
                    self.version_template(p_where + ".version", package.get("version"))
            for p_index, pin in enumerate(self.listing(where + ".pins", rule.get("pins", []))):
                p_where = "%s.pins[%d]" % (where, p_index)
                if self.keys(p_where, pin, ["names", "version"]):
                    for name in self.listing(p_where + ".names", pin.get("names", [])):
                        self.package_name(p_where + ".names", name, glob=True)
                    self.version_template(p_where + ".version", pin.get("version"))
            if ok:
                usable.append((index, rule))
        self.packaging_coverage(usable, branches)

    def template(self, where, value):
        if not self.text(where, value):
            return
        for placeholder in _PLACEHOLDER_RE.findall(value):
            if placeholder not in PLACEHOLDERS:
                self.error(
                    where, "unknown placeholder {%s} (known: %s)" % (placeholder, ", ".join(sorted(PLACEHOLDERS)))
                )

    def version_template(self, where, value):
        if not self.text(where, value):
            return
        if not _VERSION_TEMPLATE_RE.fullmatch(value):
            self.error(
                where,
                "%r is not a package version: letters, digits, . + ~ : _ ^ - and * only, with {placeholders}, "
                "no whitespace or newline" % (value,),
            )
        self.template(where, value)

    def package_name(self, where, value, glob):
        if not self.text(where, value):
            return
        if not _NAME_RE.fullmatch(value) or (not glob and "*" in value):
            self.error(where, "%r is not a valid package name%s" % (value, " or glob" if glob else ""))
        self.template(where, value)

    def packaging_coverage(self, rules, branches):
        """Every (component, flavor, modules, branch) resolves to exactly one rule: no overlap, no gap."""
        by_key = {}
        for index, rule in rules:
            for flavor in rule["flavors"]:
                by_key.setdefault((rule["component"], flavor), []).append((index, rule))
        for (component, flavor), entries in sorted(by_key.items()):
            first = min(rule["branches"][0] for _index, rule in entries)
            for branch in sorted(b for b in branches if b >= first):
                for modules in ("open", "proprietary"):
                    hits = [
                        index
                        for index, rule in entries
                        if rule["kernel_modules"] in (modules, "any")
                        and rule["branches"][0] <= branch
                        and (rule["branches"][1] is None or branch <= rule["branches"][1])
                    ]
                    if len(hits) > 1:
                        self.error(
                            "packaging",
                            "%s/%s R%d %s matches several rules (packaging[%s]): make the branch ranges disjoint"
                            % (component, flavor, branch, modules, ", ".join(map(str, hits))),
                        )
                    elif not hits:
                        self.error(
                            "packaging",
                            "%s/%s R%d %s matches no rule: a gap in the branch ranges"
                            % (component, flavor, branch, modules),
                        )


def schema_errors(matrix):
    """Return every schema problem of a loaded matrix as a list of strings (empty when valid)."""
    return _Checker(matrix).check()


# ----------------------------------------------------------------------------- loading


def load_matrix(path=None):
    """Read and validate the matrix YAML; raise :class:`MatrixError` listing every problem."""
    import yaml  # noqa: PLC0415 - controller only: managed nodes importing the lookups need no PyYAML

    matrix_path = Path(path) if path is not None else DEFAULT_MATRIX_PATH
    try:
        with open(matrix_path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise MatrixError(["cannot read the file: %s" % exc], matrix_path) from exc
    except yaml.YAMLError as exc:
        raise MatrixError(["not valid YAML: %s" % exc], matrix_path) from exc
    return StackMatrix(data, path=matrix_path)


_CACHE = {}


def default_matrix():
    """The shipped matrix, loaded once per process."""
    return matrix_at(None)


def matrix_at(path=None):
    """The matrix at ``path`` (the shipped one when empty), loaded and validated once per process and path.

    Filters run once per host: a fleet's run reads an operator's matrix once, not once per host.
    """
    key = str(path) if path else "default"
    if key not in _CACHE:
        _CACHE[key] = load_matrix(path or None)
    return _CACHE[key]


class StackMatrix:
    """A validated matrix with lookups. Raises :class:`MatrixError` if ``data`` breaks the schema."""

    def __init__(self, data, path=None):
        errors = schema_errors(data)
        if errors:
            raise MatrixError(errors, path)
        self.data = data
        self.path = path
        self.branches = {entry["branch"]: entry for entry in data["driver_branches"]}
        self.cuda_releases = {entry["version"]: entry for entry in data["cuda"]["releases"]}
        self.cuda_compat = {entry["major"]: entry["min_driver"] for entry in data["cuda"]["minor_version_compat"]}
        self.nccl = {entry["version"]: entry for entry in data["nccl"]}
        self.dcgm = list(data["dcgm"])
        self.container_toolkit = list(data.get("container_toolkit", []))
        self.architectures = {entry["name"]: entry for entry in data.get("architectures", [])}
        self.gpus = {entry["key"]: entry for entry in data["gpus"]}
        self._gpu_names = {}
        for entry in data["gpus"]:
            for name in [entry["key"], *list(entry["aliases"])]:
                self._gpu_names[normalize_name(name)] = entry
        self.operating_systems = list(data["operating_systems"])
        self.packaging = list(data["packaging"])

    # -- GPUs

    def gpu(self, name):
        """GPU entry by short key or nvidia-smi product name (case/space-insensitive), or None."""
        if name is None:
            return None
        return self._gpu_names.get(normalize_name(name))

    def gpu_names(self):
        return sorted(self.gpus)

    # -- operating systems

    def operating_system(self, distribution, version):
        """OS entry for Ansible's ``distribution`` / ``distribution_version`` (``Rocky``/``9.4``), or None."""
        if distribution is None or version is None:
            return None
        fields = str(version).strip().split(".")
        for entry in self.operating_systems:
            if str(distribution).strip().lower() not in [d.lower() for d in entry["distributions"]]:
                continue
            wanted = entry["version"].split(".")
            if fields[: len(wanted)] == wanted:
                return entry
        return None

    def operating_system_names(self):
        names = []
        for entry in self.operating_systems:
            names.append("%s %s" % ("/".join(entry["distributions"]), entry["version"]))
        return names

    # -- drivers

    def branch(self, number):
        return self.branches.get(number)

    def releases(self, number):
        entry = self.branches.get(number)
        return [release["version"] for release in entry["releases"]] if entry else []

    def known_bad(self, number):
        """Releases of branch ``number`` a branch request must skip (version strings, oldest first); [] if none."""
        entry = self.branches.get(number)
        return [bad["version"] for bad in entry.get("known_bad", [])] if entry else []

    def forward_compat_for_gpu(self, gpu):
        """Whether NVIDIA supports the CUDA forward-compatibility package on this GPU entry (data center GPUs).

        False when the entry does not say so: a GPU the matrix does not mark is never given forward compatibility.
        """
        return bool(gpu.get("forward_compat", False)) if gpu else False

    # -- GPU architectures

    def architecture(self, name):
        """The ``architectures`` entry for ``name`` (``volta``), or None when the matrix has none for it."""
        return self.architectures.get(name)

    def cuda_major_max_for_gpu(self, gpu):
        """Newest CUDA major the GPU entry's architecture supports, or None for no limit."""
        entry = self.architecture(gpu["architecture"]) if gpu else None
        return entry["cuda_major_max"] if entry else None

    def dcgm_cuda_major_max_for_gpu(self, gpu):
        """Newest DCGM 4 ``-cuda<N>`` package the GPU entry's architecture takes, or None for no limit."""
        entry = self.architecture(gpu["architecture"]) if gpu else None
        return entry.get("dcgm_cuda_major_max") if entry else None

    # -- CUDA

    def cuda_minors(self, major=None):
        return [v for v in self.cuda_releases if major is None or parse_cuda(v)[0] == major]

    def cuda_min_driver(self, cuda):
        """Minimum driver for a CUDA ``X.Y`` (its GA) or ``X.Y.Z`` (that update); None if unknown."""
        parts = parse_cuda(cuda)
        entry = self.cuda_releases.get("%d.%d" % parts[:2])
        if entry is None:
            return None
        updates = entry["updates"]
        if len(parts) == 2:
            return updates[0]["min_driver"]
        for update in updates:
            if parse_cuda(update["version"]) == parts:
                return update["min_driver"]
        return None

    # -- NCCL / DCGM

    def nccl_for_cuda(self, cuda):
        """NCCL versions built for CUDA X.Y, oldest first."""
        return [version for version, entry in self.nccl.items() if cuda in entry["cuda"]]

    def dcgm_releases(self, major=None):
        return [entry for entry in self.dcgm if major is None or entry["major"] == major]

    # -- packaging

    def packaging_rule(self, component, flavor, branch, kernel_modules):
        for rule in self.packaging:
            if rule["component"] != component or flavor not in rule["flavors"]:
                continue
            if rule["kernel_modules"] not in (kernel_modules, "any"):
                continue
            low, high = rule["branches"]
            if low <= branch and (high is None or branch <= high):
                return rule
        return None
