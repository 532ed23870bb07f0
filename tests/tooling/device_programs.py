"""Programs the device scripts and the slurm_22_05 lab run (tests only; the standard library alone).

    python3 device_programs.py crash DIR [--uid UID]   write DIR/<NAME>, an x86-64 ELF that segfaults in its own
                                                        file, and run it as UID (65534 by default) when given
    python3 device_programs.py write PATH               only write the program at PATH
    python3 device_programs.py load SECONDS             a bf16 matmul loop on GPU 0 (torch), when torch has CUDA

NAME is a driver message (``NVRM: Xid (PCI:0000:18:00): 79, ...``): the kernel's segfault line starts with the
task's first 15 characters and names the crashing file after " in ", which is how a job writes words of its choice
into the kernel log (issue 25).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

NAME = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus"
CODE = bytes.fromhex("c704250000000000000000")  # mov dword ptr [0], 0
BASE = 0x400000
HEADER_SIZE = 64 + 56  # ELF header, one program header


def write(path: str) -> None:
    size = HEADER_SIZE + len(CODE)
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, 0x3E, 1, BASE + HEADER_SIZE, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)
    with open(path, "wb") as out:
        out.write(header + program + CODE)
    os.chmod(path, 0o755)


def crash(directory: str, uid: int) -> int:
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    path = os.path.join(directory, NAME)
    write(path)

    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return subprocess.run([path], preexec_fn=drop, timeout=10, check=False).returncode


def load(seconds: float) -> None:
    import torch  # pylint: disable=import-error,import-outside-toplevel  # on the device only

    a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    end = time.time() + seconds
    while time.time() < end:
        for _round in range(50):
            _product = a @ b
        torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) == 2:
        write(argv[1])
        return 0
    if argv[:1] == ["crash"] and len(argv) in (2, 4):
        uid = int(argv[3]) if len(argv) == 4 and argv[2] == "--uid" else 65534
        print("rc %s" % crash(argv[1], uid))
        return 0
    if argv[:1] == ["load"] and len(argv) == 2:
        load(float(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
