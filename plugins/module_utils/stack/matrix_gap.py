# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a repository holds that the compatibility matrix lacks, and the matrix rule each would need.

Input: a package index ``{name: [{version, source}]}`` (what :mod:`package_index` parses from
``apt-cache madison`` / ``dnf repoquery``, or :mod:`repository_listing` from a downloaded ``Packages`` file
or ``repodata``), optionally the ``name:stream`` module streams of an rpm repository, and the matrix
(:class:`stack_matrix.StackMatrix`).

Which packages carry which version comes from the matrix's own packaging rules, not from a list kept here:
a package of a ``driver`` rule whose version is ``{driver}`` carries a driver release, ``cuda-toolkit-{cuda_dashed}``
(``{cuda_full}``) a CUDA update, ``libnccl2``/``libnccl`` (``{nccl}-*+cuda{cuda}``) an NCCL build, the ``dcgm3``
and ``dcgm4`` packages (``{dcgm}``) a DCGM release, ``-cuda{dcgm_cuda_major}`` its CUDA major.

:func:`gaps` returns every release the matrix lacks with the rule(s) to add; releases older than the oldest
the matrix tracks (its first branch, CUDA minor, NCCL or DCGM major) are counted, not listed: the matrix does
not support them. :func:`render` writes the report as text. Pure Python, no dependencies.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    driver_branch,
    parse_cuda,
    parse_driver,
    parse_nccl,
    parse_package_version,
)

# The packaging components whose versions the matrix lists, and the placeholder that carries the version.
KINDS = {"driver": ("driver", "{driver}"), "cuda": ("cuda", "{cuda_full}"), "nccl": ("nccl", "{nccl}")}
KINDS.update({"dcgm3": ("dcgm", "{dcgm}"), "dcgm4": ("dcgm", "{dcgm}")})
# What a placeholder in a package *name* stands for.
_NAME_FIELDS = {"branch": r"\d+", "cuda_dashed": r"\d+-\d+", "dcgm_cuda_major": r"\d+", "os_major": r"\d+"}
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
# NVIDIA's NCCL package version: <nccl>-<revision>+cuda<X.Y> (libnccl2=2.28.3-1+cuda13.0).
_NCCL_BUILD = re.compile(r"^(?:\d+:)?(\d+\.\d+\.\d+)-[^+]+\+cuda(\d+\.\d+)$")
# nvidia-driver module streams: <branch>, <branch>-dkms, <branch>-open (NVIDIA's genmodules.py).
_STREAM = re.compile(r"^nvidia-driver:(\d+)(?:-(dkms|open))?$")
SOURCE_HINT = "<id>"
WATCHED_LABELS = {"driver": "driver releases", "cuda": "CUDA updates", "nccl": "NCCL releases", "dcgm": "DCGM releases"}


class GapError(ValueError):
    """The index given is not one the gap can be computed from."""


def _name_pattern(template):
    parts = []
    last = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        field = match.group(1)
        parts.append("(?P<%s>%s)" % (field, _NAME_FIELDS.get(field, r"[^\s]+")))
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("^%s$" % "".join(parts))


def watched_packages(matrix):
    """``[(kind, name_template, regex)]``: the packages whose versions the matrix lists, from its packaging rules."""
    seen = {}
    for rule in matrix.packaging:
        kind = KINDS.get(rule["component"])
        if kind is None:
            continue
        for package in rule.get("packages") or []:
            if kind[1] in package["version"] and (kind[0], package["name"]) not in seen:
                seen[(kind[0], package["name"])] = _name_pattern(package["name"])
    return [(kind, name, regex) for (kind, name), regex in sorted(seen.items())]


def _metapackages(matrix):
    """The first package of each driver rule (nvidia-driver-{branch}, cuda-drivers, nvidia-open): the driver itself."""
    rules = [rule for rule in matrix.packaging if rule["component"] == "driver" and rule.get("packages")]
    return [_name_pattern(rule["packages"][0]["name"]) for rule in rules]


