# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load and query the NVIDIA stack compatibility matrix.

The matrix is ``matrix/nvidia_stack.yml`` at the collection root (see
docs/compatibility-matrix.md). :func:`load_matrix` reads it and refuses it when
:func:`matrix_schema.schema_errors` finds any problem; :class:`StackMatrix` wraps a
valid matrix with the lookups the resolver needs.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_schema import normalize_name, schema_errors
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import parse_cuda

DEFAULT_MATRIX_PATH = Path(__file__).resolve().parents[3] / "matrix" / "nvidia_stack.yml"


class MatrixError(ValueError):
    """The matrix file cannot be read or does not follow the schema."""

    def __init__(self, errors, path=None):
        self.errors = list(errors)
        self.path = path
        where = " %s" % path if path else ""
        super().__init__("compatibility matrix%s is invalid:\n  - %s" % (where, "\n  - ".join(self.errors)))


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
