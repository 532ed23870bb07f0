"""stack/peermem_build: nvidia-peermem's symbol versions against OFED's ib_core, on real kmod 30 output
(tests/fixtures/gpudirect/README.md), the DKMS module that rebuilds it from real dkms status captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import peermem_build

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GPUDIRECT = FIXTURES / "gpudirect"


def crcs(name):
    return peermem_build.parse_crcs((GPUDIRECT / name).read_text())


EXPORTS = crcs("kmod30-show-exports-ib_core-ofed.txt")


def test_parse_the_real_kmod_lines():
    assert EXPORTS == {
        "ib_register_peer_memory_client": 0x9C7D1E42,
        "ib_unregister_peer_memory_client": 0x5E6F7A8B,
        "ib_register_client": 0x0B7F5E1D,
    }
    with pytest.raises(ValueError, match="not a '0x<crc><TAB><symbol>' line"):
        peermem_build.parse_crcs("modprobe: FATAL: Module x not found.\n")


def test_a_module_built_against_the_installed_ofed_is_current():
    result = peermem_build.verdict(crcs("kmod30-show-modversions-peermem-same-ofed.txt"), EXPORTS, "p.ko", "c.ko")
    assert result == {"state": "current", "detail": "p.ko fits the installed OFED's c.ko"}


def test_another_ofed_is_stale_and_names_the_symbol_and_both_crcs():
    result = peermem_build.verdict(crcs("kmod30-show-modversions-peermem-other-ofed.txt"), EXPORTS, "p.ko", "c.ko")
    assert result["state"] == "stale"
    assert "ib_register_peer_memory_client 0x1a2b3c4d in the module, 0x9c7d1e42 in c.ko" in result["detail"]
    assert "ib_unregister_peer_memory_client" not in result["detail"]  # its CRC is the same


def test_built_before_ofed_is_stale():
    result = peermem_build.verdict(crcs("kmod30-show-modversions-peermem-without-ofed.txt"), EXPORTS)
    assert result["state"] == "stale"
    assert "built without the OFED peer-memory symbols" in result["detail"]


def test_an_inbox_ib_core_is_no_ofed_and_no_versions_is_unknown():
    inbox = {"ib_register_client": 0x0B7F5E1D}
    assert peermem_build.verdict(crcs("kmod30-show-modversions-peermem-same-ofed.txt"), inbox)["state"] == "no_ofed"
    assert peermem_build.verdict(None, EXPORTS)["state"] == "unknown"


def test_the_dkms_module_of_the_running_kernel():
    status = (FIXTURES / "dkms/dkms-3.0.10-all-installed.txt").read_text()
    assert peermem_build.dkms_owner(status, "6.1.0-28-amd64") == ("nvidia", "580.95.05")
    assert peermem_build.dkms_owner(status, "6.8.0-45-generic") is None  # precompiled: nothing to rebuild
    two = status + "nvidia-open/590.44.01, 6.1.0-28-amd64, x86_64: installed\n"
    with pytest.raises(ValueError, match="more than one NVIDIA driver module"):
        peermem_build.dkms_owner(two, "6.1.0-28-amd64")


def test_rebuild_builds_again_before_installing():
    argv = peermem_build.rebuild_argv("/usr/sbin/dkms", ("nvidia", "580.95.05"), "6.1.0-28-amd64")
    assert argv == [
        ["/usr/sbin/dkms", "build", "--force", "nvidia/580.95.05", "-k", "6.1.0-28-amd64"],
        ["/usr/sbin/dkms", "install", "--force", "nvidia/580.95.05", "-k", "6.1.0-28-amd64"],
    ]
    assert "dkms remove nvidia/580.95.05 -k 6.1.0-28-amd64" in peermem_build.rebuild_fix(
        ("nvidia", "580.95.05"), "6.1.0-28-amd64"
    )
