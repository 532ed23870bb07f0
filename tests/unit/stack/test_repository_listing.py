"""Reading a repository's package listing (module_utils/stack/repository_listing.py), issue 27 item 4.

The apt cases read real excerpts (tests/fixtures/package_index/README.md gives each source). No primary.xml or
modules.yaml of NVIDIA's repositories was found to keep as a fixture: the rpm cases write one in createrepo_c's
primary.xml layout and in the modules.yaml layout of NVIDIA's genmodules.py (NVIDIA/yum-packaging-precompiled-kmod
at b20498c19ba7cde5ef9ad093bf1c7f8582e3b2f6), carrying the real package versions of rhel9-dnf-repoquery-kmod.txt.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import repository_listing
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.repository_listing import ListingError

LISTINGS = Path(__file__).resolve().parents[2] / "fixtures" / "package_index"
# The versions of rhel9-dnf-repoquery-kmod.txt (kmod-nvidia-open-dkms-3:595.45.04-1.el9.noarch ...).
RHEL9 = [("kmod-nvidia-open-dkms", "3", "595.45.04", "1.el9"), ("kmod-nvidia-open-dkms", "3", "595.71.05", "1.el9")]
RHEL9.append(("nvidia-kmod-common", "3", "595.71.05", "1.el9"))


def primary_xml(packages):
    body = "".join(
        '<package type="rpm"><name>%s</name><arch>noarch</arch><version epoch="%s" ver="%s" rel="%s"/>'
        '<location href="Packages/%s-%s-%s.noarch.rpm"/></package>\n' % (name, epoch, ver, rel, name, ver, rel)
        for name, epoch, ver, rel in packages
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<metadata xmlns="http://linux.duke.edu/metadata/common" '
        'xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="%d">\n%s</metadata>\n' % (len(packages), body)
    )


MODULES = """document: modulemd
version: 2
data:
    name: nvidia-driver
    stream: 595-open
    artifacts:
        rpms:
            - kmod-nvidia-open-dkms-3:595.71.05-1.el9.noarch
...
---
document: modulemd
version: 2
data:
    name: nvidia-driver
    stream: 595-dkms
...
---
document: modulemd-defaults
version: 1
data:
    module: nvidia-driver
    stream: latest-dkms
