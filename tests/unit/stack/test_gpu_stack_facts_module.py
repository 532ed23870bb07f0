"""gpu_stack_facts through its argument spec against a fake node."""

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning
from ansible_collections.gpuops.cluster.plugins.modules import gpu_stack_facts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stack"

REQUESTED = [
    {"name": "nvidia-driver-550", "version": "550.127.08-1", "component": "driver"},
    {"name": "nvidia-fabricmanager-550", "version": "550.127.08-1", "component": "fabricmanager"},
    {"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "component": "nccl", "spec": "libnccl2=2.21.5-1+cuda12.4"},
]


@pytest.fixture
def files(tmp_path):
    proc = tmp_path / "version"
    proc.write_text((FIXTURES / "proc_version_open.txt").read_text())
    pref = tmp_path / "gpuops-nvidia.pref"
    pref.write_text(apt_pinning.render_preferences(apt_pinning.normalize_pins([], REQUESTED)))
    blacklist = tmp_path / "51gpuops-nvidia-blacklist"
    blacklist.write_text(apt_pinning.render_unattended_blacklist([], ["nvidia-"]))
    return {
        "loaded_version_path": str(proc),
        "preferences_path": str(pref),
        "unattended_upgrades_path": str(blacklist),
        "versionlock_path": str(tmp_path / "versionlock.list"),
    }


@pytest.fixture
def converged(node):
    node.dpkg = {
        "nvidia-driver-550": ("550.127.08-1", "install ok installed"),
        "nvidia-fabricmanager-550": ("550.127.08-1", "install ok installed"),
        "libnccl2": ("2.21.5-1+cuda12.4", "install ok installed"),
    }
    node.held = {"nvidia-driver-550", "nvidia-fabricmanager-550", "libnccl2"}
    node.nvidia_smi = (0, (FIXTURES / "nvidia_smi_h100x8.csv").read_text(), "")
    node.lspci = (0, (FIXTURES / "lspci_hgx_h100.txt").read_text(), "")
    return node


def facts_of(result):
    assert result["changed"] is False
    return result["ansible_facts"]["gpu_stack"]


def test_converged_nvswitch_node(run_module, converged, files):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))
    assert facts["package_manager"] == "apt"
    assert facts["packages"]["nvidia-driver-550"] == {
        "installed": "550.127.08-1",
        "pinned": "550.127.08-1",
        "held": True,
        "blacklisted": True,
        "requested": "550.127.08-1",
        "component": "driver",
    }
    assert facts["packages"]["libnccl2"]["blacklisted"] is False
    assert facts["loaded"] == {"version": "550.127.08", "flavor": "open", "arch": "x86_64"}
    assert facts["nvml"]["driver_version"] == "550.127.08"
    assert len(facts["nvml"]["gpus"]) == 8
    assert facts["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert facts["nvswitch"]["present"] is True
    assert facts["nvswitch"]["source"] == "lspci"
    assert len(facts["nvswitch"]["devices"]) == 4
    assert facts["drift"]["drifted"] is False
    assert facts["reboot_required"] is False
    assert "loaded_reason" not in facts
    assert "nvml_reason" not in facts


def test_one_call_per_tool(run_module, converged, files):
    run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, packages=["cuda-toolkit-12-4"]))
    tools = [call[0].rsplit("/", 1)[-1] for call in converged.calls]
    assert tools == ["dpkg-query", "nvidia-smi", "lspci"]
    dpkg_call = converged.calls[0]
    assert dpkg_call[3:] == ["cuda-toolkit-12-4", "libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]


def test_check_mode_reads_the_same(run_module, converged, files):
    normal = run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED))
    checked = run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED), check=True)
    assert normal == checked


def test_upgraded_but_not_rebooted(run_module, converged, files):
    converged.dpkg["nvidia-driver-550"] = ("550.144.03-1", "install ok installed")
    requested = [dict(REQUESTED[0], version="550.144.03-1"), *REQUESTED[1:]]
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=requested)))
    assert facts["drift"]["installed_differs"] == []
    assert facts["drift"]["pin_missing"] == ["nvidia-driver-550"]
    assert facts["drift"]["loaded_differs"] is True
    assert facts["reboot_required"] is True


