"""os_repositories: the OS repositories NVIDIA's packages depend on, read from captured apt and dnf inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import os_repositories

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "os_repositories"


def text(name):
    return (FIXTURES / name).read_text()


def test_apt_policy_lists_each_package_file_with_origin_codename_and_component():
    entries = os_repositories.parse_apt_policy(text("apt-cache-policy-debian13-lab.txt"))
    assert entries == [
        {
            "url": "http://gpuops-repo/compute/cuda/repos/debian12/x86_64",
            "suite": "",
            "component": "",
            "origin": "gpuops lab",
            "codename": "gpuops-lab",
        },
        {
            "url": "http://deb.debian.org/debian",
            "suite": "trixie",
            "component": "main",
            "origin": "Debian",
            "codename": "trixie",
        },
    ]


@pytest.mark.parametrize(
    ("fixture", "suite"),
    [("apt-cache-policy-debian13-lab.txt", "trixie"), ("apt-cache-policy-debian12-lab-main-only.txt", "bookworm")],
)
def test_a_debian_node_without_contrib_gets_it_beside_its_own_archive(fixture, suite):
    entries = os_repositories.parse_apt_policy(text(fixture))
    assert os_repositories.missing("debian12", apt_entries=entries) == [
        {
            "id": "contrib",
            "kind": "apt",
            "name": "gpuops-debian-contrib",
            "uris": ["http://deb.debian.org/debian"],
            "suites": [suite],
            "components": ["contrib"],
            "signed_by": None,  # the keyring is given by the caller, which checks the node has it
        }
    ]
    keyring = os_repositories.DEBIAN_ARCHIVE_KEYRING
    found = os_repositories.missing("debian12", apt_entries=entries, keyring=keyring)
    assert found[0]["signed_by"] == keyring


def test_apt_sources_give_each_entry_its_signed_by_from_both_formats():
    sources = os_repositories.parse_apt_sources(
        [
            ("sources.list", text("sources.list-debian12-lab")),
            ("sources.list.d/debian.sources", text("debian.sources-debian12-image")),
        ]
    )
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert sources == [
        {"uris": ["http://deb.debian.org/debian"], "suites": ["bookworm"], "signed_by": None},
        {"uris": ["http://deb.debian.org/debian"], "suites": ["bookworm", "bookworm-updates"], "signed_by": keyring},
        {"uris": ["http://deb.debian.org/debian-security"], "suites": ["bookworm-security"], "signed_by": keyring},
    ]


def test_apt_sources_skip_disabled_stanzas_and_comments_and_keep_an_embedded_key_as_written():
    deb822 = (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
        "Signed-By: /etc/apt/keyrings/old.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF\n -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    one_line = (
        "# deb [signed-by=/nowhere.gpg] http://old.example/debian bookworm main\ndeb-src http://x.example/d sid main\n"
    )
    sources = os_repositories.parse_apt_sources([("m.sources", deb822), ("x.list", one_line)])
    assert sources == [
        {
            "uris": ["http://mirror.example/debian"],
            "suites": ["bookworm"],
            "signed_by": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF\n -----END PGP PUBLIC KEY BLOCK-----",
        },
        {"uris": ["http://x.example/d"], "suites": ["sid"], "signed_by": None},
    ]


def test_contrib_takes_the_signed_by_of_the_node_s_own_entry_for_its_archive_and_suite():
    # a local mirror signed with its own key: a contrib entry signed by the Debian keyring would make apt
    # stop with "Conflicting values set for option Signed-By" (reproduction: the fixtures' README)
    mirror = "http://mirror.example/debian"
    policy = text("apt-cache-policy-debian12-lab-main-only.txt").replace("http://deb.debian.org/debian", mirror)
    sources = os_repositories.parse_apt_sources(
        [("sources.list", "deb [arch=amd64 signed-by=/usr/share/keyrings/mirror.gpg] %s/ bookworm main\n" % mirror)]
    )
    found = os_repositories.missing(
        "debian12",
        apt_entries=os_repositories.parse_apt_policy(policy),
        keyring=os_repositories.DEBIAN_ARCHIVE_KEYRING,
        apt_sources=sources,
    )
    assert [(entry["uris"], entry["suites"], entry["signed_by"]) for entry in found] == [
        ([mirror], ["bookworm"], "/usr/share/keyrings/mirror.gpg")
    ]


def test_contrib_signed_by_the_debian_keyring_where_the_node_s_entry_sets_none():
    found = os_repositories.missing(
        "debian12",
        apt_entries=os_repositories.parse_apt_policy(text("apt-cache-policy-debian12-lab-main-only.txt")),
        keyring=os_repositories.DEBIAN_ARCHIVE_KEYRING,
        apt_sources=os_repositories.parse_apt_sources([("sources.list", text("sources.list-debian12-lab"))]),
    )
    assert [entry["signed_by"] for entry in found] == [os_repositories.DEBIAN_ARCHIVE_KEYRING]


def test_suites_of_one_archive_signed_differently_get_one_contrib_entry_each():
    policy = text("apt-cache-policy-debian12-lab-main-only.txt")
    extra = policy.replace("bookworm", "bookworm-updates")
    entries = os_repositories.parse_apt_policy(policy) + os_repositories.parse_apt_policy(extra)
    sources = os_repositories.parse_apt_sources(
        [("a.list", "deb [signed-by=/k/one.gpg] http://deb.debian.org/debian bookworm-updates main\n")]
    )
    found = os_repositories.missing("debian12", apt_entries=entries, keyring="/k/debian.gpg", apt_sources=sources)
    assert [(entry["name"], entry["suites"], entry["signed_by"]) for entry in found] == [
        ("gpuops-debian-contrib", ["bookworm"], "/k/debian.gpg"),
        ("gpuops-debian-contrib-2", ["bookworm-updates"], "/k/one.gpg"),
    ]


def test_a_debian_node_with_contrib_lacks_nothing_and_ubuntu_needs_nothing():
    policy = text("apt-cache-policy-debian12-lab-main-only.txt").replace(
        "Pinned packages:",
        " 500 http://deb.debian.org/debian bookworm/contrib amd64 Packages\n"
        "     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=contrib,b=amd64\n"
        "     origin deb.debian.org\nPinned packages:",
    )
    assert os_repositories.missing("debian12", apt_entries=os_repositories.parse_apt_policy(policy)) == []
    entries = os_repositories.parse_apt_policy(text("apt-cache-policy-debian12-lab-main-only.txt"))
    assert os_repositories.missing("ubuntu2204", apt_entries=entries) == []


def test_a_debian_node_with_no_debian_archive_is_told_what_is_absent():
    policy = text("apt-cache-policy-debian13-lab.txt")
    nvidia_only = policy.split(" 500 http://deb.debian.org")[0] + "Pinned packages:\n"
    found = os_repositories.missing("debian12", apt_entries=os_repositories.parse_apt_policy(nvidia_only))
    assert [entry["kind"] for entry in found] == ["absent"]
    assert os_repositories.describe(found[0]) == (
        "Debian's contrib component: apt knows no Debian archive (origin Debian, component main) to add contrib to"
    )


def test_apt_policy_in_another_language_is_refused():
    with pytest.raises(os_repositories.RepositoryReadError, match="C locale"):
        os_repositories.parse_apt_policy("Paketdateien:\n 100 /var/lib/dpkg/status\n")


def rocky(crb_enabled: bool):
    """Rocky 9's rocky.repo as captured (crb enabled there), or with [crb] as Rocky ships it (enabled=0)."""
    repo = text("rocky9-rocky.repo")
    if not crb_enabled:
        head, tail = repo.split("[crb]\n", 1)
        repo = head + "[crb]\n" + tail.replace("enabled=1", "enabled=0", 1)
    return ("rocky.repo", repo)


