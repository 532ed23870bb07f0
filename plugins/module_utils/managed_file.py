"""Files the collection owns on a node: read them, and replace them atomically.

Every module that writes a file (a sysctl drop-in, /etc/default/grub, an apt
preferences file, a Prometheus textfile, ...) goes through ``write_atomic``:
a temporary file in the same directory, the final mode set on it, its content
flushed to the disk (fsync), then ``AnsibleModule.atomic_move`` so a reader never
sees half a file, and the directory flushed after the rename (``sync_directory``)
so a crash or a power cut right after leaves the old file or the new one, never
an empty one.
"""

from __future__ import annotations

import errno
import os
import tempfile

# What a filesystem that cannot flush a directory answers; the rename is then as durable as it can make it.
_NO_DIRECTORY_SYNC = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF)


def read_text(path, default=None):
    """The file's text, or ``default`` when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return default


def under(root, path):
    """``path`` inside another root (a chroot, or a test's fake tree): ``under('/tmp/r', '/etc/x')``."""
    return os.path.join(root, path.lstrip("/"))


def write_atomic(module, path, content, mode=0o644, create_parent=False):
    """Replace ``path`` with ``content`` atomically.

    ``mode=None`` keeps the mode of an existing file (0644 for a new one).
    ``create_parent`` makes a missing parent directory (0755); without it the
    caller is expected to have checked the directory and said what to do.
    """
    directory = os.path.dirname(path) or "."
    if create_parent and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    if mode is None:
        mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    replace_file(path, content, mode, module.atomic_move)


def sync_directory(directory):
    """Flush ``directory`` (a rename in it) to the disk; a filesystem that cannot flush a directory is let be."""
    fd = os.open(directory or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


def replace_file(path, content, mode=0o644, move=os.replace):
    """Write ``content`` to a temporary file beside ``path`` with ``mode``, flush it to the disk, ``move`` it over
    ``path``, then flush the directory.

    Modules pass ``AnsibleModule.atomic_move`` (SELinux contexts, ownership); the controller's own
    writers (the controller_report action) keep ``os.replace``.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gpuops-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        move(tmp, path)
        sync_directory(directory)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove(module, path, diff=None) -> bool:
    """Remove the managed file ``path`` if it exists (not in check mode); whether it did (or would). ``diff``, a list,
    receives the file's before/after."""
    before = read_text(path)
    if before is None:
        return False
    if diff is not None:
        diff.append(dict(before=before, after="", before_header=path, after_header=path))
    if not module.check_mode:
        os.unlink(path)
    return True
