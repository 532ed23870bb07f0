"""The mirror check (module_utils/stack/mirror_check.py, plugins/filter/mirror_check.py) on recorded index excerpts.

Each repository below is a real excerpt from tests/fixtures/package_index/ (sources in its README.md) or a
capture of apt-cache policy in tests/fixtures/mirror_check/ (its README.md). The excerpts go through what
playbooks/mirror_check.yml runs: the plan, gpuops.cluster.gpu_stack_facts with option ``index`` (its
``main()``, answering apt-cache madison / dnf repoquery from the excerpt, apt-cache policy from the node's
capture and reading .repo files from tests/fixtures/os_repositories/), then the report filter.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import mirror_check as mirror_filters
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import mirror_check, os_repositories, package_index
from ansible_collections.gpuops.cluster.plugins.modules import gpu_stack_facts

from tests.unit.module_harness import AnsibleFailJson, unbounded

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
INDEX = FIXTURES / "package_index"
POLICY = FIXTURES / "mirror_check"
OS_REPOSITORIES = FIXTURES / "os_repositories"
UBUNTU2204 = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
UBUNTU2404_SBSA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
DEBIAN12 = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
RHEL9 = "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/"


# ---- the recorded excerpts, as the node's index tools would print them -------------------------------------------


def from_policy(name):
    """``apt-cache policy <package>`` (a fixture) -> ``{package: [(version, source)]}``, apt's order."""
    entries, package, version = {}, None, None
    for raw in (INDEX / name).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if re.match(r"^[a-z0-9][a-z0-9.+-]*:$", line):
            package = line[:-1]
        elif re.match(r"^(\*\*\* )?\d\S* -?\d+$", line):
            version = line.removeprefix("*** ").split()[0]
        elif line.endswith("Packages") and version and package:
            source = line.split()[1]
            if all(v != version for v, _s in entries.get(package, [])):
                entries.setdefault(package, []).append((version, source))
    return entries


def from_deb_names(name, source):
    """A listing of ``<package>_<version>_<arch>.deb`` names -> ``{package: [(version, source)]}``."""
    entries = {}
    for word in (INDEX / name).read_text(encoding="utf-8").split():
        package, version, _arch = word.removesuffix(".deb").split("_")
        entries.setdefault(package, []).append((version, source))
    return entries


def from_madison(name):
    """``apt-cache madison`` (a fixture; its ``.../`` URLs as published) -> ``{package: [(version, source)]}``."""
    text = (INDEX / name).read_text(encoding="utf-8")
    index = package_index.parse_apt_madison("\n".join(line for line in text.splitlines() if not line.startswith("$")))
    return {package: [(e["version"], e["source"]) for e in found] for package, found in index.items()}


def from_dnf_nevra(name, repoid):
    """``name-epoch:version-release.arch`` lines (dnf repoquery's default format) -> ``{package: [(evr, repoid)]}``."""
    entries = {}
    for line in (INDEX / name).read_text(encoding="utf-8").splitlines():
        found = re.match(r"^(\S+)-(\d+:\S+)\.(x86_64|noarch|aarch64)$", line.strip())
        if found:
            entries.setdefault(found[1], []).append((found[2], repoid))
    return entries


def madison_text(entries):
    return "".join(
        "%s | %s | %s Packages\n" % (package, version, source)
        for package, found in entries.items()
        for version, source in found
    )


def repoquery_text(entries):
    return "".join(
        "%s %s %s\n" % (package, version if ":" in version else "0:" + version, source)
        for package, found in entries.items()
        for version, source in found
    )


# ---- what the playbook runs ---------------------------------------------------------------------------------------


def stack(os_id, manager, packages, branch=None, exact=None, matrix_release=None, fabricmanager=False, pins=()):
    return {
        "os_id": os_id,
        "package_manager": manager,
        "repo_dist": os_id,
        "driver_version": matrix_release,
        "driver_request": {"branch": branch, "exact": exact, "floor": None, "skip": [], "upgrade": False},
        "kernel_modules": "open",
        "cuda_toolkit_version": None,
        "nccl_version": None,
        "dcgm": None,
        "fabricmanager": fabricmanager,
        "packages": [
            {"component": component, "name": name, "version": version, "follows_driver": follows}
            for component, name, version, follows in packages
        ],
        "pins": list(pins),
    }


