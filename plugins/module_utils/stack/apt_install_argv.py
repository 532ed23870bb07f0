# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pin-free ``apt-get install`` argument list: apt resolving the target stack as its install will.

The nvidia_stack role asks apt twice about an install it has not made yet: pre-staging downloads the
target's packages into the archive cache (``download``), and check mode simulates the install the run
makes (``simulate``). Both must resolve the same install: the exact versions named, past the holds of
the running stack, with the node's own apt preferences (the running stack's pins) left out, so that
the answer is the target's and not the pinned old release's. Check mode has nothing to pin with
(``/nonexistent``); pre-staging points ``Dir::Etc::PreferencesParts`` at a directory holding the
target's pins, written where only that command reads them.
"""

from __future__ import annotations

ACTIONS = {
    # check mode: what the install would do, nothing downloaded or changed
    "simulate": ["--simulate", "--quiet"],
    # pre-staging: the packages into /var/cache/apt/archives, nothing installed
    "download": ["--download-only", "--yes", "--quiet"],
}
NO_PREFERENCES = "/nonexistent"


def apt_install_argv(
    specs, action, install_recommends=False, preferences_parts=NO_PREFERENCES, also=(), remove=()
) -> list[str]:
    """``apt-get install`` for ``specs`` (``name=version``), without the node's apt preferences.

    ``action``: ``simulate`` or ``download`` (:data:`ACTIONS`). ``preferences_parts``: the directory apt
    reads preferences from instead of ``/etc/apt/preferences.d``. ``also``: more specs that move with
    the install (what follows the driver); ``remove``: installed names the install removes (``name-``).
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    for name, values in (("specs", specs), ("also", also), ("remove", remove)):
        if isinstance(values, (str, bytes)) or not all(isinstance(v, str) and v for v in values):
            raise ValueError(f"{name} must be a list of package names or name=version specs, not {values!r}")
    if not specs:
        raise ValueError("specs is empty: there is nothing to install")
    return [
        "apt-get",
        "install",
        *ACTIONS[action],
        "--allow-downgrades",
        "--allow-change-held-packages",
        "-o",
        "Dir::Etc::Preferences=/dev/null",
        "-o",
        f"Dir::Etc::PreferencesParts={preferences_parts}",
        *([] if install_recommends else ["--no-install-recommends"]),
        *specs,
        *also,
        *(f"{name}-" for name in remove),
    ]
