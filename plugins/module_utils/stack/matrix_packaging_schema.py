# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The schema of the matrix's ``packaging`` rules: which packages and pins each component takes.

:class:`PackagingRulesMixin` gives :mod:`matrix_schema`'s checker the checks of the rules (keys, package names
and version templates with their ``{placeholders}``) and of their coverage: every (component, flavor, kernel
modules, branch) resolves to exactly one rule. The vocabulary of the rules (components, flavors, placeholders)
is here.
"""

from __future__ import annotations

import re

FLAVORS = ("ubuntu", "debian", "rhel")
KERNEL_MODULES = ("open", "proprietary", "any")
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
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+.*{}_-]*")
# A package version template: a version's characters (Debian's and rpm's), * and {placeholders}.
_VERSION_TEMPLATE_RE = re.compile(r"[A-Za-z0-9.+~:_^*{}-]+")


class PackagingRulesMixin:
    """The checks of the ``packaging`` rules; the checker it is mixed into gives ``error``, ``keys``, ``sources``,
    ``text``, ``integer``, ``choice`` and ``listing``."""

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