def driver(name, version="0"):
    return ("driver", name, version, True)


def fabric(name, version="0"):
    return ("fabricmanager", name, version, True)


@pytest.fixture(name="read_on")
def fixture_read_on(harness, node, tmp_path):
    """``read_on(check, entries, installed=None, policy=None, repo_files=())``: gpu_stack_facts' ``main()`` with
    the check's options on a node whose index tool prints ``entries``, whose ``apt-cache policy`` prints
    ``policy`` and whose /etc/yum.repos.d holds ``repo_files`` (``(name, text)``); returns the ``gpu_stack`` fact
    (a str when the module failed)."""

    def read(check, entries, installed=None, policy=None, repo_files=()):
        apt = check["package_manager"] == "apt"
        node.binaries = {"dpkg-query", "apt-cache", "timeout"} if apt else {"rpm", "dnf", "timeout"}
        node.dpkg = {name: (version, "install ok installed") for name, version in (installed or {}).items()}
        fallback = node.answer

        def answer(args):
            args = unbounded(args)
            tool = args[0].rsplit("/", 1)[-1]
            if tool == "apt-cache" and args[1:] == ["policy"]:
                assert policy is not None, "the node's apt-cache policy was read: give the test its capture"
                return 0, policy, ""
            if tool == "apt-cache":
                assert args[1] == "madison"
                wanted = set(args[2:])
                return 0, madison_text({k: v for k, v in entries.items() if k in wanted}), ""
            if tool == "dnf" and args[1] == "repoquery":
                return 0, repoquery_text(entries), ""
            return fallback(args)

        harness.commands.fallback = answer
        repos_dir = tmp_path / ("yum.repos.d-%d" % len(list(tmp_path.iterdir())))
        repos_dir.mkdir()
        for name, text in repo_files:
            (repos_dir / name).write_text(text, encoding="utf-8")
        arguments = {
            "requested": check["request"],
            "index": dict(check["index"], repos_dir=str(repos_dir)),
            "kernel_modules": check["kernel_modules"],
            "nvswitch": check["fabricmanager"],
            "nvidia_smi": False,
            "package_manager": check["package_manager"],
        }
        try:
            return harness.run(gpu_stack_facts, arguments)["ansible_facts"]["gpu_stack"]
        except AnsibleFailJson as failed:
            return failed.result["msg"]

    return read


def hostvars_for(checks, reads, policies):
    """The hostvars the playbook's report reads: looped results registered as mirror_check_reads, apt-cache policy
    as mirror_check_sources."""
    hostvars = {}
    for check in checks:
        read = reads[check["number"]]
        result = {"item": check, "changed": False}
        if isinstance(read, str):
            result.update(failed=True, msg=read)
        else:
            result["ansible_facts"] = {"gpu_stack": read}
        values = hostvars.setdefault(check["node"], {"mirror_check_reads": {"results": []}})
        values["mirror_check_reads"]["results"].append(result)
        if check["node"] in policies:
            values["mirror_check_sources"] = {"stdout": policies[check["node"]], "rc": 0}
    return hostvars


def run_check(read_on, targets, entries, policy=None, installed=None, repo_files=()):
    """The playbook's path: plan, one read per check on its node (apt-cache policy prints ``policy`` there, for
    gpu_stack_facts and the playbook's own read alike), report. A target's ``settings`` are more hostvars."""
    hostvars = {
        host: dict(
            target.get("settings") or {},
            gpuops_resolved_stack=target["stack"],
            mirror_check_repository=target["repository"],
        )
        for host, target in targets.items()
    }
    checks = mirror_filters.mirror_check_plan(sorted(targets), hostvars)
    reads = {
        check["number"]: read_on(check, entries[check["group"]], installed, policy, repo_files) for check in checks
    }
    policies = {check["node"]: policy for check in checks if policy is not None}
    return checks, mirror_filters.mirror_check_report(checks, hostvars_for(checks, reads, policies))


