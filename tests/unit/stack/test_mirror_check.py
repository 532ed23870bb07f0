"""The mirror check (module_utils/stack/mirror_check.py, plugins/filter/mirror_check.py) on recorded index excerpts.

Each repository below is a real excerpt from tests/fixtures/package_index/ (sources in its README.md) or a
capture of apt-cache policy in tests/fixtures/mirror_check/ (its README.md). The excerpts go through what
playbooks/mirror_check.yml runs: the plan, gpuops.cluster.gpu_stack_facts with option ``index`` (its
``main()``, answering apt-cache madison / dnf repoquery from the excerpt), then the report filter.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import mirror_check as mirror_filters
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import mirror_check, package_index
from ansible_collections.gpuops.cluster.plugins.modules import gpu_stack_facts

from tests.unit.module_harness import AnsibleFailJson

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
INDEX = FIXTURES / "package_index"
POLICY = FIXTURES / "mirror_check"
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
def fixture_read_on(harness, node):
    """``read_on(check, entries, installed=None)``: gpu_stack_facts' ``main()`` with the check's options on a
    node whose index tool prints ``entries``; returns the ``gpu_stack`` fact (a str when the module failed)."""

    def read(check, entries, installed=None):
        apt = check["package_manager"] == "apt"
        node.binaries = {"dpkg-query", "apt-cache", "timeout"} if apt else {"rpm", "dnf", "timeout"}
        node.dpkg = {name: (version, "install ok installed") for name, version in (installed or {}).items()}
        fallback = node.answer

        def answer(args):
            tool = args[0].rsplit("/", 1)[-1]
            if tool == "timeout":
                tool, args = args[2].rsplit("/", 1)[-1], args[2:]
            if tool == "apt-cache":
                assert args[1] == "madison"
                wanted = set(args[2:])
                return 0, madison_text({k: v for k, v in entries.items() if k in wanted}), ""
            if tool == "dnf" and args[1] == "repoquery":
                return 0, repoquery_text(entries), ""
            return fallback(args)

        harness.commands.fallback = answer
        arguments = {
            "requested": check["request"],
            "index": check["index"],
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


def run_check(read_on, targets, entries, policy=None, installed=None):
    """The playbook's path: plan, one read per check on its node, report."""
    hostvars = {
        host: {"gpuops_resolved_stack": target["stack"], "mirror_check_repository": target["repository"]}
        for host, target in targets.items()
    }
    checks = mirror_filters.mirror_check_plan(sorted(targets), hostvars)
    reads = {check["number"]: read_on(check, entries[check["group"]], installed) for check in checks}
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
    policy = policy_listing(DEBIAN12)
    branch = {"n1": {"stack": stack("debian12", "apt", [driver("nvidia-driver")], "550", matrix_release="550.54.15")}}
    branch["n1"]["repository"] = DEBIAN12
    _checks, result = run_check(read_on, branch, entries, policy)
    assert result["problems"] == []
    found = result["findings"][0]
    assert (found["driver_version"], found["packages"]) == ("550.90.07", ["nvidia-driver=550.90.07-1"])
    assert found["repositories"] == [DEBIAN12.rstrip("/")]
    assert (
        "driver 550.90.07 is newer than any release the matrix lists for the branch (newest listed: 550.54.15)"
        in (found["notes"])
    )
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
    _checks, result = run_check(read_on, {"n": node}, entries)
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
