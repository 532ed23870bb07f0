# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a container runtime's configuration must hold for the NVIDIA Container Runtime, and how containerd's is read.

``nvidia-ctk runtime configure`` (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/runtime/configure/configure.go,
v1.18.0 on) writes the configuration; this module decides where (containerd's config version), adds the drop-in
directory to containerd's ``imports`` keeping the operator's others, and checks what the tool wrote:

- containerd: a drop-in for config version 2 and 3, holding a copy of the whole CRI plugin section (containerd
  before 2.1 replaces a plugin's table from an import instead of merging it, containerd issue 5837) with
  ``runtimes.nvidia`` (``options.BinaryName`` the NVIDIA runtime) and ``enable_cdi``; version 1 (a config.toml
  without ``version``) has no drop-ins and the main file is edited (pkg/config/engine/containerd/containerd.go).
- CRI-O: a drop-in with ``[crio.runtime.runtimes.nvidia]`` (``runtime_path``, ``runtime_type = "oci"``); CRI-O
  always has CDI (pkg/config/engine/crio/crio.go).
- Docker: ``/etc/docker/daemon.json`` with ``runtimes.nvidia.path`` and ``features.cdi`` (pkg/config/engine/docker).
"""

from __future__ import annotations

import json
import re

try:  # Python 3.11 and later; a node without it is checked with the table headers only (_toml_headers)
    import tomllib
except ImportError:  # pragma: no cover - the unit tests run on 3.11+
    tomllib = None

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# nvidia-ctk's default drop-in from v1.19.0 (v1.18.0 wrote /etc/containerd/config.d, its issue 1404); passed
# explicitly, so every release writes the same file.
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CRIO_CONFIG = "/etc/crio/crio.conf"
# nvidia-ctk v1.20.0's default (v1.18/v1.19: /etc/crio/conf.d, which CRI-O does not read by default).
CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-nvidia.toml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
RUNTIME_NAME = "nvidia"
RUNTIME_BINARY = "nvidia-container-runtime"
CRI_PLUGINS = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}

_TABLE = re.compile(r"^\s*\[")
_VERSION = re.compile(r"^\s*version\s*=\s*(\d+)\s*(#.*)?$")
_IMPORTS = re.compile(r"^\s*imports\s*=")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'')


class ConfigError(ValueError):
    """A configuration file this module cannot read."""


def _top_lines(text):
    """The lines before the first table (the top-level keys)."""
    lines = []
    for line in (text or "").splitlines():
        if _TABLE.match(line):
            break
        lines.append(line)
    return lines


def _has_content(text):
    return any(line.strip() and not line.strip().startswith("#") for line in (text or "").splitlines())


def containerd_version(text):
    """The config version nvidia-ctk takes from containerd's config.toml ``text`` (None: no file).

    No file, or one without a key, is version 2 (its default); a file with keys but no ``version`` is version 1.
    """
    if text is None or not _has_content(text):
        return 2
    for line in _top_lines(text):
        match = _VERSION.match(line)
        if match:
            version = int(match.group(1))
            if version not in CRI_PLUGINS:
                raise ConfigError("containerd config version %d is not one nvidia-ctk knows (1, 2, 3)" % version)
            return version
        if re.match(r"^\s*version\s*=", line):
            raise ConfigError("containerd's version is not a whole number: %s" % line.strip())
    return 1


def _imports_span(lines):
    """``(start, end)`` of the top-level ``imports = [...]`` statement in ``lines`` (end exclusive), or None."""
    for start, line in enumerate(lines):
        if _IMPORTS.match(line):
            end = start
            depth = 0
            while end < len(lines):
                depth += lines[end].count("[") - lines[end].count("]")
                end += 1
                if depth <= 0:
                    return start, end
            raise ConfigError("containerd's imports = [ ... ] is not closed")
    return None


def containerd_imports(text):
    """The top-level ``imports`` of containerd's config.toml."""
    lines = _top_lines(text)
    span = _imports_span(lines)
    if span is None:
        return []
    statement = "\n".join(lines[span[0] : span[1]])
    return [double if double or not single else single for double, single in _STRING.findall(statement)]


def drop_in_pattern(drop_in):
    """The import that makes containerd read ``drop_in`` (its directory's ``*.toml``, as nvidia-ctk writes it)."""
    return drop_in.rsplit("/", 1)[0] + "/*.toml"


def with_import(text, pattern):
    """containerd's config.toml ``text`` with ``pattern`` among its imports, every other line kept.

    A missing or empty file becomes ``version = 2`` with the import, as nvidia-ctk writes it.
    """
    if text is None or not _has_content(text):
        prefix = text if text and text.endswith("\n") else (text or "") + ("\n" if text else "")
        return prefix + 'version = 2\nimports = ["%s"]\n' % pattern
    imports = containerd_imports(text)
    if pattern in imports:
        return text
    lines = text.splitlines()
    top = _top_lines(text)
    statement = "imports = [%s]" % ", ".join(json.dumps(item) for item in [*imports, pattern])
    span = _imports_span(top)
    if span is not None:
        lines[span[0] : span[1]] = [statement]
    else:
        after = next((index + 1 for index, line in enumerate(top) if _VERSION.match(line)), 0)
        lines.insert(after, statement)
    return "\n".join(lines) + "\n"


def _toml(text, what):
    if tomllib is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("%s is not valid TOML: %s" % (what, exc)) from exc


def _runtime_binary_problem(value, where):
    if not isinstance(value, str) or value.rsplit("/", 1)[-1] != RUNTIME_BINARY:
        return "%s is %r, not %s" % (where, value, RUNTIME_BINARY)
    return None


def containerd_problems(text, version, cdi=True, default=False):
    """What the containerd configuration nvidia-ctk wrote (``text``, the drop-in or for version 1 the main file)
    lacks for config ``version``; empty when it holds the NVIDIA runtime (and ``enable_cdi``, the default runtime
    when asked)."""
    plugin = CRI_PLUGINS[version]
    data = _toml(text or "", "the containerd drop-in")
    if data is None:
        header = '[plugins."%s".containerd.runtimes.%s' % (plugin, RUNTIME_NAME)
        return [] if header in (text or "") else ["no %s] table" % header]
    cri = (data.get("plugins") or {}).get(plugin) or {}
    runtime = ((cri.get("containerd") or {}).get("runtimes") or {}).get(RUNTIME_NAME)
    where = 'plugins."%s".containerd.runtimes.%s' % (plugin, RUNTIME_NAME)
    if not isinstance(runtime, dict):
        return ["no %s" % where]
    problems = []
    binary = _runtime_binary_problem((runtime.get("options") or {}).get("BinaryName"), where + ".options.BinaryName")
    if binary:
        problems.append(binary)
    if cdi and cri.get("enable_cdi") is not True:
        problems.append('plugins."%s".enable_cdi is not true' % plugin)
    if default and (cri.get("containerd") or {}).get("default_runtime_name") != RUNTIME_NAME:
        problems.append('plugins."%s".containerd.default_runtime_name is not %s' % (plugin, RUNTIME_NAME))
    return problems


def crio_problems(text, default=False):
    """What CRI-O's drop-in ``text`` lacks for the NVIDIA runtime."""
    data = _toml(text or "", "the CRI-O drop-in")
    if data is None:
        header = "[crio.runtime.runtimes.%s]" % RUNTIME_NAME
        return [] if header in (text or "") else ["no %s table" % header]
    runtime_table = (data.get("crio") or {}).get("runtime") or {}
    runtime = (runtime_table.get("runtimes") or {}).get(RUNTIME_NAME)
    if not isinstance(runtime, dict):
        return ["no crio.runtime.runtimes.%s" % RUNTIME_NAME]
    problems = []
    binary = _runtime_binary_problem(runtime.get("runtime_path"), "crio.runtime.runtimes.nvidia.runtime_path")
    if binary:
        problems.append(binary)
    if default and runtime_table.get("default_runtime") != RUNTIME_NAME:
        problems.append("crio.runtime.default_runtime is not %s" % RUNTIME_NAME)
    return problems


def docker_config(text):
    """daemon.json as a mapping (an absent or empty file is an empty one)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError("daemon.json is not valid JSON: %s" % exc) from exc
    if not isinstance(data, dict):
        raise ConfigError("daemon.json is not a JSON object")
    return data


def docker_problems(text, cdi=True, default=False):
    """What Docker's daemon.json ``text`` lacks for the NVIDIA runtime."""
    data = docker_config(text)
    runtime = (data.get("runtimes") or {}).get(RUNTIME_NAME)
    if not isinstance(runtime, dict):
        return ["no runtimes.%s" % RUNTIME_NAME]
    problems = []
    binary = _runtime_binary_problem(runtime.get("path"), "runtimes.nvidia.path")
    if binary:
        problems.append(binary)
    if cdi and (data.get("features") or {}).get("cdi") is not True:
        problems.append("features.cdi is not true")
    if default and data.get("default-runtime") != RUNTIME_NAME:
        problems.append("default-runtime is not %s" % RUNTIME_NAME)
    return problems


def docker_same(before, after):
    """Whether two daemon.json texts say the same (nvidia-ctk rewrites the file with its own indentation)."""
    try:
        return docker_config(before) == docker_config(after)
    except ConfigError:
        return False