"""


def repository(root, primary_name="primary.xml.gz", modules=True):
    (root / "repodata").mkdir(parents=True)
    (root / "repodata" / primary_name).write_bytes(gzip.compress(primary_xml(RHEL9).encode()))
    data = '<data type="primary"><location href="repodata/%s"/></data>' % primary_name
    if modules:
        (root / "repodata" / "abc-modules.yaml.xz").write_bytes(lzma.compress(MODULES.encode()))
        data += '<data type="modules"><location href="repodata/abc-modules.yaml.xz"/></data>'
    (root / "repodata" / "repomd.xml").write_text(
        '<?xml version="1.0"?><repomd xmlns="http://linux.duke.edu/metadata/repo">%s</repomd>' % data
    )
    return root


def test_apt_packages_file_real_stanzas():
    listing = repository_listing.read_listing(LISTINGS / "debian12-non-free-packages-nvidia-driver.txt")
    assert listing["format"] == "apt Packages"
    assert {name: [e["version"] for e in entries] for name, entries in listing["index"].items()} == {
        "libcuda1": ["535.261.03-1"],
        "nvidia-driver": ["535.261.03-1"],
    }


def test_compressed_packages_in_a_flat_repository_directory(tmp_path):
    text = (LISTINGS / "debian12-backports-non-free-packages-nvidia-driver.txt").read_bytes()
    (tmp_path / "Packages.xz").write_bytes(lzma.compress(text))
    listing = repository_listing.read_listing(tmp_path)
    assert listing["index"]["nvidia-driver"][0]["version"] == "535.216.03-2~bpo12+1"
    assert listing["source"].endswith("Packages.xz")


def test_rpm_repodata_directory_reads_primary_and_module_streams(tmp_path):
    listing = repository_listing.read_listing(repository(tmp_path / "rhel9"))
    assert listing["format"] == "rpm repodata with modules.yaml"
    assert [e["version"] for e in listing["index"]["kmod-nvidia-open-dkms"]] == [
        "3:595.45.04-1.el9",
        "3:595.71.05-1.el9",
    ]
    assert listing["streams"] == ["nvidia-driver:595-open", "nvidia-driver:595-dkms"]


def unzstd(data, what):
    """What tools/matrix_gap.py passes: the zstd tool (tested there through the command)."""
    return subprocess.run(["zstd", "-d", "-c", "-q"], input=data, capture_output=True, check=True).stdout


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed")
def test_zstd_primary_given_alone_with_its_modules(tmp_path):
    done = subprocess.run(["zstd", "-q", "-c"], input=primary_xml(RHEL9).encode(), capture_output=True, check=True)
    (tmp_path / "primary.xml.zst").write_bytes(done.stdout)
    (tmp_path / "modules.yaml").write_text(MODULES)
    with pytest.raises(ListingError, match=r"primary\.xml\.zst is zstd-compressed: decompress it first"):
        repository_listing.read_listing(tmp_path / "primary.xml.zst")
    listing = repository_listing.read_listing(
        tmp_path / "primary.xml.zst", modules=tmp_path / "modules.yaml", unzstd=unzstd
    )
    assert listing["format"] == "rpm primary.xml"
    assert listing["index"]["nvidia-kmod-common"] == [
        {"version": "3:595.71.05-1.el9", "source": str(tmp_path / "primary.xml.zst")}
    ]
    assert listing["streams"] == ["nvidia-driver:595-dkms", "nvidia-driver:595-open"]


def test_pasted_outputs_are_recognised():
    madison = repository_listing.read_listing(LISTINGS / "ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt")
    assert madison["format"] == "apt-cache madison"  # the pasted "$ apt-cache madison ..." line is skipped
    policy = repository_listing.read_listing(LISTINGS / "ubuntu2204-apt-policy-libnccl-dev.txt")
    assert [e["version"] for e in policy["index"]["libnccl-dev"]][:2] == ["2.28.9-1+cuda13.0", "2.28.9-1+cuda12.9"]
    nevra = repository_listing.read_listing(LISTINGS / "rhel9-dnf-repoquery-kmod.txt")
    assert nevra["format"].startswith("dnf repoquery")
    assert [e["version"] for e in nevra["index"]["nvidia-kmod-common"]] == [
        "3:595.45.04-1.el9",
        "3:595.58.03-1.el9",
        "3:595.71.05-1.el9",
    ]


# ----------------------------------------------------------------------------- bad input: a clear error


def test_stanza_without_version_names_the_stanza(tmp_path):
    text = (LISTINGS / "debian12-non-free-packages-nvidia-driver.txt").read_text()
    bad = tmp_path / "Packages"
    bad.write_text(text.replace("Version: 535.261.03-1\n", "", 1))
    with pytest.raises(ListingError, match=r"stanza 1 has no Package: or no Version: field"):
        repository_listing.read_listing(bad)


def test_broken_primary_xml_is_not_valid_xml(tmp_path):
    bad = tmp_path / "primary.xml.gz"
    bad.write_bytes(gzip.compress(primary_xml(RHEL9)[:-30].encode()))
    with pytest.raises(ListingError, match=r"primary\.xml\.gz: not valid XML"):
        repository_listing.read_listing(bad)


def test_truncated_gzip_cannot_be_decompressed(tmp_path):
    bad = tmp_path / "Packages.gz"
    bad.write_bytes(gzip.compress(b"Package: x\nVersion: 1\n")[:12])
    with pytest.raises(ListingError, match="cannot decompress it"):
        repository_listing.read_listing(bad)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("hello\nworld\n", "unknown format"),
        ('<?xml version="1.0"?><repomd xmlns="http://linux.duke.edu/metadata/repo"/>', "give the repository directory"),
        ("<other/>", "not a primary.xml"),
    ],
)
def test_unknown_or_empty_listing(tmp_path, content, message):
    bad = tmp_path / "index"
    bad.write_text(content)
    with pytest.raises(ListingError, match=message):
        repository_listing.read_listing(bad)


def test_missing_path_and_directory_without_an_index(tmp_path):
    with pytest.raises(ListingError, match="no such file or directory"):
        repository_listing.read_listing(tmp_path / "absent")
    with pytest.raises(ListingError, match=r"without repodata/repomd\.xml or a Packages file"):
        repository_listing.read_listing(tmp_path)


def test_repomd_without_primary(tmp_path):
    (tmp_path / "repodata").mkdir()
    (tmp_path / "repodata" / "repomd.xml").write_text('<repomd xmlns="http://linux.duke.edu/metadata/repo"/>')
    with pytest.raises(ListingError, match="names no primary metadata"):
        repository_listing.read_listing(tmp_path)