def policy_listing(*urls):
    """apt-cache policy of a node with these flat repositories, in the layout of the recorded capture."""
    capture = (POLICY / "debian12-apt-cache-policy-flat-repo.txt").read_text(encoding="utf-8")
    recorded = "file:/work/main/.lab/repo/compute/cuda/repos/debian12/x86_64"
    block = next(line for line in capture.splitlines() if recorded in line)
    lines = capture.splitlines()
    at = lines.index(block)
    return "\n".join(lines[:at] + [block.replace(recorded, url.rstrip("/")) for url in urls] + lines[at + 2 :]) + "\n"


CONTRIB = (
    " 500 http://deb.debian.org/debian bookworm/contrib amd64 Packages\n"
    "     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=contrib,b=amd64\n"
    "     origin deb.debian.org\n"
)


def debian_node_policy(url, contrib=False):
    """apt-cache policy of a Debian 12 node with Debian's archive (bookworm main, the recorded lab capture in
    tests/fixtures/os_repositories/), NVIDIA's flat repository ``url`` and, with ``contrib``, bookworm/contrib."""
    debian = (OS_REPOSITORIES / "apt-cache-policy-debian12-lab-main-only.txt").read_text(encoding="utf-8")
    nvidia = policy_listing(url).split("Package files:\n", 1)[1].split("Pinned packages:", 1)[0]
    nvidia = nvidia.split("     release a=now\n", 1)[1]  # without the dpkg status, which the capture has
    return debian.replace("Pinned packages:", nvidia + (CONTRIB if contrib else "") + "Pinned packages:")


def rocky_repo(crb_enabled):
    """Rocky 9's rocky.repo as captured (crb enabled there), or with [crb] as Rocky ships it (enabled=0)."""
    repo = (OS_REPOSITORIES / "rocky9-rocky.repo").read_text(encoding="utf-8")
    if not crb_enabled:
        head, tail = repo.split("[crb]\n", 1)
        repo = head + "[crb]\n" + tail.replace("enabled=1", "enabled=0", 1)
    return ("rocky.repo", repo)


EPEL_REPO = ("epel.repo", (OS_REPOSITORIES / "epel-release-epel.repo").read_text(encoding="utf-8"))


# ---- tests --------------------------------------------------------------------------------------------------------


def test_apt_policy_sources_from_real_captures():
    mirror = (POLICY / "debian12-apt-cache-policy-debian-mirror.txt").read_text(encoding="utf-8")
    assert mirror_check.parse_apt_policy_sources(mirror) == [
        "http://deb.debian.org/debian-security",
        "http://deb.debian.org/debian",
    ]
    flat = (POLICY / "debian12-apt-cache-policy-flat-repo.txt").read_text(encoding="utf-8")
    assert mirror_check.parse_apt_policy_sources(flat) == [
        "file:/work/main/.lab/repo/compute/cuda/repos/debian12/x86_64"
    ]


def test_repository_url_follows_the_role_rule():
    resolved = {"repo_dist": "ubuntu2204"}
    assert mirror_filters.mirror_repository_url(resolved) == UBUNTU2204 + "/"
    assert mirror_filters.mirror_repository_url(resolved, "http://mirror/nvidia/") == "http://mirror/nvidia/"
    assert mirror_filters.mirror_repository_url(resolved, None, "http://mirror/cuda/repos/", "sbsa") == (
        "http://mirror/cuda/repos/ubuntu2204/sbsa/"
    )
    with pytest.raises(
        AnsibleFilterError, match=r"gpuops\.cluster\.mirror_repository_url: repository_url: give repo_url"
    ):
        mirror_filters.mirror_repository_url({}, "", "http://mirror", "x86_64")


