# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A repository's package listing, read into :mod:`package_index`'s shape ``{name: [{version, source}]}``.

What the node's package manager prints is read by :mod:`package_index`'s own parsers
(``apt-cache madison``: :func:`package_index.parse_apt_madison`; ``dnf repoquery`` with its query format:
:func:`package_index.parse_dnf_repoquery`). This module adds what an operator downloads from a mirror, which
no other module reads:

* an apt ``Packages`` file (Debian control stanzas, ``Package:`` and ``Version:``), plain, gzip or xz;
* rpm ``repodata``: ``repomd.xml`` and the ``primary.xml`` it names (plain, gzip, xz or zstd), and the
  ``modules.yaml`` of a modular repository (its ``nvidia-driver`` streams);
* ``apt-cache policy <names>`` and the default ``dnf repoquery`` output (``name-[epoch:]version-release.arch``),
  which operators paste.

:func:`read_listing` takes a file or a directory and says which it read; anything else raises
:class:`ListingError` with what was expected. Controller only (PyYAML for ``modules.yaml``).
zstd-compressed metadata is read through the ``unzstd`` function the caller passes (``tools/matrix_gap.py`` runs
the ``zstd`` tool): module utilities start no process themselves.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import zlib
from pathlib import Path
from xml.etree import ElementTree

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_index

COMMON_NS = "{http://linux.duke.edu/metadata/common}"
REPO_NS = "{http://linux.duke.edu/metadata/repo}"
# A pasted command line (``$ apt-cache madison nvidia-open | grep sbsa``) before the output.
_PROMPT = re.compile(r"^\s*[$#] ")
_NEVRA = re.compile(
    r"^(?P<name>\S+)-(?:(?P<epoch>\d+):)?(?P<version>[^-:\s]+)-(?P<release>[^-\s]+)\.(?P<arch>[^.\s]+)$"
)
_POLICY_PACKAGE = re.compile(r"^(\S+):$")
_POLICY_VERSION = re.compile(r"^\s+(?:\*\*\*\s+)?(\S+)\s+-?\d+$")
_POLICY_SOURCE = re.compile(r"^\s+-?\d+\s+(\S+)")


class ListingError(ValueError):
    """A listing that cannot be read, or is in no format this module knows."""


def _add(index, name, version, source):
    entries = index.setdefault(name, [])
    if not any(entry["version"] == version for entry in entries):
        entries.append({"version": version, "source": source})


def decompress(data, what, unzstd=None):
    """``data`` uncompressed (gzip, xz, bzip2, or zstd through ``unzstd(data, what)``, by magic bytes), as text."""
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        elif data[:6] == b"\xfd7zXZ\x00":
            data = lzma.decompress(data)
        elif data[:3] == b"BZh":
            data = bz2.decompress(data)
        elif data[:4] == b"\x28\xb5\x2f\xfd":
            if unzstd is None:
                raise ListingError("%s is zstd-compressed: decompress it first (zstd -d)" % what)
            data = unzstd(data, what)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise ListingError("%s: cannot decompress it: %s" % (what, exc)) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ListingError("%s: not text (UTF-8) after decompression: %s" % (what, exc)) from exc


def parse_apt_packages(text, source):
    """An apt ``Packages`` file: every stanza's ``Package:`` and ``Version:``."""
    index = {}
    for number, stanza in enumerate(re.split(r"\n\s*\n", text or ""), start=1):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or not line.strip():
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise ListingError("%s: stanza %d: %r is not a 'Field: value' line" % (source, number, line))
            fields[key.strip()] = value.strip()
        if not fields:
            continue
        if not fields.get("Package") or not fields.get("Version"):
            raise ListingError("%s: stanza %d has no Package: or no Version: field" % (source, number))
        _add(index, fields["Package"], fields["Version"], source)
    return index


def parse_apt_policy(text, source):
    """``apt-cache policy <names>``: each package's version table (the first repository line of each version)."""
    index = {}
    name = None
    pending = None
    for line in (text or "").splitlines():
        package = _POLICY_PACKAGE.match(line)
        if package and not line.startswith(" "):
            name, pending = package.group(1), None
            continue
        version = _POLICY_VERSION.match(line)
        if name and version:
            pending = version.group(1)
            _add(index, name, pending, source)
            continue
        where = _POLICY_SOURCE.match(line)
        if name and pending and where and where.group(1) != "/var/lib/dpkg/status":
            for entry in index[name]:
                if entry["version"] == pending and entry["source"] == source:
                    entry["source"] = where.group(1)
            pending = None
    return index


def parse_nevra(text, source):
    """Default ``dnf repoquery`` output, one ``name-[epoch:]version-release.arch`` a line; other lines ignored."""
    index = {}
    for line in (text or "").splitlines():
        match = _NEVRA.match(line.strip())
        if not match:
            continue
        epoch = match.group("epoch")
        version = "%s-%s" % (match.group("version"), match.group("release"))
        if epoch and epoch != "0":
            version = "%s:%s" % (epoch, version)
        _add(index, match.group("name"), version, source)
    return index


