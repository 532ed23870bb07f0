#!/usr/bin/env python3
"""Build the lab's signed stand-in NVIDIA apt repositories from spec*.yml (lab only).

Each spec (spec.yml: Debian 12; spec-ubuntu2204.yml: Ubuntu 22.04) gives one or more flat repositories; a spec with
``format: rpm`` (spec-rhel9.yml) gives dnf repositories, built by build_rpm_repo.py.
Writes, under STATE (the repository's git-ignored .lab/ folder):
  repo/<path>/            flat repository: *.deb, Packages(.gz), Release, InRelease, Release.gpg; left
                          untouched when its packages come out the same (the .debs are reproducible), so
                          nodes reading another repository while this runs see no change
  repo/keys/gpuops-lab-archive-keyring.gpg   binary public keyring for `signed-by`
  repo/keys/gpuops-lab-archive-keyring.asc   the same, armored
  repo/keys/gpuops-lab-wrong-keyring.gpg     a different key, for "wrong key" tests
  repo/gpuops-lab-archive-keyring.gpg        copy of the binary keyring (lab-prepare's stamp)
  gnupg/, gnupg-wrong/    throwaway signing keys (generated once, batch mode)

Usage: build_repo.py --state .lab [--spec FILE ...] [--no-resolver-check]
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from email.utils import formatdate
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
SIMULATOR = HERE.parent / "nvidia-smi" / "nvidia_smi_sim.py"
SIMULATOR_MIG = HERE.parent / "nvidia-smi" / "nvidia_smi_mig.py"  # imported by the simulator
DCGMI = HERE.parent / "gpu-tools" / "dcgmi_sim.py"
EXPORTER = HERE.parent / "dcgm-exporter" / "dcgm_exporter_sim.py"
NVIDIA_CTK = HERE.parent / "nvidia-ctk" / "nvidia_ctk_sim.py"
# The Container Toolkit's CDI refresh units as the stand-in nvidia-container-toolkit ships them: the names, the
# directory and the ExecStart, Environment and [Install] of NVIDIA/nvidia-container-toolkit deployments/systemd at
# v1.20.0 (packaging/debian/nvidia-container-toolkit.install: /lib/systemd/system/). Without the real ExecCondition
# (it greps the running kernel's modules.dep for nvidia.ko, which a lab container does not have) and the
# nvidia-smi -L step, so that the lab's boot regenerates the specification from the simulated GPUs.
CDI_REFRESH_SERVICE = """[Unit]
Description=Refresh NVIDIA CDI specification file (gpuops lab stand-in)
ConditionPathExists=/usr/bin/nvidia-ctk

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
ExecStart=/usr/bin/nvidia-ctk cdi generate

[Install]
WantedBy=multi-user.target
"""
CDI_REFRESH_PATH = """[Unit]
Description=Trigger CDI refresh on NVIDIA driver or toolkit install / upgrade events (gpuops lab stand-in)

[Path]
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
"""
KEY_UID = "gpuops lab stand-in NVIDIA repository <lab@gpuops.invalid>"
RESOLVER = "ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver"
WRONG_KEY_UID = "gpuops lab WRONG key <wrong@gpuops.invalid>"
# Every file in the .debs gets this time (SOURCE_DATE_EPOCH), so a rebuild gives the same bytes.
BUILD_EPOCH = "1764547200"

# A stand-in daemon: writes a ready file while it runs, removes it when stopped.
# Lab hook: while /run/gpuops-lab/fail-start/<unit> exists, every start of the unit fails (exit 1) with the
# file's text, or the daemon's own failure (``start_failure``), on stderr (the unit's journal). The unit runs
# the script with ``start-hook`` as ExecStartPre, so `systemctl start` fails as it does for the real
# nvidia-persistenced (Type=forking: the start waits for its initialization), where a Type=simple start
# would return before the daemon could fail. /run is a tmpfs: a reboot of the node (a restart of its
# container) removes the flag.
DAEMON = """#!/bin/sh
# gpuops lab stand-in for {name} (does nothing but stay up).
set -e
fail=/run/gpuops-lab/fail-start/{unit}
if [ -e "$fail" ]; then
    if [ -s "$fail" ]; then cat "$fail" >&2; else echo "{start_failure}" >&2; fi
    echo "{name}: gpuops lab: failing while $fail exists (a reboot removes it)" >&2
    exit 1
