"""Build the lab's signed stand-in dnf repositories from a spec with ``format: rpm`` (lab only).

Called by build_repo.py for spec-rhel9.yml. Writes, under STATE/repo/:
  <repositories.nvidia>/   NVIDIA's layout: the driver, Fabric Manager and DCGM RPMs, repodata/ (createrepo_c) with
                           modules.yaml added by modifyrepo_c, repodata/repomd.xml.asc (the lab key's signature)
  <repositories.epel>/     the stand-in EPEL (dkms, epel-release)
  <repositories.crb>/      the stand-in CRB
  <nvidia path>/../epel-release-latest-9.noarch.rpm   the EPEL release package at a fixed URL
Every RPM is signed with the lab's key (rpmsign); the payload files are build_repo.py's stand-ins (NVML's
driver.json, the simulated nvidia-smi, the daemons and their units), so an RPM node runs what a .deb node runs.
Scriptlets are Lua (no /bin/sh dependency: the node's rpmdb is empty). A repository whose inputs are unchanged
(its stamp ``.gpuops-inputs``) is left untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import build_repo

HERE = Path(__file__).resolve().parent
STAMP = ".gpuops-inputs"
# Every RPM is built and signed at this time, so a rebuild of unchanged inputs gives the same headers.
RPM_MACROS = [
    "--define", "_build_id_links none",
    "--define", "debug_package %{nil}",
    "--define", "__os_install_post %{nil}",
    "--define", "_binary_payload w1.gzdio",
    "--define", "use_source_date_epoch_as_buildtime 1",
    "--define", "clamp_mtime_to_source_date_epoch 1",
    "--define", "_buildhost gpuops-lab",
]  # fmt: skip

SPEC = """Name: {name}
Epoch: {epoch}
Version: {version}
Release: {release}
Summary: {description}
License: gpuops lab stand-in (not NVIDIA software)
BuildArch: {arch}
AutoReqProv: no
{relations}
%description
{description}. Stand-in package built by extensions/molecule/lab/packages/build_rpm_repo.py for the gpuops lab.

%install
cp -a {staging}/. %{{buildroot}}/

{scripts}
%files
{files}
"""

# Lua scriptlets (rpm's built-in interpreter): reload systemd after a unit changes, stop the unit on erase.
SCRIPTS = """%post -p <lua>
pcall(rpm.execute, "/bin/systemctl", "daemon-reload")

%preun -p <lua>
if arg[2] == 0 then pcall(rpm.execute, "/bin/systemctl", "stop", "{unit}") end