@pytest.mark.parametrize(("wanted", "reasons"), [("open", []), ("proprietary", ["loaded_flavor_differs"])])
def test_loaded_flavor_against_kernel_modules(run_module, converged, files, wanted, reasons):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, kernel_modules=wanted)))
    assert facts["loaded"]["flavor"] == "open"
    assert facts["drift"]["reboot_reasons"] == reasons
    assert facts["reboot_required"] is bool(reasons)


def test_missing_module_file_and_failing_nvidia_smi(run_module, converged, files, tmp_path):
    converged.nvidia_smi = (
        18,
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n",
        "",
    )
    args = dict(files, requested=REQUESTED, loaded_version_path=str(tmp_path / "absent"))
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    assert facts["loaded"] is None
    assert "does not exist" in facts["loaded_reason"]
    assert facts["nvml"] is None
    assert facts["nvml_reason"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert facts["gpu_models"] == []
    assert facts["reboot_required"] is True
    assert facts["drift"]["reboot_reasons"] == ["driver_not_loaded"]


def test_no_nvidia_smi_no_lspci(run_module, converged, files):
    converged.binaries = {"dpkg-query"}
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))
    assert facts["nvml"] is None
    assert "nvidia-smi not found" in facts["nvml_reason"]
    assert facts["nvswitch"] == {
        "present": None,
        "source": "unavailable",
        "devices": [],
        "reason": "lspci not found (pciutils)",
    }


def test_nvswitch_override_skips_lspci(run_module, converged, files):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, nvswitch=False)))
    assert facts["nvswitch"] == {"present": False, "source": "override", "devices": []}
    assert not any(call[0].endswith("lspci") for call in converged.calls)


def test_l40s_node_has_no_nvswitch(run_module, converged, files):
    converged.lspci = (0, (FIXTURES / "lspci_l40s.txt").read_text(), "")
    converged.nvidia_smi = (0, (FIXTURES / "nvidia_smi_l40s.csv").read_text(), "")
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))
    assert facts["nvswitch"]["present"] is False
    assert facts["gpu_models"] == ["NVIDIA L40S"]


def test_not_installed_and_unheld_packages_drift(run_module, converged, files):
    del converged.dpkg["libnccl2"]
    converged.held.discard("nvidia-fabricmanager-550")
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))
    assert facts["packages"]["libnccl2"]["installed"] is None
    assert facts["drift"]["installed_differs"] == [
        {"name": "libnccl2", "requested": "2.21.5-1+cuda12.4", "installed": None}
    ]
    # a package dpkg does not know cannot carry a hold either
    assert facts["drift"]["hold_missing"] == ["libnccl2", "nvidia-fabricmanager-550"]


def test_bad_pci_id_fails(run_module, converged, files):
    with pytest.raises(run_module.Fail, match="4-digit hex"):
        run_module(gpu_stack_facts.main, dict(files, nvswitch_pci_ids=["22a3x"]))


def test_dnf_node(run_module, node, files):
    node.binaries = {"rpm", "nvidia-smi", "lspci"}
    node.rpm = {"nvidia-driver": ("3", "550.127.08", "1.el9")}
    node.nvidia_smi = (0, (FIXTURES / "nvidia_smi_l40s.csv").read_text(), "")
    node.lspci = (0, "", "")
    Path(files["versionlock_path"]).write_text("nvidia-driver-3:550.127.08-1.el9.*\n")
    requested = [
        {"name": "nvidia-driver", "version": "550.127.08-1.el9", "component": "driver"},
        {"name": "nvidia-fabricmanager", "version": "550.127.08-1", "component": "fabricmanager"},
    ]
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=requested)))
    assert facts["package_manager"] == "dnf"
    assert facts["packages"]["nvidia-driver"]["installed"] == "3:550.127.08-1.el9"
    assert facts["packages"]["nvidia-driver"]["held"] is True
    assert facts["packages"]["nvidia-driver"]["blacklisted"] is None
    assert facts["packages"]["nvidia-fabricmanager"]["installed"] is None
    assert facts["drift"]["installed_differs"] == [
        {"name": "nvidia-fabricmanager", "requested": "550.127.08-1", "installed": None}
    ]
    assert facts["drift"]["pin_missing"] == ["nvidia-fabricmanager"]
    assert facts["drift"]["hold_missing"] == []
    assert facts["reboot_required"] is False