fi
if [ "$1" = start-hook ]; then exit 0; fi
{precheck}
mkdir -p /run/gpuops-lab
ready=/run/gpuops-lab/{ready}
trap 'rm -f "$ready"; exit 0' TERM INT
echo $$ > "$ready"
echo "{name} (gpuops lab stand-in {version}) running"
while :; do sleep 3600 & wait $!; done
"""

# Fabric Manager refuses to start without NVSwitches or with a driver of another version.
FM_PRECHECK = """/usr/bin/nvidia-smi -L >/dev/null 2>&1 || true
if ! grep -q '"nvswitch": *true' /etc/gpuops-lab/gpus.json 2>/dev/null; then
    echo "nv-fabricmanager: no NVSwitch devices found (gpuops lab stand-in)" >&2; exit 1
fi
loaded=$(sed -n 's/^NVRM version:.*  \\([0-9][0-9.]*\\)  .*/\\1/p' /run/gpuops-lab/nvidia-version 2>/dev/null)
if [ "$loaded" != "{driver}" ]; then
    echo "nv-fabricmanager: fabric manager version {driver} does not match the loaded driver '$loaded'" >&2; exit 1
fi"""

UNIT = """[Unit]
Description={description}
{after}
[Service]
Type=simple
# The lab hook (DAEMON): a start fails while /run/gpuops-lab/fail-start/<this unit> exists.
ExecStartPre={exec_start} start-hook
ExecStart={exec_start}
# The daemon removes its ready file on SIGTERM; a stop that times out kills it first, so the
# ready file (what the simulated nvidia-smi reads) also goes after every stop.
ExecStopPost=/bin/rm -f /run/gpuops-lab/{ready}
TimeoutStopSec=5

[Install]
WantedBy=multi-user.target
"""

# The unit datacenter-gpu-manager-exporter installs (NVIDIA/dcgm-exporter tag 4.5.3-4.8.2,
# packaging/config-files/systemd/nvidia-dcgm-exporter.service), with its ExecStart, dependencies and restart policy.
EXPORTER_UNIT = """[Unit]
Description=NVIDIA DCGM-exporter service (gpuops lab stand-in)
Wants=nvidia-dcgm.service
After=nvidia-dcgm.service

[Service]
User=root
PrivateTmp=false

StandardOutput=append:/var/log/dcgm-exporter.log
StandardError=append:/var/log/dcgm-exporter.log

ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv

Restart=on-abort

