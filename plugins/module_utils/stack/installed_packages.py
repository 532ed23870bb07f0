# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node has installed of the stack's packages, and how it pins them: one dpkg-query or rpm -q call.

``query_apt`` and ``query_dnf`` take a running module (its ``params``: ``command_timeout`` and the paths of
the apt preferences, the unattended-upgrades blacklist and dnf's versionlock list) and the package names;
each returns ``(installed, pins, holds, blacklisted)``: ``{name: version or None}``, the pinned versions,
the held names (None on dnf, where the versionlock is the hold) and ``{name: bool or None}``. The parsers
they call are pure (``apt_pinning``, ``rpm_versionlock``) and tested on captured output.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import first_line, run_bounded
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning, kernel_lockstep, rpm_versionlock


def query_apt(module, names, params):
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    parsed = {}
    if names:
        argv = [dpkg_query, "-W", "-f=${Package}\\t${Version}\\t${Status}\\n", *names]
        rc, out, err = run_bounded(module, argv, "read the installed packages", params["command_timeout"])
        if rc not in (0, 1):
            module.fail_json(msg=f"dpkg-query failed: {first_line(err, out)}", rc=rc, stdout=out, stderr=err, cmd=argv)
        try:
            parsed = apt_pinning.parse_dpkg_query(out)
        except apt_pinning.PinningError as exc:
            module.fail_json(msg=f"cannot read dpkg-query output: {exc}", stdout=out)
    installed = {name: (parsed.get(name) or {}).get("version") for name in names}
    holds = {name for name in names if (parsed.get(name) or {}).get("held")}
    pref_text = read_value(params["preferences_path"])
    pins = apt_pinning.pinned_versions(apt_pinning.parse_preferences(pref_text or ""))
    uu_text = read_value(params["unattended_upgrades_path"])
    blacklist = apt_pinning.parse_unattended_blacklist(uu_text or "")
    blacklisted = {name: apt_pinning.blacklist_covers(name, blacklist) for name in names}
    return installed, pins, holds, blacklisted


def query_dnf(module, names, params):
    rpm = module.get_bin_path("rpm", required=True)
    parsed = {}
    if names:
        argv = [rpm, "-q", "--qf", rpm_versionlock.RPM_QUERY_FORMAT, *names]
        rc, out, err = run_bounded(module, argv, "read the installed packages", params["command_timeout"])
        try:
            parsed = rpm_versionlock.parse_rpm_query(out)
        except rpm_versionlock.VersionlockError as exc:
            module.fail_json(msg=f"cannot read rpm -q output: {exc}", rc=rc, stdout=out, stderr=err, cmd=argv)
    installed = {name: (parsed.get(name) or {}).get("evr") for name in names}
    lock_text = read_value(params["versionlock_path"])
    pins = rpm_versionlock.locked_versions(lock_text or "")
    return installed, pins, None, dict.fromkeys(names)


def query_kernels(module, manager, hint=""):
    """The installed kernel packages, in one command: apt ``{name: info}`` of ``dpkg-query -W 'linux-*'`` (the
    ``apt_pinning.parse_dpkg_query`` form); dnf ``[{name, evr, kver}]`` of ``rpm -q`` of the kernel package names,
    every installed version (``kernel_lockstep.parse_rpm_kernels``). A query that fails fails the module: an unread
    list would hold or keep nothing. ``rpm -q`` exits with the number of names not installed (said on stdout), so
    its failure is what it says on stderr."""
    if manager == "apt":
        dpkg_query = module.get_bin_path("dpkg-query", required=True)
        argv = [dpkg_query, "-W", "-f=${Package}\\t${Version}\\t${Status}\\n", "linux-*"]
        rc, out, err = run_bounded(module, argv, "list the installed kernel packages", hint=hint)
        if rc not in (0, 1):  # 1: no package matches
            module.fail_json(msg=f"dpkg-query failed listing the kernel packages: {first_line(err, out)}", rc=rc)
        try:
            return apt_pinning.parse_dpkg_query(out)
        except apt_pinning.PinningError as exc:
            module.fail_json(msg=f"cannot read the installed kernel packages: {exc}")
    rpm = module.get_bin_path("rpm", required=True)
    argv = [rpm, "-q", "--qf", kernel_lockstep.RPM_KERNEL_QUERY_FORMAT, *kernel_lockstep.RPM_KERNEL_NAMES]
    rc, out, err = run_bounded(module, argv, "list the installed kernel packages", hint=hint)
    if (err or "").strip():
        module.fail_json(msg=f"rpm -q failed listing the kernel packages: {first_line(err)}", rc=rc)
    try:
        return kernel_lockstep.parse_rpm_kernels(out)
    except kernel_lockstep.LockstepError as exc:
        module.fail_json(msg=str(exc))
    return []