def test_repo_files_give_each_id_and_whether_it_is_enabled():
    repos = os_repositories.parse_repo_files([rocky(False), ("epel.repo", text("epel-release-epel.repo"))])
    assert repos["baseos"] is True
    assert repos["crb"] is False
    assert repos["crb-debuginfo"] is False
    assert repos["epel"] is True
    assert repos["epel-source"] is False


def test_rocky_with_crb_off_and_no_epel_gets_epel_added_and_crb_enabled_with_dnf():
    repos = os_repositories.parse_repo_files([rocky(False)])
    assert os_repositories.missing("rhel9", repos=repos) == [
        {
            "id": "epel",
            "kind": "dnf_repo",
            "name": "epel",
            "major": "9",
            "arch": "x86_64",
            "release_url": "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm",
            # imported before epel-release is installed: dnf checks the package against the keys rpm holds
            "key_url": "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9",
        },
        {"id": "crb", "kind": "dnf_enable", "repo_id": "crb", "tool": "dnf"},
    ]


def test_an_alma_8_node_without_epel_gets_the_key_of_its_own_major_release():
    (epel,) = [entry for entry in os_repositories.missing("rhel8", repos={"powertools": True}) if entry["id"] == "epel"]
    assert epel["key_url"] == "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-8"
    assert epel["release_url"] == "https://dl.fedoraproject.org/pub/epel/epel-release-latest-8.noarch.rpm"


def test_rocky_with_epel_and_crb_lacks_nothing():
    repos = os_repositories.parse_repo_files([rocky(True), ("epel.repo", text("epel-release-epel.repo"))])
    assert os_repositories.missing("rhel9", repos=repos) == []


def test_rhel_enables_codeready_builder_with_subscription_manager_and_a_disabled_epel_with_dnf():
    redhat = (
        "redhat.repo",
        "[codeready-builder-for-rhel-9-x86_64-rpms]\nenabled = 0\n\n"
        "[codeready-builder-for-rhel-9-x86_64-debug-rpms]\nenabled = 0\n",
    )
    epel = ("epel.repo", text("epel-release-epel.repo").replace("enabled=1", "enabled=0", 1))
    found = os_repositories.missing("rhel9", repos=os_repositories.parse_repo_files([redhat, epel]))
    assert found == [
        {"id": "epel", "kind": "dnf_enable", "repo_id": "epel", "tool": "dnf"},
        {
            "id": "crb",
            "kind": "dnf_enable",
            "repo_id": "codeready-builder-for-rhel-9-x86_64-rpms",
            "tool": "subscription-manager",
        },
    ]
    assert [os_repositories.describe(entry) for entry in found] == [
        "EPEL (dkms for kmod-nvidia-*-dkms): repository epel is disabled",
        "CRB (CodeReady Linux Builder / PowerTools, which EPEL's packages need): repository "
        "codeready-builder-for-rhel-9-x86_64-rpms is disabled",
    ]


def test_a_rhel_node_with_no_crb_at_all_is_told_what_to_configure():
    found = os_repositories.missing("rhel8", repos={"baseos": True, "epel": True})
    assert found == [
        {
            "id": "crb",
            "kind": "absent",
            "why": "no CRB repository is configured (crb, powertools or codeready-builder-for-rhel-8-x86_64-rpms)",
        }
    ]


def test_a_broken_repo_file_is_named():
    with pytest.raises(os_repositories.RepositoryReadError, match=r"cannot read bad\.repo"):
        os_repositories.parse_repo_files([("bad.repo", "enabled=1\n")])