[Install]
WantedBy=multi-user.target
"""
# The stand-in's collectors file: the fields of dcgm-exporter's etc/default-counters.csv the lab can feed, in its
# "field, type, help" format.
EXPORTER_COUNTERS = """# Format
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_FB_USED,     gauge, Framebuffer memory used (in MiB).
"""

MAINTSCRIPT = """#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    {stop}systemctl daemon-reload >/dev/null 2>&1 || true
fi
"""


def fill(text: str, values: dict) -> str:
    return text.format(**values) if values else text


def _templates(spec: dict, release: dict) -> list[dict]:
    """The driver package templates of one release: a list for every release, or a named set (``packages``)."""
    templates = spec["driver_packages"]
    if isinstance(templates, dict):
        return templates[release["packages"]]
    return templates


def expand(spec: dict) -> list[dict]:
    """Every package to build: name, version, description, relations, contents, placeholder values.

    A release's driver packages are at ``{driver}-{revision}`` (revision default ``1``), a template's own
    ``version`` may name ``{fm_version}`` (``{driver}-{fm_revision}``); templates marked ``companion:
    fabricmanager`` are left out for a release whose ``fm_revision`` is null.
    """
    packages = []
    for release in spec.get("driver_releases", []):
        values = {k: str(v) for k, v in release.items() if k != "packages"}
        revision = str(release.get("revision", "1"))
        values["version"] = f"{release['driver']}-{revision}"
        has_fm = "fm_revision" not in release or release["fm_revision"] is not None
        values["fm_version"] = f"{release['driver']}-{release.get('fm_revision') or revision}"
        for template in _templates(spec, release):
            if template.get("companion") == "fabricmanager" and not has_fm:
                continue
            name = fill(template["name"], values)
            package = {
                "name": name,
                "version": fill(template.get("version", "{version}"), values),
                "description": fill(template["description"], values),
                "values": values,
            }
            for key in ("depends", "provides", "conflicts"):
                package[key] = [fill(item, values) for item in template.get(key, []) if fill(item, values) != name]
            package["contents"] = template.get("contents", [])
            packages.append(package)
    for item in spec["packages"]:
        packages.append(
            {
                "name": item["name"],
                "version": item["version"],
                "description": item["description"],
                "depends": item.get("depends", []),
                "provides": item.get("provides", []),
                "conflicts": item.get("conflicts", []),
                "contents": item.get("contents", []),
                # a kernel package's release (kver) for its contents (kernel_packages.py)
                "values": {"driver": item["version"].split(":")[-1].split("-")[0], **item.get("values", {})},
            }
        )
    names = [(p["name"], p["version"]) for p in packages]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise SystemExit(f"build-repo: duplicate packages in the spec of {spec['distribution']}: {sorted(duplicates)}")
    return packages


def dists(spec: dict) -> list[dict]:
    """The spec's repositories: ``dists`` (each a ``path`` and the names it ``leave_out``), or one ``path``."""
    return spec.get("dists") or [{"path": spec["path"]}]


def kept(packages: list[dict], dist: dict) -> list[dict]:
    leave_out = dist.get("leave_out", [])
    return [p for p in packages if not any(fnmatch.fnmatchcase(p["name"], pattern) for pattern in leave_out)]


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def add_service(staging: Path, unit: str, description: str, daemon: dict, after: str = "") -> None:
    """A stand-in daemon and its systemd unit.

    ``daemon``: DAEMON's name, version, ready and precheck, and optionally ``start_failure``: what the
    daemon says when the lab hook fails its start (default: a generic line).
    """
    values = {"start_failure": f"{daemon['name']}: failed to start", **daemon, "unit": unit.removesuffix(".service")}
    write(staging / "usr/lib/gpuops-lab" / unit.replace(".service", ""), DAEMON.format(**values), 0o755)
    exec_start = "/usr/lib/gpuops-lab/" + unit.replace(".service", "")
    write(
        staging / "lib/systemd/system" / unit,
        UNIT.format(description=description, after=after, exec_start=exec_start, ready=daemon["ready"]),
    )
    write(staging / "DEBIAN/postinst", MAINTSCRIPT.format(stop=""), 0o755)
    stop = f'[ "$1" = remove ] && systemctl stop {unit} >/dev/null 2>&1 || true\n    '
    write(staging / "DEBIAN/prerm", MAINTSCRIPT.format(stop=stop), 0o755)
    write(staging / "DEBIAN/postrm", MAINTSCRIPT.format(stop=""), 0o755)