def test_services_are_read_with_one_systemctl_call(run_module, converged, files):
    converged.binaries.add("systemctl")
    converged.units = {"nvidia-persistenced": ("active", "enabled"), "nvidia-fabricmanager": ("failed", "enabled")}
    names = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"]
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, services=names)))
    assert facts["services"] == {
        "nvidia-persistenced": {"active": True, "enabled": True},
        "nvidia-fabricmanager": {"active": False, "enabled": True},
        "nvidia-dcgm": {"active": False, "enabled": False},
    }
    assert [call for call in converged.calls if call[0].endswith("systemctl")] == [
        ["/usr/bin/systemctl", "show", "--property=Id,ActiveState,UnitFileState", "--", *names]
    ]


def test_no_services_asked_or_no_systemctl_no_call(run_module, converged, files):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, services=["nvidia-dcgm"])))
    assert facts["services"] == {}
    converged.binaries.add("systemctl")
    assert facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))["services"] == {}
    assert not [call for call in converged.calls if call[0].endswith("systemctl")]


# ---------------------------------------------------------------- OS repositories (index.os_id)

OS_REPOSITORIES = Path(__file__).resolve().parents[2] / "fixtures" / "os_repositories"
INDEX = {"driver": {"branch": "550", "exact": None, "floor": None, "skip": [], "upgrade": False}, "pins": []}


def test_a_debian_node_without_contrib_is_reported_from_one_apt_cache_policy_call(
    run_module, converged, files, tmp_path
):
    converged.binaries.add("apt-cache")
    converged.madison = "nvidia-driver-550 | 550.127.08-1 | http://gpuops-repo/debian12/x86_64  Packages\n"
    converged.policy = (OS_REPOSITORIES / "apt-cache-policy-debian12-lab-main-only.txt").read_text()
    args = dict(files, requested=REQUESTED[:1], index=dict(INDEX, os_id="debian12", apt_dir=str(tmp_path / "apt")))
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    missing = facts["index"]["os_repositories"]["missing"]
    assert [(entry["id"], entry["kind"], entry["uris"], entry["suites"]) for entry in missing] == [
        ("contrib", "apt", ["http://deb.debian.org/debian"], ["bookworm"])
    ]
    assert [call[1:] for call in converged.calls if call[0].endswith("apt-cache")] == [
        ["madison", "nvidia-driver-550"],
        ["policy"],
    ]


def test_contrib_is_signed_as_the_node_s_own_entry_for_its_archive(run_module, converged, files, tmp_path):
    converged.binaries.add("apt-cache")
    converged.madison = "nvidia-driver-550 | 550.127.08-1 | http://gpuops-repo/debian12/x86_64  Packages\n"
    converged.policy = (OS_REPOSITORIES / "apt-cache-policy-debian12-lab-main-only.txt").read_text()
    parts = tmp_path / "apt" / "sources.list.d"
    parts.mkdir(parents=True)
    image = (OS_REPOSITORIES / "debian.sources-debian12-image").read_text()
    # the image's stanzas, signed by a site keyring instead of Debian's (a mirror re-signed with its own key)
    (parts / "debian.sources").write_text(image.replace("debian-archive-keyring.gpg", "site-mirror.gpg"))
    disabled = "deb [signed-by=/wrong.gpg] http://deb.debian.org/debian bookworm main\n"
    (parts / "other.list.disabled").write_text(disabled)  # apt reads only .list and .sources
    args = dict(files, requested=REQUESTED[:1], index=dict(INDEX, os_id="debian12", apt_dir=str(tmp_path / "apt")))
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    assert [entry["signed_by"] for entry in facts["index"]["os_repositories"]["missing"]] == [
        "/usr/share/keyrings/site-mirror.gpg"
    ]