def test_plan_reads_one_node_per_os_and_repository_and_each_distinct_stack():
    h100 = stack(
        "debian12", "apt", [driver("nvidia-driver"), fabric("nvidia-fabricmanager")], "580", fabricmanager=True
    )
    l40s = stack("debian12", "apt", [driver("nvidia-driver")], "580")
    jammy = stack("ubuntu2204", "apt", [driver("nvidia-driver-580-open")], "580")
    hostvars = {
        "gpu-b": {"gpuops_resolved_stack": l40s, "mirror_check_repository": DEBIAN12},
        "gpu-a": {"gpuops_resolved_stack": h100, "mirror_check_repository": DEBIAN12},
        "gpu-c": {"gpuops_resolved_stack": h100, "mirror_check_repository": DEBIAN12.rstrip("/")},
        "gpu-d": {"gpuops_resolved_stack": l40s, "mirror_check_repository": "http://mirror/debian12/x86_64/"},
        "jammy-1": {"gpuops_resolved_stack": jammy, "mirror_check_repository": UBUNTU2204 + "/"},
        "no-stack": {},
    }
    checks = mirror_filters.mirror_check_plan(sorted(hostvars), hostvars)
    assert [(c["group"], c["node"], c["hosts"]) for c in checks] == [
        ("debian12 http://mirror/debian12/x86_64/", "gpu-d", ["gpu-d"]),
        ("debian12 %s" % DEBIAN12, "gpu-a", ["gpu-a", "gpu-c"]),
        ("debian12 %s" % DEBIAN12, "gpu-a", ["gpu-b"]),
        ("ubuntu2204 %s/" % UBUNTU2204, "jammy-1", ["jammy-1"]),
    ]
    assert [c["number"] for c in checks] == [0, 1, 2, 3]
    assert checks[1]["group_hosts"] == ["gpu-a", "gpu-b", "gpu-c"]
    # the check asks for the newest release of the branch, as a rollout takes it
    assert checks[1]["index"]["driver"]["upgrade"] is True
    with pytest.raises(AnsibleFilterError, match="no host has gpuops_resolved_stack"):
        mirror_filters.mirror_check_plan(["no-stack"], hostvars)