def parse_rpm_primary(text, source):
    """A ``primary.xml``: every rpm package's name and ``[epoch:]version-release`` (epoch 0 left out, as rpm prints)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ListingError("%s: not valid XML: %s" % (source, exc)) from exc
    if root.tag != COMMON_NS + "metadata":
        raise ListingError("%s: not a primary.xml (root element %s, expected metadata)" % (source, root.tag))
    index = {}
    for package in root.iter(COMMON_NS + "package"):
        name = package.findtext(COMMON_NS + "name")
        version = package.find(COMMON_NS + "version")
        if not name or version is None or not version.get("ver"):
            raise ListingError("%s: a package without <name> or <version ver=...>" % source)
        text_version = version.get("ver") + ("-%s" % version.get("rel") if version.get("rel") else "")
        if version.get("epoch") not in (None, "", "0"):
            text_version = "%s:%s" % (version.get("epoch"), text_version)
        _add(index, name, text_version, source)
    return index


def parse_module_streams(text, source):
    """A ``modules.yaml``: the ``name:stream`` of every modulemd document."""
    import yaml  # noqa: PLC0415 - controller only

    streams = []
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ListingError("%s: not valid YAML: %s" % (source, exc)) from exc
    for document in documents:
        if not isinstance(document, dict) or document.get("document") != "modulemd":
            continue
        data = document.get("data") or {}
        if not data.get("name") or data.get("stream") in (None, ""):
            raise ListingError("%s: a modulemd document without data.name or data.stream" % source)
        stream = "%s:%s" % (data["name"], data["stream"])
        if stream not in streams:
            streams.append(stream)
    return streams


def _repomd_locations(text, source):
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ListingError("%s: not valid XML: %s" % (source, exc)) from exc
    locations = {}
    for data in root.iter(REPO_NS + "data"):
        location = data.find(REPO_NS + "location")
        if location is not None and location.get("href"):
            locations[data.get("type")] = location.get("href")
    if "primary" not in locations:
        raise ListingError("%s: repomd.xml names no primary metadata" % source)
    return locations


def _read_text(path, unzstd=None):
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ListingError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    return decompress(data, str(path), unzstd)


def _without_prompts(text):
    return "\n".join(line for line in text.splitlines() if not _PROMPT.match(line))


def parse_text(text, source):
    """Detect the format of one listing's text; return ``(format, index, streams)``."""
    stripped = _without_prompts(text).strip()
    if not stripped:
        raise ListingError("%s is empty: no package listing to read" % source)
    if stripped.startswith("<"):
        if "<repomd" in stripped[:2000]:
            raise ListingError("%s is a repomd.xml: give the repository directory (the one holding repodata/)" % source)
        return "rpm primary.xml", parse_rpm_primary(stripped, source), []
    if re.search(r"^document:\s*modulemd\b", stripped, re.M):
        return "rpm modules.yaml", {}, parse_module_streams(stripped, source)
    if re.search(r"^Package:\s", stripped, re.M):
        return "apt Packages", parse_apt_packages(stripped, source), []
    if re.search(r"^\s+Version table:\s*$", stripped, re.M):
        return "apt-cache policy", parse_apt_policy(stripped, source), []
    lines = stripped.splitlines()
    if all(line.count("|") == 2 for line in lines if line.strip()):
        try:
            return "apt-cache madison", package_index.parse_apt_madison(stripped), []
        except package_index.PackageIndexError as exc:
            raise ListingError("%s: %s" % (source, exc)) from exc
    index = package_index.parse_dnf_repoquery(stripped)
    if index:
        return "dnf repoquery", index, []
    index = parse_nevra(stripped, source)
    if index:
        return "dnf repoquery (name-epoch:version-release.arch)", index, []
    raise ListingError(
        "%s: unknown format (first line %r). Give an apt Packages file, a repository directory with "
        "repodata/repomd.xml, a primary.xml or modules.yaml, or the output of apt-cache madison, apt-cache policy "
        "or dnf repoquery" % (source, lines[0][:80])
    )


def read_listing(path, modules=None, unzstd=None):
    """Read the listing at ``path`` (a file, or a repository directory); ``modules``: a modules.yaml to add;
    ``unzstd(data, what)`` returns zstd-compressed ``data`` uncompressed (without it such a file is refused).

    Returns ``{format, source, index, streams}``.
    """
    where = Path(path)
    if where.is_dir():
        result = _read_directory(where, unzstd)
    elif where.exists():
        fmt, index, streams = parse_text(_read_text(where, unzstd), str(where))
        result = {"format": fmt, "source": str(where), "index": index, "streams": streams}
    else:
        raise ListingError("cannot read %s: no such file or directory" % path)
    if modules:
        extra = parse_module_streams(_read_text(modules, unzstd), str(modules))
        result["streams"] = sorted(set(result["streams"]) | set(extra))
    return result


def _read_directory(where, unzstd):
    repomd = next((p for p in (where / "repodata" / "repomd.xml", where / "repomd.xml") if p.is_file()), None)
    if repomd is not None:
        root = repomd.parent.parent
        locations = _repomd_locations(_read_text(repomd, unzstd), str(repomd))
        primary = root / locations["primary"]
        index = parse_rpm_primary(_read_text(primary, unzstd), str(primary))
        streams = []
        if "modules" in locations:
            modules = root / locations["modules"]
            streams = parse_module_streams(_read_text(modules, unzstd), str(modules))
        fmt = "rpm repodata" + (" with modules.yaml" if "modules" in locations else "")
        return {"format": fmt, "source": str(where), "index": index, "streams": streams}
    for name in ("Packages", "Packages.gz", "Packages.xz", "Packages.bz2"):
        if (where / name).is_file():
            fmt, index, streams = parse_text(_read_text(where / name, unzstd), str(where / name))
            return {"format": fmt, "source": str(where / name), "index": index, "streams": streams}
    raise ListingError(
        "%s: a directory without repodata/repomd.xml or a Packages file: give the repository's root or the index file"
        % where
    )