def test_an_ubuntu_node_reads_no_sources(run_module, converged, files):
    converged.binaries.add("apt-cache")
    converged.madison = "nvidia-driver-550 | 550.127.08-1 | http://gpuops-repo/x  Packages\n"
    args = dict(files, requested=REQUESTED[:1], index=dict(INDEX, os_id="ubuntu2204"))
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    assert facts["index"]["os_repositories"] == {"missing": []}
    assert not any(call[1:] == ["policy"] for call in converged.calls)


def test_a_rocky_node_reads_its_repo_files(run_module, node, files, tmp_path):
    node.binaries = {"rpm", "dnf"}
    node.rpm = {"nvidia-driver": ("3", "550.127.08", "1.el9")}
    repos = tmp_path / "yum.repos.d"
    repos.mkdir()
    (repos / "rocky.repo").write_text((OS_REPOSITORIES / "rocky9-rocky.repo").read_text())
    node.repoquery = "nvidia-driver 3:550.127.08-1.el9 cuda-rhel9-x86_64\n"
    requested = [{"name": "nvidia-driver", "version": "550.127.08", "component": "driver"}]
    args = dict(files, requested=requested, index=dict(INDEX, os_id="rhel9", repos_dir=str(repos)))
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    assert [entry["id"] for entry in facts["index"]["os_repositories"]["missing"]] == ["epel"]


# ---------------------------------------------------------------- the plan (wanted_services)

WANTED_SERVICES = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"]


def test_the_plan_starts_the_wanted_services_not_running_from_the_same_systemctl_call(run_module, converged, files):
    converged.binaries.add("systemctl")
    converged.units = {
        "nvidia-persistenced": ("active", "enabled"),
        "nvidia-fabricmanager": ("failed", "enabled"),
        "nvidia-dcgm": ("active", "enabled"),
    }
    args = dict(files, requested=REQUESTED, services=["nvidia-dcgm"], wanted_services=WANTED_SERVICES)
    facts = facts_of(run_module(gpu_stack_facts.main, args))
    assert facts["plan"] == {
        "move": [],
        "reboot_reasons": [],
        "start": ["nvidia-fabricmanager"],
        "load": True,
        "dkms": False,
        "kernel_headers": False,
    }
    assert [call[4:] for call in converged.calls if call[0].endswith("systemctl")] == [
        ["nvidia-dcgm", "nvidia-persistenced", "nvidia-fabricmanager"]
    ]


def test_a_converged_node_plans_nothing(run_module, converged, files):
    converged.binaries.add("systemctl")
    converged.units = {name: ("active", "enabled") for name in WANTED_SERVICES}
    facts = facts_of(
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, wanted_services=WANTED_SERVICES))
    )
    assert facts["plan"] == {
        "move": [],
        "reboot_reasons": [],
        "start": [],
        "load": False,
        "dkms": False,
        "kernel_headers": False,
    }


def test_the_plan_moves_what_differs_and_restarts_every_wanted_service(run_module, converged, files):
    converged.binaries.add("systemctl")
    converged.units = {name: ("active", "enabled") for name in WANTED_SERVICES}
    converged.dpkg["nvidia-driver-550"] = ("550.90.07-1", "install ok installed")
    facts = facts_of(
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, wanted_services=WANTED_SERVICES))
    )
    assert facts["plan"]["move"] == ["nvidia-driver-550"]
    assert facts["plan"]["reboot_reasons"] == facts["drift"]["reboot_reasons"] == ["loaded_differs_from_installed"]
    assert facts["plan"]["start"] == WANTED_SERVICES
    assert facts["plan"]["load"] is True


def test_without_wanted_services_the_plan_starts_none(run_module, converged, files):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED)))
    assert facts["plan"] == {
        "move": [],
        "reboot_reasons": [],
        "start": [],
        "load": False,
        "dkms": False,
        "kernel_headers": False,
    }


def test_every_command_runs_under_timeout_nvidia_smi_included(run_module, converged, files, harness):
    converged.binaries.add("systemctl")
    args = dict(files, requested=REQUESTED, services=["nvidia-persistenced"], command_timeout=20)
    run_module(gpu_stack_facts.main, args)
    bounds = {call[4].rsplit("/", 1)[-1]: call[:4] for call in harness.commands.calls}
    assert sorted(bounds) == ["dpkg-query", "lspci", "nvidia-smi", "systemctl"]
    assert all(bound == ["/usr/bin/timeout", "-k", "5", "20"] for bound in bounds.values())