%postun -p <lua>
pcall(rpm.execute, "/bin/systemctl", "daemon-reload")
"""

EPEL_REPO = """[epel]
name=Extra Packages for Enterprise Linux $releasever - $basearch (gpuops lab stand-in)
baseurl=http://gpuops-repo/{path}/
enabled=1
gpgcheck=1
repo_gpgcheck=0
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9
"""


def fill(text: str, values: dict) -> str:
    return text.format(**values)


def expand(spec: dict) -> list[dict]:
    """Every RPM: name, epoch, version, release, arch, repository, relations, contents, module stream."""
    packages = []
    epoch = str(spec["driver_epoch"])
    for release in spec["driver_releases"]:
        values = {k: str(v) for k, v in release.items()}
        values["evr"] = f"{epoch}:{release['driver']}-{spec['driver_release']}"
        for template in spec["driver_packages"]:
            if template.get("companion") == "fabricmanager" and release.get("fm_release") is None:
                continue
            own_release = template.get("release")
            packages.append(
                {
                    "name": template["name"],
                    "epoch": "" if own_release else epoch,
                    "version": release["driver"],
                    "release": fill(own_release, values) if own_release else spec["driver_release"],
                    "arch": template["arch"],
                    "repository": "nvidia",
                    "description": template["description"],
                    "requires": [fill(item, values) for item in template.get("requires", [])],
                    "conflicts": template.get("conflicts", []),
                    "contents": template.get("contents", []),
                    "values": values,
                    "branch": str(release["branch"]),
                    "stream": template.get("stream"),
                    "driver_part": not own_release,
                }
            )
    for item in spec["packages"]:
        evr = item["version"]
        epoch_part, _sep, rest = evr.rpartition(":")
        version, _sep, rel = rest.rpartition("-")
        packages.append(
            {
                "name": item["name"],
                "epoch": epoch_part,
                "version": version,
                "release": rel,
                "arch": item["arch"],
                "repository": item.get("repository", "nvidia"),
                "description": item["description"],
                "requires": item.get("requires", []),
                "conflicts": item.get("conflicts", []),
                "contents": item.get("contents", []),
                "values": {"driver": version},
                "branch": None,
                "stream": None,
                "driver_part": False,
            }
        )
    return packages


def evr(package: dict) -> str:
    base = f"{package['version']}-{package['release']}"
    return f"{package['epoch']}:{base}" if package["epoch"] else base


def stage(package: dict, staging: Path, spec: dict, armored_key: bytes) -> None:
    """The package's files: build_repo.py's stand-ins, systemd units under /usr/lib (RHEL's unit directory)."""
    debian_like = {"values": package["values"], "contents": [c for c in package["contents"] if c != "epel-repo"]}
    build_repo.stage_contents(staging, debian_like)
    shutil.rmtree(staging / "DEBIAN", ignore_errors=True)  # the .deb's maintainer scripts; SCRIPTS stand in
    if (staging / "lib").exists():
        (staging / "usr/lib").mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging / "lib", staging / "usr/lib", dirs_exist_ok=True, symlinks=True)
        shutil.rmtree(staging / "lib")
    if "epel-repo" in package["contents"]:
        build_repo.write(staging / "etc/yum.repos.d/epel.repo", EPEL_REPO.format(path=spec["repositories"]["epel"]))
        (staging / "etc/pki/rpm-gpg").mkdir(parents=True, exist_ok=True)
        (staging / "etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9").write_bytes(armored_key)
    build_repo.write(
        staging / f"usr/share/doc/{package['name']}/README.gpuops-lab",
        "Stand-in package built by extensions/molecule/lab/packages/build_rpm_repo.py for the gpuops lab.\n",
    )


def build_rpm(package: dict, spec: dict, work: Path, armored_key: bytes) -> Path:
    stem = f"{package['name']}-{package['version']}-{package['release']}"
    staging = work / "staging" / stem
    staging.mkdir(parents=True)
    stage(package, staging, spec, armored_key)
    files = []
    for path in sorted(staging.rglob("*")):
        if path.is_file() or path.is_symlink():
            relative = "/" + str(path.relative_to(staging))
            files.append(f"%config(noreplace) {relative}" if relative.startswith("/etc/") else relative)
    units = sorted(p.name for p in (staging / "usr/lib/systemd/system").glob("*.service"))
    relations = [f"Requires: {item}" for item in package["requires"]]
    relations += [f"Conflicts: {item}" for item in package["conflicts"]]
    text = SPEC.format(
        name=package["name"],
        epoch=package["epoch"] or "0",
        version=package["version"],
        release=package["release"],
        arch=package["arch"],
        description=package["description"],
        relations="\n".join(relations),
        staging=staging,
        scripts=SCRIPTS.format(unit=units[0]) if units else "",
        files="\n".join(files),
    )
    if not package["epoch"]:
        text = text.replace("Epoch: 0\n", "")
    spec_file = work / f"{stem}.spec"
    spec_file.write_text(text, encoding="utf-8")
    top = work / "rpmbuild"
    subprocess.run(
        ["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", *RPM_MACROS, "--target", package["arch"],
         str(spec_file)],
        check=True,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, SOURCE_DATE_EPOCH=build_repo.BUILD_EPOCH),
    )  # fmt: skip
    built = top / "RPMS" / package["arch"] / f"{stem}.{package['arch']}.rpm"
    if not built.is_file():
        raise SystemExit(f"build-rpm-repo: rpmbuild made no {built.name}")
    return built