def kernel_packages():
    """kernel_packages.py beside this file: the stand-in kernels and the NVIDIA module's DKMS source."""
    spec = importlib.util.spec_from_file_location("kernel_packages", HERE / "kernel_packages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage_contents(staging: Path, package: dict) -> None:
    values = package["values"]
    driver = values.get("driver", "")
    for content in package["contents"]:
        if content == "nvml":
            driver_json = json.dumps({"version": driver, "cuda": values["cuda"]}) + "\n"
            write(staging / "usr/share/gpuops-lab/driver.json", driver_json)
        elif content == "nvidia-smi":
            write(staging / "usr/bin/nvidia-smi", SIMULATOR.read_text(encoding="utf-8"), 0o755)
            write(staging / "usr/lib/gpuops-lab/nvidia_smi_mig.py", SIMULATOR_MIG.read_text(encoding="utf-8"))
            (staging / "usr/sbin").mkdir(parents=True, exist_ok=True)
            (staging / "usr/sbin/gpuops-lab-fault").symlink_to("../bin/nvidia-smi")
        elif content in ("kernel-open", "kernel-proprietary"):
            flavour = content.split("-", 1)[1]
            write(staging / "usr/share/gpuops-lab/kernel-module.json", json.dumps({"flavour": flavour}) + "\n")
        elif content == "dkms-source":
            kernel_packages().stage_dkms_source(staging, driver)
        elif content == "linux-image":
            kernel_packages().stage_image(staging, values["kver"])
        elif content in ("linux-headers", "linux-headers-build-fails"):
            kernel_packages().stage_headers(staging, values["kver"], build_fails=content.endswith("-build-fails"))
        elif content == "persistenced":
            precheck = "/usr/bin/nvidia-smi -L >/dev/null 2>&1 || true"
            daemon = {
                "name": "nvidia-persistenced",
                "version": driver,
                "ready": "persistenced-ready",
                "precheck": precheck,
                # What the real daemon logs when nvidia-modprobe cannot load the module (nouveau holds the GPUs).
                "start_failure": (
                    "nvidia-persistenced failed to initialize: the NVIDIA kernel module could not be loaded"
                    " (another driver, such as nouveau, may be bound to the GPUs). Check syslog for more details."
                ),
            }
            add_service(staging, "nvidia-persistenced.service", "NVIDIA Persistence Daemon (gpuops lab)", daemon)
        elif content == "fabricmanager":
            precheck = FM_PRECHECK.format(driver=driver)
            daemon = {
                "name": "nv-fabricmanager",
                "version": driver,
                "ready": "fabricmanager-ready",
                "precheck": precheck,
            }
            after = "After=network-online.target nvidia-persistenced.service\n"
            add_service(
                staging, "nvidia-fabricmanager.service", "NVIDIA fabric manager service (gpuops lab)", daemon, after
            )
        elif content == "dcgm":
            daemon = {"name": "nv-hostengine", "version": driver, "ready": "nv-hostengine-ready", "precheck": ":"}
            add_service(staging, "nvidia-dcgm.service", "NVIDIA DCGM service (gpuops lab nv-hostengine)", daemon)
            # datacenter-gpu-manager-4-core ships /usr/bin/dcgmi beside nv-hostengine and nvidia-dcgm.service
            # (NVIDIA/DCGM scripts/verify_package_contents/datacenter-gpu-manager-core_amd64.deb.txt, commit
            # 0d22068b): the stand-in dcgmi the gate runs.
            write(staging / "usr/bin/dcgmi", DCGMI.read_text(encoding="utf-8"), 0o755)
        elif content == "dcgm-exporter":
            # datacenter-gpu-manager-exporter: /usr/bin/dcgm-exporter, its collectors file and the packaged unit
            # (NVIDIA/dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service, under /usr/lib as
            # NVIDIA/dcgm-exporter issue 606 shows it installed); the stand-in serves the simulated GPUs.
            write(staging / "usr/bin/dcgm-exporter", EXPORTER.read_text(encoding="utf-8"), 0o755)
            write(staging / "etc/dcgm-exporter/default-counters.csv", EXPORTER_COUNTERS)
            write(staging / "usr/lib/systemd/system/nvidia-dcgm-exporter.service", EXPORTER_UNIT)
            write(staging / "DEBIAN/postinst", MAINTSCRIPT.format(stop=""), 0o755)
            write(staging / "DEBIAN/postrm", MAINTSCRIPT.format(stop=""), 0o755)
            write(staging / "DEBIAN/conffiles", "/etc/dcgm-exporter/default-counters.csv\n")
        elif content == "nvidia-ctk":
            # nvidia-container-toolkit-base ships /usr/bin/nvidia-ctk (its packaging/debian/*.install)
            write(staging / "usr/bin/nvidia-ctk", NVIDIA_CTK.read_text(encoding="utf-8"), 0o755)
        elif content == "cdi-refresh":
            write(staging / "lib/systemd/system/nvidia-cdi-refresh.service", CDI_REFRESH_SERVICE)
            write(staging / "lib/systemd/system/nvidia-cdi-refresh.path", CDI_REFRESH_PATH)
        else:
            raise SystemExit(f"build-repo: unknown contents {content!r} for {package['name']}")


def build_deb(package: dict, out_dir: Path, arch: str, work: Path) -> Path:
    staging = work / f"{package['name']}_{package['version']}"
    staging.mkdir()
    stage_contents(staging, package)
    write(
        staging / f"usr/share/doc/{package['name']}/README.gpuops-lab",
        "Stand-in package built by extensions/molecule/lab/packages/build-repo for the gpuops lab.\n",
    )
    control = [
        f"Package: {package['name']}",
        f"Version: {package['version']}",
        f"Architecture: {arch}",
        "Maintainer: gpuops lab <lab@gpuops.invalid>",
        "Section: non-free/libs",
        "Priority: optional",
    ]
    for key in ("depends", "provides", "conflicts"):
        if package[key]:
            control.append(f"{key.capitalize()}: {', '.join(package[key])}")
    control.append(f"Description: {package['description']}")
    write(staging / "DEBIAN/control", "\n".join(control) + "\n")
    version = package["version"].split(":")[-1]
    deb = out_dir / f"{package['name']}_{version}_{arch}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(staging), str(deb)],
        check=True,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, SOURCE_DATE_EPOCH=BUILD_EPOCH),
    )
    return deb


