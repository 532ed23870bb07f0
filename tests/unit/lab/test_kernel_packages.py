"""The lab's stand-in Debian kernels and the NVIDIA module's DKMS source (extensions/molecule/lab/packages/
kernel_packages.py, spec-debian12-kernel.yml): what the spec expands to, what each package places, and that the
stand-in module builds (and fails to build on the flagged headers) as dkms runs its MAKE."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ROOT / "extensions" / "molecule" / "lab" / "packages"


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, PACKAGES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_repo = load_module("build_repo")
kernel_packages = load_module("kernel_packages")


@pytest.fixture(name="kernel_spec")
def fixture_kernel_spec():
    spec = yaml.safe_load((PACKAGES / "spec-debian12-kernel.yml").read_text(encoding="utf-8"))
    return spec, build_repo.expand(spec)


def test_the_kernel_spec_has_debian_names_versions_and_metapackage_relations(kernel_spec):
    spec, packages = kernel_spec
    assert build_repo.dists(spec) == [{"path": "debian/bookworm-kernel"}]
    by_name = {(p["name"], p["version"]): p for p in packages}
    for abi, version in (("55", "6.1.192-1"), ("56", "6.1.192-2"), ("57", "6.1.192-3")):
        image = by_name[(f"linux-image-6.1.0-{abi}-amd64", version)]
        headers = by_name[(f"linux-headers-6.1.0-{abi}-amd64", version)]
        assert image["values"]["kver"] == headers["values"]["kver"] == f"6.1.0-{abi}-amd64"
    # the update the held metapackages offer is 6.1.0-56; none offers 6.1.0-57, on which the module does not build
    assert by_name[("linux-image-amd64", "6.1.192-2")]["depends"] == ["linux-image-6.1.0-56-amd64 (= 6.1.192-2)"]
    assert by_name[("linux-headers-amd64", "6.1.192-1")]["depends"] == ["linux-headers-6.1.0-55-amd64 (= 6.1.192-1)"]
    assert not any("6.1.0-57" in item for p in packages for item in p["depends"])
    assert by_name[("linux-headers-6.1.0-57-amd64", "6.1.192-3")]["contents"] == ["linux-headers-build-fails"]
    assert build_repo.resolver_check(spec, set()) == 0


def test_the_open_dkms_package_carries_the_dkms_source():
    spec = yaml.safe_load((PACKAGES / "spec.yml").read_text(encoding="utf-8"))
    open_dkms = [p for p in build_repo.expand(spec) if p["name"] == "nvidia-kernel-open-dkms"]
    assert open_dkms
    assert all(p["contents"] == ["kernel-open", "dkms-source"] for p in open_dkms)


def test_the_image_and_headers_place_what_dkms_and_the_health_check_read(tmp_path):
    kernel_packages.stage_image(tmp_path / "image", "6.1.0-56-amd64")
    kernel_packages.stage_headers(tmp_path / "headers", "6.1.0-56-amd64")
    image, headers = tmp_path / "image", tmp_path / "headers"
    assert (image / "boot/vmlinuz-6.1.0-56-amd64").is_file()
    assert (image / "boot/config-6.1.0-56-amd64").is_file()
    assert (image / "lib/modules/6.1.0-56-amd64/modules.builtin").is_file()
    postinst = (image / "DEBIAN/postinst").read_text(encoding="utf-8")
    assert "depmod $version" in postinst
    assert "run-parts --report --exit-on-error --arg=$version" in postinst
    assert "/etc/kernel/postinst.d" in postinst
    assert "/etc/kernel/prerm.d" in (image / "DEBIAN/prerm").read_text(encoding="utf-8")
    build = headers / "lib/modules/6.1.0-56-amd64/build"
    assert build.is_symlink()
    assert str(build.readlink()) == "/usr/src/linux-headers-6.1.0-56-amd64"
    assert (headers / "usr/src/linux-headers-6.1.0-56-amd64/include/generated/utsrelease.h").is_file()
    assert "/etc/kernel/header_postinst.d" in (headers / "DEBIAN/postinst").read_text(encoding="utf-8")
    assert not (headers / "usr/src/linux-headers-6.1.0-56-amd64/gpuops-lab-build-fails").exists()


def test_the_dkms_source_is_nvidia_at_the_driver_version_with_dh_dkms_scripts(tmp_path):
    kernel_packages.stage_dkms_source(tmp_path, "550.127.08")
    conf = (tmp_path / "usr/src/nvidia-550.127.08/dkms.conf").read_text(encoding="utf-8")
    assert 'PACKAGE_NAME="nvidia"' in conf
    assert 'PACKAGE_VERSION="550.127.08"' in conf
    assert "MAKE[0]=\"'make' KERNEL_UNAME=${kernelver} SYSSRC=${kernel_source_dir} modules\"" in conf
    assert 'BUILT_MODULE_NAME[0]="nvidia"' in conf
    assert 'DEST_MODULE_LOCATION[0]="/updates/dkms"' in conf
    postinst = (tmp_path / "DEBIAN/postinst").read_text(encoding="utf-8")
    assert '/usr/lib/dkms/common.postinst $DKMS_NAME $DKMS_VERSION /usr/share/$DKMS_PACKAGE_NAME "" $2' in postinst
    assert "dkms remove -m $DKMS_NAME -v $DKMS_VERSION --all" in (tmp_path / "DEBIAN/prerm").read_text(encoding="utf-8")


def make(source, headers, kver):
    """What dkms runs: CLEAN, then MAKE[0] in a copy of the source (its build directory)."""
    subprocess.run(["make", "clean"], cwd=source, check=True, capture_output=True)
    return subprocess.run(
        ["make", f"KERNEL_UNAME={kver}", f"SYSSRC={headers}", "modules"],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.skipif(not (shutil.which("make") and shutil.which("gcc")), reason="make and gcc (dkms depends on them)")
def test_the_stand_in_module_builds_and_fails_on_the_flagged_headers(tmp_path):
    kernel_packages.stage_dkms_source(tmp_path / "pkg", "550.127.08")
    kernel_packages.stage_headers(tmp_path / "ok", "6.1.0-56-amd64")
    kernel_packages.stage_headers(tmp_path / "bad", "6.1.0-57-amd64", build_fails=True)
    source = tmp_path / "pkg/usr/src/nvidia-550.127.08"

    built = make(source, tmp_path / "ok/usr/src/linux-headers-6.1.0-56-amd64", "6.1.0-56-amd64")
    assert built.returncode == 0, built.stderr
    module = (source / "nvidia.ko").read_bytes()
    assert module.startswith(b"\x7fELF")
    assert b"version=550.127.08\x00" in module
    assert b"license=NVIDIA\x00" in module

    failed = make(source, tmp_path / "bad/usr/src/linux-headers-6.1.0-57-amd64", "6.1.0-57-amd64")
    assert failed.returncode != 0
    assert "does not build against the headers of 6.1.0-57-amd64" in failed.stderr
    assert not (source / "nvidia.ko").exists()

    missing = make(source, tmp_path / "none", "6.1.0-58-amd64")
    assert missing.returncode != 0
    assert "no kernel headers" in missing.stderr