def gpg_time(home: Path) -> list[str]:
    """gpg options that sign at the lab key's creation time (EdDSA signatures are deterministic otherwise): a rebuild
    of unchanged inputs gives the same RPMs and repodata, so a node that cached the metadata still downloads
    packages whose checksums match."""
    keys = build_repo.gpg(home, "--list-secret-keys", "--with-colons").stdout.decode()
    created = next(line.split(":")[5] for line in keys.splitlines() if line.startswith("sec:"))
    return ["--faked-system-time", f"{created}!"]


def sign(rpms: list[Path], home: Path) -> None:
    """Sign every RPM with the lab key (rpmsign runs gpg from the lab's throwaway home)."""
    subprocess.run(
        ["rpmsign", "--addsign", "--define", f"__gpg {shutil.which('gpg')}", "--define", f"_gpg_path {home}",
         "--define", f"_gpg_name {build_repo.KEY_UID}",
         "--define", f"_gpg_sign_cmd_extra_args {' '.join(gpg_time(home))}", *map(str, rpms)],
        check=True,
        capture_output=True,
        env=dict(os.environ, SOURCE_DATE_EPOCH=build_repo.BUILD_EPOCH),
    )  # fmt: skip


def modules_yaml(spec: dict, packages: list[dict]) -> str:
    """One modulemd v2 document per stream and release (NVIDIA's genmodules.py form), artifacts as NEVRA."""
    module = spec["module"]
    documents = []
    releases = sorted({(p["branch"], p["values"]["driver"]) for p in packages if p["driver_part"]})
    for index, (branch, driver) in enumerate(releases):
        parts = [p for p in packages if p["driver_part"] and p["values"]["driver"] == driver]
        for stream_template in module["streams"]:
            stream = stream_template.format(branch=branch)
            flavour = stream.rsplit("-", 1)[-1]
            artifacts = [p for p in parts if p["stream"] in (None, flavour)]
            if not any(p["stream"] == flavour for p in parts):
                continue  # no kernel module of this flavour: NVIDIA publishes no such stream
            lines = [
                "---",
                "document: modulemd",
                "version: 2",
                "data:",
                f"  name: {module['name']}",
                f'  stream: "{stream}"',
                f"  version: {20250101000000 + index}",
                "  context: gpuopslab",
                "  arch: x86_64",
                f"  summary: Nvidia driver for {stream} branch",
                "  description: >-",
                f"    NVIDIA driver {driver} (gpuops lab stand-in).",
                "  license:",
                "    module:",
                "      - MIT",
                "  profiles:",
                "    default:",
                "      description: Default installation",
                "      rpms:",
                "        - nvidia-driver",
                "  artifacts:",
                "    rpms:",
            ]
            lines += [f"      - {p['name']}-{evr(p)}.{p['arch']}" for p in artifacts]
            documents.append("\n".join(lines) + "\n...\n")
    return "".join(documents)


def inputs_digest(spec: dict, home: Path) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for path in (Path(__file__), HERE / "build_repo.py", build_repo.SIMULATOR):
        digest.update(path.read_bytes())
    digest.update(build_repo.gpg(home, "--export").stdout)
    return digest.hexdigest()[:16]