def query_globs(matrix):
    """Name globs that cover every watched package (``cuda-toolkit-*``), for ``dnf repoquery``."""
    return sorted({_PLACEHOLDER.sub("*", name) for _kind, name, _regex in watched_packages(matrix)})


def watched_names(matrix, names):
    """The names among ``names`` (``apt-cache pkgnames`` lines) whose versions the matrix lists, sorted."""
    patterns = [regex for _kind, _name, regex in watched_packages(matrix)]
    return sorted({name.strip() for name in names if name.strip() and any(p.match(name.strip()) for p in patterns)})


# ----------------------------------------------------------------------------- reading the index


def _holding(bucket, key, name, version, source):
    entry = bucket.setdefault(key, {"packages": [], "sources": []})
    held = "%s %s" % (name, version)
    if held not in entry["packages"]:
        entry["packages"].append(held)
    if source and source not in entry["sources"]:
        entry["sources"].append(source)
    return entry


def _read(matrix, index):
    """Sort the index's watched packages into driver releases, CUDA updates, NCCL builds and DCGM releases."""
    found = {"driver": {}, "cuda": {}, "nccl": {}, "dcgm": {}}
    skipped = []
    watched = watched_packages(matrix)
    for name in sorted(index):
        hits = [(kind, regex.match(name)) for kind, _template, regex in watched if regex.match(name)]
        for kind, match in hits[:1]:
            for entry in index[name]:
                version, source = entry["version"], entry.get("source")
                reason = _sort_one(found, kind, match, name, version, source)
                if reason:
                    skipped.append("%s %s: %s" % (name, version, reason))
    return found, skipped


def _sort_one(found, kind, match, name, version, source):
    """File one package version under its kind; return why it was left out, or None."""
    if kind == "nccl":
        build = _NCCL_BUILD.match(version)
        if not build:
            return "not NVIDIA's <nccl>-<revision>+cuda<X.Y> build"
        entry = _holding(found["nccl"], build.group(1), name, version, source)
        entry.setdefault("cuda", set()).add(build.group(2))
        return None
    try:
        up = parse_package_version(version)[1]
    except ValueError as exc:
        return str(exc)
    if kind == "driver":
        try:
            parts = parse_driver(up)
        except ValueError:
            return "not a driver release"
        if len(parts) < 2:
            return "not a driver release"
        _holding(found["driver"], up, name, version, source)
    elif kind == "cuda":
        try:
            parts = parse_cuda(up)
        except ValueError:
            return "not a CUDA X.Y.Z version"
        dashed = match.groupdict().get("cuda_dashed")
        if len(parts) != 3 or (dashed and dashed != "%d-%d" % parts[:2]):
            return "not a CUDA X.Y.Z update of %s" % (dashed or "the toolkit")
        _holding(found["cuda"], up, name, version, source)
    else:
        try:
            parse_nccl(up)
        except ValueError:
            return "not a DCGM X.Y.Z version"
        entry = _holding(found["dcgm"], up, name, version, source)
        cuda_major = match.groupdict().get("dcgm_cuda_major")
        entry.setdefault("cuda_majors", set())
        if cuda_major:
            entry["cuda_majors"].add(int(cuda_major))
    return None


# ----------------------------------------------------------------------------- the gaps


def _gap(component, version, rules, held, detail=""):
    return {
        "component": component,
        "version": version,
        "detail": detail,
        "rules": rules,
        "packages": sorted(held["packages"]),
        "sources": list(held["sources"]),
    }


def _ordered(values):
    ordered = list(values)
    for i in range(1, len(ordered)):
        j = i
        while j > 0 and compare_versions(ordered[j - 1], ordered[j]) > 0:
            ordered[j - 1], ordered[j] = ordered[j], ordered[j - 1]
            j -= 1
    return ordered


def _merge(entries):
    merged = {"packages": [], "sources": []}
    for entry in entries:
        merged["packages"].extend(p for p in entry["packages"] if p not in merged["packages"])
        merged["sources"].extend(s for s in entry["sources"] if s not in merged["sources"])
    return merged