def test_debian12_excerpt_resolves_the_branch_and_refuses_a_release_it_lacks(read_on):
    # apt-cache policy nvidia-driver on Debian 12 with NVIDIA's debian12/x86_64 repository (Debian revisions -1)
    entries = {"debian12 %s" % DEBIAN12: from_policy("debian12-apt-cache-policy-nvidia-driver.txt")}
    policy = debian_node_policy(DEBIAN12, contrib=True)  # Debian's archive with contrib: no OS repository note
    branch = {"n1": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550", matrix_release="550.54.15")}}
    branch["n1"]["repository"] = DEBIAN12
    _checks, result = run_check(read_on, branch, entries, policy)
    assert result["problems"] == []
    found = result["findings"][0]
    assert (found["driver_version"], found["packages"]) == ("550.90.07", ["nvidia-driver=550.90.07-1"])
    assert found["repositories"] == [DEBIAN12.rstrip("/")]
    assert found["notes"] == [
        "driver 550.90.07 is newer than any release the matrix lists for the branch (newest listed: 550.54.15)"
    ]
    assert "    nvidia-driver=550.90.07-1" in result["lines"]

    exact = {"n1": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550", exact="550.127.05")}}
    exact["n1"]["repository"] = DEBIAN12
    _checks, result = run_check(read_on, exact, entries, policy)
    assert result["failed"] is True
    assert result["problems"] == [
        "debian12 %s, driver 550.127.05, open modules, no Fabric Manager: nvidia-driver 550.127.05: the repository "
        "holds 560.28.03-1, 555.42.06-1, 555.42.02-1, 550.90.07-1, 550.54.15-1 and 3 older" % DEBIAN12
    ]
    assert any(line.startswith("    MISSING: nvidia-driver 550.127.05") for line in result["lines"])


def test_r580_across_the_revision_change_and_a_mirror_without_fabric_manager(read_on):
    # .deb names of cuda-drivers-580 in repos/ubuntu2404/sbsa: -0ubuntu1 up to 580.105.08, -1ubuntu1 from 580.126.09
    group = "ubuntu2404 %s" % UBUNTU2404_SBSA
    entries = {group: from_deb_names("ubuntu2404-sbsa-cuda-drivers-580-filenames.txt", UBUNTU2404_SBSA.rstrip("/"))}
    node = {"stack": stack("ubuntu2404", "apt", [driver("cuda-drivers-580")], "580", matrix_release="580.159.04")}
    node["repository"] = UBUNTU2404_SBSA
    _checks, result = run_check(
        read_on, {"gh200": node}, entries, policy_listing(UBUNTU2404_SBSA), {"cuda-drivers-580": "580.105.08-0ubuntu1"}
    )
    found = result["findings"][0]
    assert result["problems"] == []
    assert found["packages"] == ["cuda-drivers-580=580.159.04-1ubuntu1"]
    assert (
        "gh200 runs 580.105.08-0ubuntu1: site.yml keeps a running release of the branch, rolling_upgrade.yml moves "
        "to 580.159.04" in found["notes"]
    )

    # the same mirror asked for Fabric Manager (tied to the driver): it holds none, so the check fails
    with_fm = stack("ubuntu2404", "apt", [driver("cuda-drivers-580"), fabric("nvidia-fabricmanager")], "580")
    _checks, result = run_check(
        read_on,
        {"gh200": {"stack": dict(with_fm, fabricmanager=True), "repository": UBUNTU2404_SBSA}},
        entries,
        policy_listing(UBUNTU2404_SBSA),
    )
    assert result["failed"] is True
    assert result["findings"][0]["problems"] == ["nvidia-fabricmanager 580.159.04: the repository holds no version"]
    assert result["findings"][0]["packages"] == []


def test_r590_and_r595_revisions_from_the_madison_excerpt(read_on):
    # apt-cache madison nvidia-open on ubuntu2404/sbsa: 610.57.04-1ubuntu1, 595.91.07-1ubuntu1, 590.48.01-0ubuntu1
    entries = from_madison("ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt")
    source = entries["nvidia-open"][0][1]
    for branch, spec in (("590", "nvidia-open=590.48.01-0ubuntu1"), ("595", "nvidia-open=595.91.07-1ubuntu1")):
        node = {"stack": stack("ubuntu2404", "apt", [driver("nvidia-open")], branch), "repository": source}
        _checks, result = run_check(read_on, {"n": node}, {"ubuntu2404 %s" % source: entries}, policy_listing(source))
        assert result["findings"][0]["packages"] == [spec]
        assert result["problems"] == []


def test_fabric_manager_metapackage_excerpt_two_repositories(read_on):
    # apt-cache policy cuda-drivers-fabricmanager: each version listed by ubuntu2204 and ubuntu2004
    group = "ubuntu2204 %s/" % UBUNTU2204
    entries = {group: from_policy("ubuntu-apt-cache-policy-cuda-drivers-fabricmanager.txt")}
    node = {"stack": stack("ubuntu2204", "apt", [fabric("cuda-drivers-fabricmanager")], "535")}
    node["repository"] = UBUNTU2204 + "/"
    _checks, result = run_check(read_on, {"n": node}, entries, policy_listing(UBUNTU2204))
    assert result["findings"][0]["packages"] == ["cuda-drivers-fabricmanager=535.161.07-1"]
    assert result["findings"][0]["repositories"] == [UBUNTU2204]


def test_nccl_build_for_the_stack_cuda_from_the_policy_excerpt(read_on):
    # apt policy libnccl-dev on ubuntu2204: 2.28.9 built for CUDA 13.0 and 12.9 alike
    group = "ubuntu2204 %s/" % UBUNTU2204
    entries = {group: from_policy("ubuntu2204-apt-policy-libnccl-dev.txt")}
    nccl = ("nccl", "libnccl-dev", "2.28.9-*+cuda12.9", False)
    node = {"stack": stack("ubuntu2204", "apt", [nccl]), "repository": UBUNTU2204 + "/"}
    _checks, result = run_check(read_on, {"n": node}, entries, policy_listing(UBUNTU2204))
    assert result["findings"][0]["packages"] == ["libnccl-dev=2.28.9-1+cuda12.9"]


def test_rhel9_repoquery_excerpt_keeps_the_epoch(read_on):
    # dnf repoquery '*kmod*' and the "Matching drivers" list on RHEL 9 with cuda-rhel9-x86_64: epoch 3, -1.el9
    group = "rhel9 %s" % RHEL9
    entries = {group: from_dnf_nevra("rhel9-dnf-repoquery-kmod.txt", "cuda-rhel9-x86_64")}
    entries[group].update(from_dnf_nevra("rhel9-nvidia-driver-available.txt", "cuda-rhel9-x86_64"))
    packages = [driver("kmod-nvidia-open-dkms"), driver("nvidia-driver")]
    node = {"stack": stack("rhel9", "dnf", packages, "595", matrix_release="595.71.05"), "repository": RHEL9}
    # the node has EPEL and CRB enabled: no OS repository note either
    _checks, result = run_check(read_on, {"n": node}, entries, repo_files=[rocky_repo(True), EPEL_REPO])
    found = result["findings"][0]
    assert found["packages"] == ["kmod-nvidia-open-dkms-3:595.71.05-1.el9", "nvidia-driver-3:595.71.05-1.el9"]
    # dnf names repositories by id: no URL comparison, no "not configured" finding from apt-cache policy
    assert (found["problems"], found["notes"]) == ([], [])


def test_a_repository_that_is_not_configured_is_a_finding_and_nothing_is_added(read_on):
    # the node's apt knows only Debian's mirror (recorded apt-cache policy); the NVIDIA repository is not there
    mirror = (POLICY / "debian12-apt-cache-policy-debian-mirror.txt").read_text(encoding="utf-8")
    node = {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12}
    checks, result = run_check(read_on, {"n1": node}, {"debian12 %s" % DEBIAN12: {}}, mirror)
    assert result["failed"] is True
    problems = result["findings"][0]["problems"]
    assert len(problems) == 1
    assert problems[0].startswith(
        "the repository %s is not in n1's package lists (apt-cache policy lists http://deb.debian.org/debian-security, "
        "http://deb.debian.org/debian): it is not configured there" % DEBIAN12
    )
    assert "the mirror check configures nothing" in problems[0]
    assert problems[0].endswith("(the node's index lacks 1 of the requested packages)")
    assert result["problems"] == ["debian12 %s, %s: %s" % (DEBIAN12, checks[0]["label"], problems[0])]


def test_a_failed_or_unreachable_read_is_reported_not_skipped():
    check = mirror_check.plan(
        {"n1": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12}}
    )[0]
    hostvars = {"n1": {"mirror_check_reads": {"results": [{"item": check, "failed": True, "msg": "apt-cache: boom"}]}}}
    result = mirror_filters.mirror_check_report([check], hostvars)
    assert result["problems"] == [
        "debian12 %s, driver R550 (newest release of the branch), open modules, no Fabric Manager: n1 could not read "
        "its package index: apt-cache: boom" % DEBIAN12
    ]
    hostvars = {
        "n1": {"mirror_check_reads": {"results": [{"item": check, "unreachable": True, "msg": "ssh: timeout"}]}}
    }
    assert mirror_filters.mirror_check_report([check], hostvars)["problems"][0].endswith("unreachable: ssh: timeout")
    assert mirror_filters.mirror_check_report([check], {})["problems"][0].endswith("no result")


# ---- the OS repositories NVIDIA's packages depend on (index.os_repositories) ----------------------------------------

CONTRIB_NOTE = (
    "site.yml adds Debian's contrib component beside http://deb.debian.org/debian (bookworm): the mirror must carry "
    "contrib"
)
EPEL_FEDORA_NOTE = (
    "site.yml adds EPEL (dkms for kmod-nvidia-*-dkms) with Fedora's epel-release package "
    "(https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm): an air-gapped node needs "
    "nvidia_stack_epel_release_url set to the mirror's copy, whose repository file points to the mirror, and the "
    "mirror must carry EPEL 9"
)
CRB_NOTE = (
    "site.yml enables the disabled repository crb (CRB) with 'dnf config-manager --enable crb': the mirror it points "
    "to must carry it"
)


def test_plan_asks_each_group_once_for_its_os_repositories_with_the_hosts_settings():
    h100 = stack("debian12", "apt", [driver("nvidia-driver"), fabric("nvidia-fabricmanager")], "580")
    l40s = stack("debian12", "apt", [driver("nvidia-driver")], "580")
    rocky = stack("rhel9", "dnf", [driver("nvidia-driver")], "580")
    mirror_rpm = "http://mirror.example/epel/epel-release-latest-9.noarch.rpm"
    hostvars = {
        "gpu-a": {"gpuops_resolved_stack": dict(h100, fabricmanager=True), "mirror_check_repository": DEBIAN12},
        "gpu-b": {
            "gpuops_resolved_stack": l40s,
            "mirror_check_repository": DEBIAN12,
            "nvidia_stack_os_repositories_enabled": False,
        },
        "rocky-1": {
            "gpuops_resolved_stack": rocky,
            "mirror_check_repository": RHEL9,
            "nvidia_stack_epel_release_url": mirror_rpm,
        },
    }
    checks = mirror_filters.mirror_check_plan(sorted(hostvars), hostvars)
    # one read of the OS repositories per group: the group's first check asks, with the stack's os_id
    assert [(c["node"], c["index"].get("os_id")) for c in checks] == [
        ("gpu-a", "debian12"),
        ("gpu-a", None),
        ("rocky-1", "rhel9"),
    ]
    assert [c["os_repositories_disabled"] for c in checks] == [["gpu-b"], ["gpu-b"], []]
    # the role's default (empty: Fedora's package) where the host sets none
    assert [c["epel_release_url"] for c in checks] == ["", "", mirror_rpm]
    hostvars["gpu-b"]["nvidia_stack_os_repositories_enabled"] = "maybe"
    with pytest.raises(AnsibleFilterError, match="nvidia_stack_os_repositories_enabled of gpu-b is not a boolean"):
        mirror_filters.mirror_check_plan(sorted(hostvars), hostvars)


def test_a_debian_node_without_contrib_is_a_note_that_the_mirror_must_carry_it(read_on):
    # the recorded Debian 12 lab node (bookworm main only) with NVIDIA's repository: site.yml adds contrib itself
    entries = {"debian12 %s" % DEBIAN12: from_policy("debian12-apt-cache-policy-nvidia-driver.txt")}
    node = {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12}
    _checks, result = run_check(read_on, {"n1": node}, entries, debian_node_policy(DEBIAN12))
    assert result["failed"] is False
    assert result["findings"][0]["notes"] == [CONTRIB_NOTE]
    assert "    note: " + CONTRIB_NOTE in result["lines"]


def test_a_debian_node_with_no_debian_archive_fails_with_what_to_configure(read_on):
    # apt knows only NVIDIA's flat repository (the recorded capture): nothing to add contrib beside
    entries = {"debian12 %s" % DEBIAN12: from_policy("debian12-apt-cache-policy-nvidia-driver.txt")}
    node = {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12}
    checks, result = run_check(read_on, {"n1": node}, entries, policy_listing(DEBIAN12))
    problem = (
        "n1 lacks what NVIDIA's packages depend on, and site.yml cannot add it (Debian's contrib component: apt knows "
        "no Debian archive (origin Debian, component main) to add contrib to): configure the mirror's Debian archive "
        "with the components main and contrib on the group's nodes and check again"
    )
    assert result["findings"][0]["problems"] == [problem]
    assert result["findings"][0]["notes"] == []
    assert result["problems"] == ["debian12 %s, %s: %s" % (DEBIAN12, checks[0]["label"], problem)]
    assert "    MISSING: " + problem in result["lines"]


def test_hosts_that_may_not_add_os_repositories_fail_the_check_and_the_others_get_the_note(read_on):
    entries = {"debian12 %s" % DEBIAN12: from_policy("debian12-apt-cache-policy-nvidia-driver.txt")}
    off = {"nvidia_stack_os_repositories_enabled": False}
    targets = {
        "n1": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12},
        "n2": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "560"), "repository": DEBIAN12},
        "n3": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550"), "repository": DEBIAN12},
    }
    targets["n2"]["settings"] = off
    targets["n3"]["settings"] = off
    checks, result = run_check(read_on, targets, entries, debian_node_policy(DEBIAN12))
    problem = (
        "n1 lacks what NVIDIA's packages depend on (Debian's contrib component is not configured), and site.yml will "
        "not add it: nvidia_stack_os_repositories_enabled is false for n2, n3; add the component contrib to the "
        "entries of http://deb.debian.org/debian on those nodes, or set nvidia_stack_os_repositories_enabled: true"
    )
    first, second = result["findings"]
    assert first["problems"] == [problem]
    assert first["notes"] == ["for n1: " + CONTRIB_NOTE]
    # the group's second stack is read on the same node without asking again: nothing more about the OS
    assert "os_id" not in checks[1]["index"]
    assert (second["problems"], second["notes"]) == ([], [])
    assert result["problems"] == ["debian12 %s, %s: %s" % (DEBIAN12, checks[0]["label"], problem)]

    # every host of the group keeps it off: the problem alone
    targets["n1"]["settings"] = off
    _checks, result = run_check(read_on, targets, entries, debian_node_policy(DEBIAN12))
    assert result["findings"][0]["notes"] == []
    assert "nvidia_stack_os_repositories_enabled is false for n1, n2, n3;" in result["findings"][0]["problems"][0]