def createrepo(path: Path, home: Path, modules: str | None) -> None:
    subprocess.run(
        ["createrepo_c", "--quiet", "--no-database", "--revision", build_repo.BUILD_EPOCH,
         "--set-timestamp-to-revision", str(path)],
        check=True,
    )  # fmt: skip
    if modules:
        modules_file = path / "modules.yaml"
        modules_file.write_text(modules, encoding="utf-8")
        subprocess.run(
            ["modifyrepo_c", "--mdtype", "modules", str(modules_file), str(path / "repodata")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        modules_file.unlink()
    repomd = path / "repodata/repomd.xml"
    # modifyrepo_c stamps its record with the current time; every other record has the revision's
    text = re.sub(r"<timestamp>\d+</timestamp>", f"<timestamp>{build_repo.BUILD_EPOCH}</timestamp>", repomd.read_text())
    repomd.write_text(text, encoding="utf-8")
    build_repo.gpg(home, *gpg_time(home), "--yes", "--armor", "--detach-sign", "--output", f"{repomd}.asc", str(repomd))


def publish(built: Path, dest: Path) -> bool:
    """Replace ``dest`` by ``built``: RPMs first, the repodata directory in one rename, stale RPMs last; False (and
    only the stamp written) when its repomd.xml is the same, so a node reading it meanwhile sees no change."""
    dest.mkdir(parents=True, exist_ok=True)
    current = dest / "repodata/repomd.xml"
    if current.is_file() and current.read_bytes() == (built / "repodata/repomd.xml").read_bytes():
        (built / STAMP).replace(dest / STAMP)
        return False
    names = sorted(p.name for p in built.glob("*.rpm"))
    for name in names:
        os.replace(built / name, dest / name)
    old = dest / "repodata"
    if old.exists():
        aside = dest / f".repodata-old-{time.time_ns()}"
        os.replace(old, aside)
        os.replace(built / "repodata", old)
        shutil.rmtree(aside)
    else:
        os.replace(built / "repodata", old)
    for stale in dest.glob("*.rpm"):
        if stale.name not in names:
            stale.unlink()
    (built / STAMP).replace(dest / STAMP)
    return True


def build(spec: dict, state: Path, home: Path, checked: int) -> None:
    repo = state / "repo"
    digest = inputs_digest(spec, home)
    paths = {name: repo / path for name, path in spec["repositories"].items()}
    if all((path / STAMP).is_file() and (path / STAMP).read_text(encoding="utf-8").strip() == digest
           for path in paths.values()):  # fmt: skip
        for path in paths.values():
            print(f"build-repo: {path.relative_to(state.parent)} (unchanged)")
        return
    armored_key = build_repo.gpg(home, "--armor", "--export").stdout
    packages = expand(spec)
    with tempfile.TemporaryDirectory(dir=state) as tmp:
        work = Path(tmp)
        rpms = {id(p): build_rpm(p, spec, work, armored_key) for p in packages}
        sign(list(rpms.values()), home)
        for name, dest in paths.items():
            built = work / "dist" / name
            built.mkdir(parents=True)
            chosen = [p for p in packages if p["repository"] == name]
            for package in chosen:
                target = built / rpms[id(package)].name
                shutil.copyfile(rpms[id(package)], target)
                os.utime(target, (int(build_repo.BUILD_EPOCH),) * 2)  # primary.xml records the file's time
            createrepo(built, home, modules_yaml(spec, chosen) if name == "nvidia" else None)
            (built / STAMP).write_text(digest + "\n", encoding="utf-8")
            changed = publish(built, dest)
            print(
                f"build-repo: {len(chosen)} RPMs in {dest.relative_to(state.parent)}"
                f" ({'rebuilt' if changed else 'unchanged'})"
                + (f"; {checked} lab stacks cross-checked" if name == "nvidia" else "")
            )
        epel_release = next(p for p in packages if p["name"] == "epel-release")
        target = paths["nvidia"].parent / "epel-release-latest-9.noarch.rpm"
        shutil.copyfile(rpms[id(epel_release)], target)


def index(spec: dict) -> set[tuple[str, str]]:
    """(name, epoch:version-release) of the NVIDIA path, for build_repo.resolver_check."""
    return {(p["name"], evr(p)) for p in expand(spec) if p["repository"] == "nvidia"}
