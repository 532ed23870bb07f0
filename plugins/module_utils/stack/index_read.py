# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's read of what its repositories serve: the package index, and the OS repositories it has.

``read_index`` asks ``apt-cache madison`` or ``dnf repoquery`` (one bounded call) what the node's
repositories hold for the stack's packages; ``read_os_repositories`` lists the OS repositories NVIDIA's
packages depend on that the node lacks (apt's sources, or the ``.repo`` files). Both take a running
module and fail it with what to check; the parsers and decisions are pure (``package_index``,
``os_repositories``) and tested on captured output.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import first_line, run_bounded
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import os_repositories, package_index


def read_bounded(module, argv, timeout, doing):
    """``argv``'s output, the command bounded by ``timeout`` seconds; a command that does not answer in time or
    fails fails the module, saying what it was doing."""
    rc, out, err = run_bounded(module, argv, doing, timeout, hint="check the node's repositories")
    if rc != 0:
        module.fail_json(msg=f"could not {doing}: {first_line(err, out)}", rc=rc, cmd=argv)
    return out


def read_index(module, manager, names, timeout):
    """What the node's repositories hold for ``names``: one index query, bounded by ``timeout`` seconds."""
    if manager == "apt":
        tool = module.get_bin_path("apt-cache", required=True)
        argv = [tool, "madison", *names]
        parse = package_index.parse_apt_madison
    else:
        tool = module.get_bin_path("dnf", required=True)
        dnf5 = os.path.basename(os.path.realpath(tool)).startswith("dnf5")
        argv = package_index.dnf_repoquery_argv(tool, names, dnf5)
        parse = package_index.parse_dnf_repoquery
    out = read_bounded(module, argv, timeout, "read the package index")
    try:
        return parse(out)
    except package_index.PackageIndexError as exc:
        module.fail_json(msg=f"cannot read the package index: {exc}", stdout=out, cmd=argv)


def read_apt_sources(directory) -> list[tuple[str, str]]:
    """``(name, text)`` of apt's source files: ``sources.list``, then ``sources.list.d/*.list`` and ``*.sources``."""
    names = ["sources.list"]
    parts = os.path.join(directory, "sources.list.d")
    if os.path.isdir(parts):
        names += [
            os.path.join("sources.list.d", name)
            for name in sorted(os.listdir(parts))
            if name.endswith((".list", ".sources"))
        ]
    return [(name, read_value(os.path.join(directory, name)) or "") for name in names]


def read_os_repositories(module, manager, os_id, params) -> dict:
    """``{missing}``: the OS repositories the stack of ``os_id`` needs that the node lacks (os_repositories)."""
    try:
        if manager == "apt":
            if not os_id.startswith("debian"):
                return {"missing": []}
            argv = [module.get_bin_path("apt-cache", required=True), "policy"]
            out = read_bounded(module, argv, params["timeout"], "list apt's sources")
            keyring = (
                os_repositories.DEBIAN_ARCHIVE_KEYRING
                if os.path.exists(os_repositories.DEBIAN_ARCHIVE_KEYRING)
                else None
            )
            missing = os_repositories.missing(
                os_id,
                apt_entries=os_repositories.parse_apt_policy(out),
                keyring=keyring,
                apt_sources=os_repositories.parse_apt_sources(read_apt_sources(params["apt_dir"])),
            )
        else:
            directory = params["repos_dir"]
            names = []
            if os.path.isdir(directory):
                names = sorted(name for name in os.listdir(directory) if name.endswith(".repo"))
            texts = [(name, read_value(os.path.join(directory, name)) or "") for name in names]
            repos = os_repositories.parse_repo_files(texts)
            missing = os_repositories.missing(os_id, repos=repos, arch=os.uname().machine)
    except os_repositories.RepositoryReadError as exc:
        module.fail_json(msg=f"cannot read the node's OS repositories: {exc}")
    return {"missing": [dict(entry, message=os_repositories.describe(entry)) for entry in missing]}