def _driver_gaps(matrix, releases, older):
    gaps = []
    oldest = min(matrix.branches)
    metas = _metapackages(matrix)
    new_branches = {}
    for release in _ordered(releases):
        branch = driver_branch(release)
        if branch < oldest:
            older.setdefault("driver", set()).add("R%d" % branch)
            continue
        if branch not in matrix.branches:
            new_branches.setdefault(branch, []).append(release)
            continue
        if release in matrix.releases(branch) or release in matrix.known_bad(branch):
            continue
        rule = 'driver %s in branch %d: add {version: "%s", source: %s} to driver_branches[R%d].releases (oldest first)'
        rules = [rule % (release, branch, release, SOURCE_HINT, branch)]
        names = sorted({held.split()[0] for held in releases[release]["packages"]})
        if not any(meta.match(name) for meta in metas for name in names):
            rules.append(
                "only %s holds it, no driver package: check that %s is a driver release (a companion can be "
                "versioned apart from the driver, as Debian's nvidia-persistenced is)" % (", ".join(names), release)
            )
        gaps.append(_gap("driver", release, rules, releases[release]))
    for branch, found in sorted(new_branches.items()):
        rules = [
            "driver branch R%d is not in the matrix: add a driver_branches entry {branch: %d, kind, eol, "
            "cuda_major_max, source, known_bad: [], releases: [...]} (kind, end of life and newest CUDA major: "
            "NVIDIA's data center driver documentation)" % (branch, branch),
            "list its releases %s in driver_branches[R%d].releases (oldest first)" % (", ".join(found), branch),
            "check that every packaging rule's branch range covers R%d (the schema test names any gap)" % branch,
        ]
        held = _merge(releases[release] for release in found)
        gaps.append(_gap("driver", "R%d" % branch, rules, held, "releases %s" % ", ".join(found)))
    return gaps


def _cuda_gaps(matrix, updates, older):
    gaps = []
    minors = {}
    for update in _ordered(updates):
        minors.setdefault("%d.%d" % parse_cuda(update)[:2], []).append(update)
    oldest = _ordered(matrix.cuda_releases)[0]
    unknown_min = (
        "minimum driver: unknown, check the CUDA release notes (table 'CUDA Toolkit and Corresponding Driver Versions')"
    )
    for minor in _ordered(minors):
        found = minors[minor]
        if compare_versions(minor, oldest) < 0:
            older.setdefault("cuda", set()).add(minor)
            continue
        if minor not in matrix.cuda_releases:
            listed = ", ".join('{version: "%s", min_driver: ...}' % update for update in found)
            rules = [
                'CUDA %s: add a cuda.releases entry {version: "%s", source: %s, updates: [%s]} (oldest first)'
                % (minor, minor, SOURCE_HINT, listed),
                "CUDA %s needs minimum driver ...: %s" % (minor, unknown_min),
            ]
            major = parse_cuda(minor)[0]
            if major not in matrix.cuda_compat:
                rules.append(
                    "CUDA major %d has no cuda.minor_version_compat entry: add {major: %d, min_driver: ..., "
                    "source: %s} (the release notes' minor version compatibility table)" % (major, major, SOURCE_HINT)
                )
            held = _merge(updates[update] for update in found)
            gaps.append(_gap("cuda", minor, rules, held, "updates %s" % ", ".join(found)))
            continue
        listed = [update["version"] for update in matrix.cuda_releases[minor]["updates"]]
        for update in found:
            if update not in listed:
                rule = (
                    'CUDA %s: add {version: "%s", min_driver: ...} to cuda.releases[%s].updates (oldest first); %s'
                    % (
                        update,
                        update,
                        minor,
                        unknown_min,
                    )
                )
                gaps.append(_gap("cuda", update, [rule], updates[update]))
    return gaps


