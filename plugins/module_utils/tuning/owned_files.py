# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small files a tuning module owns on a node (drop-ins, a boot script, a unit and its wants link).

``sync_file`` and ``sync_link`` make one path what it should be and say whether it
changed: content written atomically through ``managed_file.write_atomic``, then the
mode set (``atomic_move`` keeps an old file's mode and gives a new one the umask's),
root:root when the module runs as root, missing parent directories created 0755.
Both honour check mode (nothing touched, the change still reported) and append a
before/after entry to ``diff`` when given a list.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file

DIRECTORY_MODE = 0o755


def missing_directories(path: str) -> list:
    """The parent directories of ``path`` that do not exist yet, outermost first."""
    missing = []
    directory = os.path.dirname(path)
    while directory and not os.path.isdir(directory) and directory != os.path.dirname(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return list(reversed(missing))


def _make_parents(path: str) -> None:
    for directory in missing_directories(path):
        os.mkdir(directory, DIRECTORY_MODE)
        os.chmod(directory, DIRECTORY_MODE)


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _fail(module, path, exc):
    module.fail_json(msg=f"could not write {path}: {exc.strerror or exc}; check the root and the directories above it")


def sync_file(module, path: str, content: str, mode: int = 0o644, diff=None) -> bool:
    """Make ``path`` a regular file holding ``content`` with ``mode`` (root-owned when running as root)."""
    is_link = os.path.islink(path)
    try:
        before = None if is_link else managed_file.read_text(path)
    except IsADirectoryError:
        module.fail_json(msg=f"{path} is a directory; remove it so the module can write the file there")
    stat = None if is_link or before is None else os.stat(path)
    wrong_mode = stat is not None and (stat.st_mode & 0o7777) != mode
    wrong_owner = stat is not None and _as_root() and (stat.st_uid, stat.st_gid) != (0, 0)
    if before == content and not wrong_mode and not wrong_owner:
        return False
    if diff is not None:
        header = path
        if before == content:
            header = f"{path} (mode {stat.st_mode & 0o7777:04o} owner {stat.st_uid}:{stat.st_gid})"
        elif is_link:
            header = f"{path} (a symbolic link, replaced by a file)"
        diff.append(dict(before=before or "", after=content, before_header=header, after_header=path))
    if module.check_mode:
        return True
    try:
        _make_parents(path)
        if before != content:
            managed_file.write_atomic(module, path, content, mode=mode)
        os.chmod(path, mode)
        if _as_root():
            os.chown(path, 0, 0)
    except OSError as exc:
        _fail(module, path, exc)
    return True


def sync_link(module, path: str, target: str, diff=None) -> bool:
    """Make ``path`` a symbolic link to ``target`` (replacing a file or another link, never a directory)."""
    current = os.readlink(path) if os.path.islink(path) else None
    if current == target:
        return False
    if current is None and os.path.isdir(path):
        module.fail_json(msg=f"{path} is a directory; remove it so the module can link it to {target}")
    other = current is None and os.path.lexists(path)
    if diff is not None:
        before = f"-> {current}\n" if current is not None else ("(a regular file)\n" if other else "")
        diff.append(dict(before=before, after=f"-> {target}\n", before_header=path, after_header=path))
    if module.check_mode:
        return True
    tmp = os.path.join(os.path.dirname(path), f".gpuops-{os.getpid()}-{os.path.basename(path)}")
    try:
        _make_parents(path)
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, path)
        managed_file.sync_directory(os.path.dirname(path))
    except OSError as exc:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        _fail(module, path, exc)
    return True