def gpg(home: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--no-tty", *args],
        check=True,
        capture_output=True,
        **kwargs,
    )


def ensure_key(home: Path, uid: str) -> None:
    if (home / "pubring.kbx").exists() and gpg(home, "--list-secret-keys", "--with-colons").stdout:
        return
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    gpg(home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")


def release_file(dist: Path, arch: str) -> str:
    lines = [
        "Origin: gpuops lab",
        "Label: gpuops lab stand-in NVIDIA repository",
        "Codename: gpuops-lab",
        f"Date: {formatdate(usegmt=True)}",
        f"Architectures: {arch}",
        "Description: stand-in NVIDIA CUDA repository for the gpuops lab (not NVIDIA software)",
    ]
    for field, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field}:")
        for name in ("Packages", "Packages.gz"):
            data = (dist / name).read_bytes()
            lines.append(f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {name}")
    return "\n".join(lines) + "\n"


def resolver_check(spec: dict, built: set[tuple[str, str]]) -> int:
    """Resolve every lab stack as a node would (the resolver, then its exact versions from this repository's
    index); fail when the index lacks a package."""
    sys.path.insert(0, str(ROOT / ".collections"))
    try:
        stack_resolver = importlib.import_module(
            "ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver"
        )
        package_index = importlib.import_module(
            "ansible_collections.gpuops.cluster.plugins.module_utils.stack.package_index"
        )
    except ImportError as error:
        print(f"build-repo: resolver not importable ({error}); names not cross-checked", file=sys.stderr)
        return 0
    index: dict = {}
    for name, version in sorted(built):
        index.setdefault(name, []).append({"version": version, "source": "lab"})
    node_os = spec.get("os") or {"distribution": "Debian", "version": "12"}
    problems = []
    for stack in spec["lab_stacks"]:
        try:
            result = stack_resolver.resolve(
                stack["request"],
                node_os["distribution"],
                node_os["version"],
                stack["gpu"],
                nvswitch=stack.get("nvswitch"),
            )
        except Exception as error:  # the resolver refusing a lab stack is a spec error too
            problems.append(f"{stack['gpu']} {stack['request']}: the resolver refuses it: {error}")
            continue
        exact = package_index.resolve(result["packages"], result["pins"], result["driver_request"], index, {})
        problems.extend(f"{stack['gpu']} {stack['request']}: {problem}" for problem in exact["problems"])
    if problems:
        raise SystemExit(
            f"build-repo: the resolver names packages the lab's {spec['distribution']} repository does not build; "
            f"fix its spec:\n  " + "\n  ".join(problems)
        )
    return len(spec["lab_stacks"])


def scan(dist: Path) -> str:
    done = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."], cwd=dist, check=True, capture_output=True, text=True
    )
    return done.stdout