def test_rocky_without_epel_and_with_crb_off_gets_notes_for_what_site_yml_adds(read_on):
    # Rocky 9's rocky.repo as Rocky ships it ([crb] enabled=0), no EPEL: the role installs epel-release, enables crb
    group = "rhel9 %s" % RHEL9
    entries = {group: from_dnf_nevra("rhel9-nvidia-driver-available.txt", "cuda-rhel9-x86_64")}
    node = {"stack": stack("rhel9", "dnf", [driver("nvidia-driver")], "595"), "repository": RHEL9}
    _checks, result = run_check(read_on, {"r1": node}, entries, repo_files=[rocky_repo(False)])
    assert result["failed"] is False
    assert result["findings"][0]["notes"] == [EPEL_FEDORA_NOTE, CRB_NOTE]


def rhel_check(**target):
    """The plan's check of one Rocky 9 host r1 (``target``: os_repositories_enabled, epel_release_url)."""
    return mirror_check.plan(
        {"r1": dict(target, stack=stack("rhel9", "dnf", [driver("nvidia-driver")], "595"), repository=RHEL9)}
    )[0]


def rhel_read(*repo_files, os_repositories_read=True):
    """The gpu_stack fact of a node whose .repo files are ``repo_files``, as gpu_stack_facts builds it (x86_64)."""
    index = {"driver_version": "595.71.05", "packages": [], "repositories": ["cuda-rhel9-x86_64"], "problems": []}
    if os_repositories_read:
        found = os_repositories.missing("rhel9", repos=os_repositories.parse_repo_files(repo_files))
        index["os_repositories"] = {"missing": [dict(e, message=os_repositories.describe(e)) for e in found]}
    return {"index": index, "packages": {}}


