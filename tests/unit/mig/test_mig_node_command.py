"""gpuops-mig-apply (the boot unit's command) against the lab's simulated nvidia-smi, run as a subprocess.

The lab node's state lies in a temporary directory (GPUOPS_LAB_ROOT); its reboot empties /run (MIG modes persist,
instances are lost), as the lab's container restart does. systemctl and nvidia-ctk are small scripts on the PATH
that record their arguments.
"""

from __future__ import annotations

import io
import json
import os
import stat

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_node_command

from tests.unit.mig.test_gpu_mig_module import H100, MIXED, SIM, Lab, gpu0, spec

TOOL = """#!/bin/sh
echo "$0 $*" >> "{log}"
{body}
"""


def tool(path, log, body="exit 0"):
    path.write_text(TOOL.format(log=log, body=body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def node(tmp_path, monkeypatch):
    root = tmp_path / "node"
    root.mkdir()
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(root))
    lab = Lab(root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lab.log = tmp_path / "tools.log"
    lab.log.write_text("")
    tool(bin_dir / "systemctl", lab.log, 'for unit in "$@"; do [ "$unit" = is-active ] || echo inactive; done')
    # nvidia-ctk cdi generate --output=FILE writes the specification (a stand-in: the path is what is checked)
    lab.ctk = tool(bin_dir / "nvidia-ctk", lab.log, 'printf "cdiVersion: 0.5.0\\n" > "${3#--output=}"')
    lab.cdi = tmp_path / "run-cdi" / "nvidia.yaml"
    lab.cdi.parent.mkdir()
    lab.environ = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "GPUOPS_LAB_ROOT": str(root)}
    return lab


def write_layout(lab, entries, **more):
    layout = {
        "config": spec(chosen=entries),
        "config_name": "chosen",
        "profile_set": H100,
        "nvidia_smi_path": str(SIM),
        "nvidia_ctk": lab.ctk,
        "cdi_output": str(lab.cdi),
        **more,
    }
    path = lab.root / "mig-layout.json"
    path.write_text(json.dumps(layout))
    return path


def command(lab, path, *flags):
    out, err = io.StringIO(), io.StringIO()
    code = mig_node_command.main(["--layout", str(path), *flags], environ=lab.environ, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def tool_calls(lab, name):
    return [line.split(" ", 1)[1] for line in lab.log.read_text().splitlines() if line.split(" ")[0].endswith(name)]


def test_applies_the_layout_then_finds_it_back_after_the_reboot(node):
    path = write_layout(node, gpu0(MIXED))
    code, out, err = command(node, path)
    assert (code, err) == (0, ""), out
    assert "MIG layout chosen applied: GPU 0" in out
    assert "create" in out
    assert "CDI specification %s regenerated" % node.cdi in out
    assert tool_calls(node, "nvidia-ctk") == ["cdi generate --output=%s" % node.cdi]
    gpu0_key = sorted(node.layout())[0]
    assert node.layout()[gpu0_key]["mig_devices"] == MIXED

    # a second run changes nothing and leaves the CDI specification alone
    code, out, err = command(node, path)
    assert (code, err) == (0, "")
    assert out == "gpuops-mig-apply: MIG layout chosen applied: nothing to change\n"
    assert len(tool_calls(node, "nvidia-ctk")) == 1

    # the reboot: MIG mode stays on, the instances are gone; --check says so and changes nothing
    node.reboot()
    assert node.layout()[gpu0_key] == {"mig_enabled": True, "pending_mig": True, "mig_devices": {}}
    code, out, err = command(node, path, "--check")
    assert code == 1
    assert out == ""
    assert "MIG layout chosen is not the node's: GPU 0" in err
    assert "create 3g.40gb" in err
    assert node.layout()[gpu0_key]["mig_devices"] == {}

    # the boot unit's run creates them again (no reset: the mode is on) and regenerates the specification
    code, out, err = command(node, path, "--json")
    assert code == 0, err
    result = json.loads(out[: out.rindex("}") + 1])
    assert [call[1:] for call in result["commands"]] == [["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"]]
    assert result["cdi"] == "CDI specification %s regenerated" % node.cdi
    assert node.layout()[gpu0_key]["mig_devices"] == MIXED
    assert len(tool_calls(node, "nvidia-ctk")) == 2


def test_without_nvidia_ctk_the_layout_is_applied_and_no_specification_written(node):
    path = write_layout(node, gpu0({"7g.80gb": 1}), nvidia_ctk=str(node.root / "no-such-nvidia-ctk"))
    code, out, err = command(node, path)
    assert (code, err) == (0, "")
    assert "nvidia-ctk is not installed, none regenerated" in out
    assert not node.cdi.exists()


def test_a_failed_cdi_generation_fails_the_run(node):
    failing = tool(node.root / "nvidia-ctk", node.log, 'echo "failed to initialize NVML: Unknown Error" >&2; exit 1')
    path = write_layout(node, gpu0({"7g.80gb": 1}), nvidia_ctk=failing)
    code, out, err = command(node, path)
    assert code == 1
    assert out == ""
    assert "but the CDI specification was not regenerated" in err
    assert "exited 1: failed to initialize NVML: Unknown Error" in err


def test_a_driver_that_does_not_answer_fails_closed(node):
    broken = tool(
        node.root / "nvidia-smi",
        node.log,
        'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." ; exit 9',
    )
    path = write_layout(node, gpu0(MIXED), nvidia_smi_path=broken)
    code, out, err = command(node, path)
    assert code == 1
    assert out == ""
    assert "MIG layout chosen not applied: could not read the GPUs with nvidia-smi -q -x" in err
    assert "exited 9: NVIDIA-SMI has failed" in err
    assert tool_calls(node, "nvidia-ctk") == []


def test_a_gpu_that_cannot_be_reset_asks_for_a_reboot(node):
    (node.root / "etc/gpuops-lab/faults.json").write_text(json.dumps({"reset_unsupported": [0]}))
    path = write_layout(node, gpu0(MIXED))
    code, out, err = command(node, path)
    assert code == 1
    assert out == ""
    assert "the new MIG mode of GPU 0" in err
    assert "is pending" in err
    assert "reboot the node" in err
    assert tool_calls(node, "nvidia-ctk") == []
    # the reboot applies the pending mode; the unit's run then creates the instances
    node.reboot()
    code, out, err = command(node, path)
    assert code == 0, err
    assert node.layout()[sorted(node.layout())[0]]["mig_devices"] == MIXED


def test_a_gpu_running_a_job_is_refused_and_nothing_changes(node):
    (node.root / "run/gpuops-lab").mkdir(parents=True, exist_ok=True)
    (node.root / "run/gpuops-lab/processes.json").write_text(json.dumps({"0": [{"pid": 4242, "name": "python3"}]}))
    path = write_layout(node, gpu0(MIXED))
    code, out, err = command(node, path)
    assert code == 1
    assert out == ""
    assert "not applied, nothing was changed" in err
    assert "python3 (pid 4242)" in err
    assert node.layout()[sorted(node.layout())[0]]["mig_enabled"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; the role gpuops.cluster.mig_layout writes it"),
        ("[]", "a JSON object is expected"),
        ("{", "Expecting property name"),
        (json.dumps({"config_name": "chosen"}), "config is missing"),
        (json.dumps({"config": spec(chosen=gpu0(None)), "config_name": "other"}), "other"),
        (json.dumps({"config": spec(chosen=gpu0(None)), "config_name": "chosen", "mig": 1}), "unknown key 'mig'"),
        (json.dumps({"config": spec(chosen=gpu0(None)), "config_name": "chosen", "reset": "now"}), "reset must be"),
        (
            json.dumps({"config": spec(chosen=gpu0(None)), "config_name": "chosen", "command_timeout": True}),
            "command_timeout must be a int",
        ),
    ],
)
def test_a_wrong_layout_file_is_a_configuration_error(node, content, message):
    path = node.root / "mig-layout.json"
    if content is not None:
        path.write_text(content)
    code, out, err = command(node, path)
    assert code == 2
    assert out == ""
    assert err.startswith("gpuops-mig-apply: %s: " % path)
    assert message in err
    assert not os.path.exists(node.root / "run/gpuops-lab/mig/instances.json")


def test_the_gpu_clients_it_stops_are_started_again_without_waiting_on_the_unit(node):
    """Run by the boot unit (or its restart on a node in service): nvidia-dcgm and the exporter are ordered after the
    unit, so a blocking ``systemctl start`` of them would wait for the unit's start, which waits for the command
    (the lab's restart of the unit hung until its start timeout). The start is queued with --no-block."""
    tool(
        node.root.parent / "bin" / "systemctl",
        node.log,
        'if [ "$1" = is-active ]; then shift; for unit in "$@"; do '
        '[ "$unit" = nvidia-dcgm.service ] && echo active || echo inactive; done; fi',
    )
    path = write_layout(node, gpu0(MIXED), stop_services=["nvidia-dcgm.service", "nvidia-dcgm-exporter.service"])
    code, out, err = command(node, path)
    assert (code, err) == (0, ""), out
    calls = tool_calls(node, "systemctl")
    assert calls[1:] == ["stop nvidia-dcgm.service", "start --no-block nvidia-dcgm.service"], calls
