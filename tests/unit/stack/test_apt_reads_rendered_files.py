"""apt itself reads what apt_pinning renders (read-only; skipped where apt is not installed)."""

import shutil
import subprocess

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("apt-cache", "apt-config", "dpkg-query")),
    reason="needs apt (Debian/Ubuntu host)",
)


def installed_version(name):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_apt_cache_policy_applies_the_pin(tmp_path):
    version = installed_version("dpkg")
    pref = tmp_path / "gpuops.pref"
    pref.write_text(apt_pinning.render_preferences([{"component": "x", "names": ["dpkg"], "version": version}]))
    out = subprocess.run(
        [
            "apt-cache",
            "-o",
            f"Dir::Etc::preferences={pref}",
            "-o",
            f"Dir::Etc::preferencesparts={tmp_path / 'none'}",
            "policy",
            "dpkg",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert f"Candidate: {version}" in out
    assert any(line.split()[-2:] == [version, "1001"] for line in out.splitlines() if version in line)


def test_apt_config_keeps_blacklist_regexes(tmp_path):
    conf = tmp_path / "51gpuops"
    conf.write_text(apt_pinning.render_unattended_blacklist(["libstdc++6", "cuda-toolkit-12.4"], ["nvidia-"]))
    out = subprocess.run(
        ["apt-config", "-c", str(conf), "dump", apt_pinning.BLACKLIST_KEY],
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    ).stdout
    values = [
        line.split(" ", 1)[1].strip('";')
        for line in out.splitlines()
        if line.startswith(apt_pinning.BLACKLIST_KEY + "::")
    ]
    assert {"libstdc\\+\\+6$", "cuda-toolkit-12\\.4$", "nvidia-"} <= set(values)