def test_rhel_os_repositories_a_mirror_epel_release_no_crb_at_all_and_the_setting_off():
    mirror_rpm = "http://mirror.example/epel/epel-release-latest-9.noarch.rpm"
    found = mirror_check.finding(rhel_check(epel_release_url=mirror_rpm), rhel_read(rocky_repo(False)), None)
    assert found["notes"] == [
        "site.yml adds EPEL (dkms for kmod-nvidia-*-dkms) with the epel-release package from %s "
        "(nvidia_stack_epel_release_url): the mirror must carry EPEL 9, and the package's repository file must point "
        "to it" % mirror_rpm,
        CRB_NOTE,
    ]
    assert found["problems"] == []

    # EPEL there, no CRB repository at all (only epel.repo): nothing to enable, the check fails
    found = mirror_check.finding(rhel_check(), rhel_read(EPEL_REPO), None)
    assert found["notes"] == []
    assert found["problems"] == [
        "r1 lacks what NVIDIA's packages depend on, and site.yml cannot add it (CRB (CodeReady Linux Builder / "
        "PowerTools, which EPEL's packages need): no CRB repository is configured (crb, powertools or "
        "codeready-builder-for-rhel-9-x86_64-rpms)): configure the mirror's CRB repository on the group's nodes and "
        "check again"
    ]

    # the host keeps nvidia_stack_os_repositories_enabled off: what site.yml would enable is a problem
    found = mirror_check.finding(
        rhel_check(os_repositories_enabled=False), rhel_read(rocky_repo(False), EPEL_REPO), None
    )
    assert found["notes"] == []
    assert found["problems"] == [
        "r1 lacks what NVIDIA's packages depend on (CRB (CodeReady Linux Builder / PowerTools, which EPEL's packages "
        "need): repository crb is disabled), and site.yml will not add it: nvidia_stack_os_repositories_enabled is "
        "false for r1; enable crb on those nodes, or set nvidia_stack_os_repositories_enabled: true"
    ]


def test_nothing_missing_an_older_module_and_a_failed_read_add_no_os_repository_finding():
    check = rhel_check()
    for read in (rhel_read(rocky_repo(True), EPEL_REPO), rhel_read(os_repositories_read=False)):
        found = mirror_check.finding(check, read, None)
        assert (found["problems"], found["notes"]) == ([], [])
    assert mirror_check.finding(check, "unreachable: ssh: timeout", None)["problems"] == [
        "r1 could not read its package index: unreachable: ssh: timeout"
    ]