def publish(built: Path, dist: Path, arch: str, home: Path) -> bool:
    """Make ``dist`` the signed repository of the .debs in ``built``; False when it already was.

    Files are moved in one by one (os.replace), .debs first and stale ones removed last, so a node reading
    the repository meanwhile sees the old index or the new one, never a .deb that is not there.
    """
    packages = scan(built)
    dist.mkdir(parents=True, exist_ok=True)
    current = dist / "Packages"
    if (dist / "InRelease").is_file() and current.is_file() and current.read_text(encoding="utf-8") == packages:
        return False
    (built / "Packages").write_text(packages, encoding="utf-8")
    with gzip.open(built / "Packages.gz", "wt", encoding="utf-8", compresslevel=6) as handle:
        handle.write(packages)
    (built / "Release").write_text(release_file(built, arch), encoding="utf-8")
    gpg(home, "--yes", "--clearsign", "--output", str(built / "InRelease"), str(built / "Release"))
    gpg(home, "--yes", "--armor", "--detach-sign", "--output", str(built / "Release.gpg"), str(built / "Release"))
    debs = sorted(path.name for path in built.glob("*.deb"))
    for name in [*debs, "Packages", "Packages.gz", "Release", "Release.gpg", "InRelease"]:
        os.replace(built / name, dist / name)
    for old in dist.iterdir():  # keep the directories: the repository node bind-mounts repo/
        if old.is_file() and old.suffix == ".deb" and old.name not in debs:
            old.unlink()
    return True


def main() -> int:
    import build_rpm_repo  # noqa: PLC0415 (it imports this module)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, default=ROOT / ".lab")
    parser.add_argument("--spec", type=Path, action="append", help="default: every spec*.yml beside this script")
    parser.add_argument("--no-resolver-check", action="store_true")
    args = parser.parse_args()

    specs = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in args.spec or sorted(HERE.glob("spec*.yml"))]
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()
    expanded, rpm_specs = [], []
    for spec in specs:
        if spec.get("format") == "rpm":  # dnf repositories: build_rpm_repo.py
            checked = 0 if args.no_resolver_check else resolver_check(spec, build_rpm_repo.index(spec))
            rpm_specs.append((spec, checked))
            continue
        packages = expand(spec)
        first = kept(packages, dists(spec)[0])
        checked = 0 if args.no_resolver_check else resolver_check(spec, {(p["name"], p["version"]) for p in first})
        expanded.append((spec, packages, checked))

    state = args.state.resolve()
    repo = state / "repo"
    home, wrong_home = state / "gnupg", state / "gnupg-wrong"
    ensure_key(home, KEY_UID)
    ensure_key(wrong_home, WRONG_KEY_UID)
    for spec, packages, checked in expanded:
        with tempfile.TemporaryDirectory(dir=state) as work:
            pool = Path(work) / "pool"
            pool.mkdir()
            debs = {(p["name"], p["version"]): build_deb(p, pool, arch, Path(work)) for p in packages}
            for dist_spec in dists(spec):
                built = Path(work) / "dist" / dist_spec["path"]
                built.mkdir(parents=True)
                chosen = kept(packages, dist_spec)
                for package in chosen:
                    shutil.copyfile(
                        debs[(package["name"], package["version"])],
                        built / debs[(package["name"], package["version"])].name,
                    )
                dist = repo / dist_spec["path"]
                changed = publish(built, dist, arch, home)
                print(
                    f"build-repo: {len(chosen)} packages in {dist.relative_to(state.parent)}"
                    f" ({'rebuilt' if changed else 'unchanged'}); {checked} lab stacks cross-checked"
                )
    for spec, checked in rpm_specs:
        build_rpm_repo.build(spec, state, home, checked)
    keys = repo / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    (keys / "gpuops-lab-archive-keyring.gpg").write_bytes(gpg(home, "--export").stdout)
    (keys / "gpuops-lab-archive-keyring.asc").write_bytes(gpg(home, "--armor", "--export").stdout)
    (keys / "gpuops-lab-wrong-keyring.gpg").write_bytes(gpg(wrong_home, "--export").stdout)
    shutil.copyfile(keys / "gpuops-lab-archive-keyring.gpg", repo / "gpuops-lab-archive-keyring.gpg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