def _nccl_gaps(matrix, builds, older):
    gaps = []
    oldest = _ordered(matrix.nccl)[0] if matrix.nccl else None
    for version in _ordered(builds):
        held = builds[version]
        cudas = _ordered(held["cuda"])
        if oldest and compare_versions(version, oldest) < 0:
            older.setdefault("nccl", set()).add(version)
            continue
        if version in matrix.nccl:
            cudas = [cuda for cuda in cudas if cuda not in matrix.nccl[version]["cuda"]]
            rules = [
                'NCCL %s built for cuda%s: add "%s" to nccl[%s].cuda (with build_sources: {"%s": %s} when its source '
                "is not the entry's)" % (version, cuda, cuda, version, cuda, SOURCE_HINT)
                for cuda in cudas
            ]
        else:
            rules = [
                'NCCL %s built for %s: add {version: "%s", cuda: [%s], source: %s} to nccl (oldest first)'
                % (
                    version,
                    ", ".join("cuda" + cuda for cuda in cudas),
                    version,
                    ", ".join('"%s"' % cuda for cuda in cudas),
                    SOURCE_HINT,
                )
            ]
        if not cudas:
            continue
        rules.extend(
            "CUDA %s is not in cuda.releases: add the CUDA release first (the schema refuses a build for a CUDA it "
            "does not list), or leave the cuda%s build out" % (cuda, cuda)
            for cuda in cudas
            if cuda not in matrix.cuda_releases
        )
        detail = "built for " + ", ".join("cuda" + cuda for cuda in cudas)
        gaps.append(_gap("nccl", version, rules, held, detail))
    return gaps


def _dcgm_gaps(matrix, releases, older):
    gaps = []
    known = {entry["version"]: entry for entry in matrix.dcgm}
    majors = {entry["major"] for entry in matrix.dcgm}
    for version in _ordered(releases):
        held = releases[version]
        major = parse_nccl(version)[0]
        cuda_majors = sorted(held["cuda_majors"])
        if major not in majors and majors and major < min(majors):
            older.setdefault("dcgm", set()).add(version)
            continue
        if version in known:
            missing = [cuda for cuda in cuda_majors if cuda not in known[version]["cuda_majors"]]
            if missing:
                rules = [
                    "DCGM %s has -cuda%d packages: add %d to dcgm[%s].cuda_majors" % (version, cuda, cuda, version)
                    for cuda in missing
                ]
                gaps.append(_gap("dcgm", version, rules, held, "-cuda%s" % ", -cuda".join(map(str, missing))))
            continue
        shown = "[%s]" % ", ".join(map(str, cuda_majors)) if cuda_majors else "[...]"
        rules = [
            'DCGM %s: add {version: "%s", major: %d, cuda_majors: %s, source: %s} to dcgm (oldest first)'
            % (version, version, major, shown, SOURCE_HINT)
        ]
        if not cuda_majors:
            why = "DCGM 3 ships one package" if major < 4 else "no datacenter-gpu-manager-%d-cuda<N> package" % major
            rules.append("cuda_majors: unknown from this index (%s): check the DCGM release notes" % why)
        detail = ("CUDA majors %s" % ", ".join(map(str, cuda_majors))) if cuda_majors else ""
        gaps.append(_gap("dcgm", version, rules, held, detail))
    return gaps


def _stream_gaps(matrix, streams, releases):
    """Module streams (rpm repositories) against the rhel driver rules, for the branches the index holds."""
    gaps = []
    held = set(streams)
    index_branches = {driver_branch(release) for release in releases}
    for stream in sorted(held):
        match = _STREAM.match(stream)
        if not match or not match.group(2):
            continue
        branch = int(match.group(1))
        modules = "open" if match.group(2) == "open" else "proprietary"
        rule = matrix.packaging_rule("driver", "rhel", branch, modules) if branch in matrix.branches else None
        if rule is not None and rule.get("published", True) is False:
            gaps.append(
                {
                    "component": "packaging",
                    "version": stream,
                    "detail": "R%d %s modules" % (branch, modules),
                    "rules": [
                        "the repository holds module stream %s, but the matrix's rhel driver rule for R%d %s modules "
                        "says NVIDIA publishes none (published: false, source %s): check the source and correct "
                        "the rule" % (stream, branch, modules, rule.get("source"))
                    ],
                    "packages": [],
                    "sources": [],
                }
            )
    for branch in sorted(b for b in index_branches if b in matrix.branches):
        for modules in ("open", "proprietary"):
            rule = matrix.packaging_rule("driver", "rhel", branch, modules)
            if not rule or not rule.get("dnf_module") or rule.get("published", True) is False:
                continue
            wanted = rule["dnf_module"].replace("{branch}", str(branch))
            if wanted not in held:
                gaps.append(
                    {
                        "component": "packaging",
                        "version": wanted,
                        "detail": "R%d %s modules" % (branch, modules),
                        "rules": [
                            "the matrix installs R%d %s modules from module stream %s, which the repository does not "
                            "hold (it holds %s): check NVIDIA's stream names and the rule's dnf_module"
                            % (
                                branch,
                                modules,
                                wanted,
                                ", ".join(sorted(s for s in held if s.startswith("nvidia-driver:"))) or "none",
                            )
                        ],
                        "packages": [],
                        "sources": [],
                    }
                )
    return gaps


