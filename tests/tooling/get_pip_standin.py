"""Offline stand-in for the get-pip.py script that ansible-test downloads.

ansible-test bootstraps pip into each sanity/units virtual environment by
running ``get-pip-<version>.py`` fetched from a host that is unreachable on
isolated build machines. This stand-in, installed by ``tests/tooling/sanity.sh``
into ansible-test's cache, does the same job with what is at hand: ``ensurepip``
from the interpreter, then ``pip install`` of the exact packages ansible-test
asked for, from the configured package index. ``ensurepip`` runs in a child
process so its ``PIP_CONFIG_FILE=/dev/null`` does not leak into the install
step, which needs the machine's pip configuration (index, certificates).
"""

import subprocess
import sys

# get-pip.py options that pip install itself does not know.
_GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    args = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