@pytest.mark.parametrize("rc", [124, 137])
def test_a_hung_nvidia_smi_fails_the_read_instead_of_reporting_no_gpus(run_module, converged, files, rc):
    converged.nvidia_smi = (rc, "", "")
    with pytest.raises(run_module.Fail) as failed:
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED))
    result = failed.value.result
    assert result["msg"] == (
        "could not read the GPUs with nvidia-smi --query-gpu: /usr/bin/nvidia-smi did not finish in 60 s and was "
        "stopped. a GPU or the driver may be hung: run nvidia-smi on the node, and drain or reboot it"
    )
    assert result["timed_out"] is True
    assert result["cmd"][:4] == ["/usr/bin/timeout", "-k", "5", "60"]


def test_a_hung_package_query_fails_naming_it(run_module, converged, files):
    converged.fail["dpkg-query -W"] = (124, "", "")
    with pytest.raises(run_module.Fail, match="could not read the installed packages: /usr/bin/dpkg-query did not"):
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED))


def test_command_timeout_below_one_second_is_refused(run_module, converged, files):
    with pytest.raises(run_module.Fail, match=r"command_timeout and index\.timeout must be at least 1 second"):
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, command_timeout=0))


TOOLKIT = {"name": "nvidia-container-toolkit", "version": "1.20.0-1", "component": "container_toolkit"}


@pytest.mark.parametrize(("runtime_found", "toolkit_read"), [(False, False), (True, True)])
def test_auto_toolkit_is_read_only_where_a_container_runtime_is(
    run_module, converged, files, monkeypatch, runtime_found, toolkit_read
):
    real_exists = gpu_stack_facts.os.path.exists
    monkeypatch.setattr(
        gpu_stack_facts.os.path,
        "exists",
        lambda path: (
            (runtime_found and path == "/usr/bin/containerd")
            or (path != "/usr/bin/containerd" and not path.startswith("/usr/") and real_exists(path))
        ),
    )
    params = dict(files, requested=[*REQUESTED, TOOLKIT], container_toolkit_auto=True)
    facts = facts_of(run_module(gpu_stack_facts.main, params))
    assert ("nvidia-container-toolkit" in facts["packages"]) is toolkit_read
    assert facts["container_runtimes"] == (["containerd"] if runtime_found else [])
    dpkg_names = converged.calls[0][3:]
    assert ("nvidia-container-toolkit" in dpkg_names) is toolkit_read


# ---------------------------------------------- what a pass reads from its first read (issue 26 item 8)
DKMS = {"name": "nvidia-dkms-550", "version": "550.127.08-1", "component": "driver"}


def test_the_first_read_of_a_pass_is_kept_as_gpu_stack_before(run_module, converged, files):
    first = run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, before=True))
    assert first["ansible_facts"]["gpu_stack_before"] == first["ansible_facts"]["gpu_stack"]
    later = run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED))
    assert "gpu_stack_before" not in later["ansible_facts"], "a later read leaves the pass's first read alone"


@pytest.mark.parametrize(
    ("setting", "requested", "wanted"),
    [
        ("auto", REQUESTED, False),
        ("auto", [*REQUESTED, DKMS], True),
        (True, REQUESTED, True),
        ("false", [*REQUESTED, DKMS], False),
    ],
)
def test_the_plan_says_whether_the_kernel_headers_are_installed(
    run_module, converged, files, setting, requested, wanted
):
    facts = facts_of(run_module(gpu_stack_facts.main, dict(files, requested=requested, kernel_headers=setting)))
    assert facts["plan"]["kernel_headers"] is wanted
    assert facts["plan"]["dkms"] is (DKMS in requested)


def test_a_wrong_kernel_headers_setting_fails_with_the_fix(run_module, converged, files):
    with pytest.raises(run_module.Fail, match=r"kernel_headers: .* set it to true, false or auto"):
        run_module(gpu_stack_facts.main, dict(files, requested=REQUESTED, kernel_headers="sometimes"))