def gaps(matrix, index, streams=None, source="", listing_format=""):
    """The report: ``{source, format, packages_read, gaps, older, skipped}``.

    ``gaps``: ``{component, version, detail, rules, packages, sources}`` each, drivers first; ``older``: per
    component, what the index holds that is older than anything the matrix tracks; ``skipped``: package
    versions of watched names that are not a release of their kind (Debian's own ``libnccl2 2.29.7-1-1``).
    """
    if not isinstance(index, dict):
        raise GapError("the index must map package names to versions, got %s" % type(index).__name__)
    found, skipped = _read(matrix, index)
    older = {}
    report = []
    report.extend(_driver_gaps(matrix, found["driver"], older))
    report.extend(_cuda_gaps(matrix, found["cuda"], older))
    report.extend(_nccl_gaps(matrix, found["nccl"], older))
    report.extend(_dcgm_gaps(matrix, found["dcgm"], older))
    if streams:
        report.extend(_stream_gaps(matrix, streams, found["driver"]))
    return {
        "source": source,
        "format": listing_format,
        "packages_read": sum(len(entries) for entries in index.values()),
        "watched": {kind: len(items) for kind, items in found.items()},
        "streams": sorted(streams or []),
        "gaps": report,
        "older": {kind: _ordered(values) for kind, values in sorted(older.items())},
        "skipped": skipped,
    }


def render(report):
    """The report as lines of text: a table of the gaps, then the rules each needs."""
    watched = ", ".join(
        "%d %s" % (count, WATCHED_LABELS[kind]) for kind, count in sorted(report.get("watched", {}).items()) if count
    )
    lines = [
        "Matrix gaps in %s (%s: %d package versions read; the matrix's packages hold %s)"
        % (
            report.get("source") or "the index",
            report.get("format") or "index",
            report.get("packages_read", 0),
            watched or "nothing",
        )
    ]
    rows = report["gaps"]
    if not rows:
        lines.append("No gap: the matrix lists every driver release, CUDA update, NCCL build and DCGM release found.")
    else:
        width_c = max(len("COMPONENT"), *(len(row["component"]) for row in rows))
        width_v = max(len("VERSION"), *(len(row["version"]) for row in rows))
        lines.append("%-*s  %-*s  %s" % (width_c, "COMPONENT", width_v, "VERSION", "IN THE REPOSITORY"))
        for row in rows:
            held = ", ".join(row["packages"][:3]) + (" ..." if len(row["packages"]) > 3 else "")
            lines.append("%-*s  %-*s  %s" % (width_c, row["component"], width_v, row["version"], held or row["detail"]))
        lines.append("")
        lines.append("Rules to add (cite the repository index, or a better source, as the source id):")
        for row in rows:
            lines.append(
                "%s %s%s:" % (row["component"], row["version"], " (%s)" % row["detail"] if row["detail"] else "")
            )
            lines.extend("  - " + rule for rule in row["rules"])
    for kind, values in report.get("older", {}).items():
        lines.append("Older than the matrix tracks (%s, not listed as gaps): %s" % (kind, ", ".join(values)))
    if report.get("skipped"):
        lines.append("Left out (%d): %s" % (len(report["skipped"]), "; ".join(report["skipped"][:5])))
    return lines
