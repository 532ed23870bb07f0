"""The shared helpers every module uses: the C locale once per module, bounded and checked commands, one file
reader."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import command_runner, file_reader

BOUND = ["/usr/bin/timeout", "-k", "5", "60"]


class Module:
    def __init__(self, rc=0, out="", err="", timeout="/usr/bin/timeout"):
        self.answer = (rc, out, err)
        self.calls = []
        self.run_command_environ_update = {}
        self.timeout = timeout

    def get_bin_path(self, name, required=False):
        assert name == "timeout"
        return self.timeout

    def run_command(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        return self.answer

    def fail_json(self, **kwargs):
        raise RuntimeError(kwargs)


def test_c_locale_is_set_once_on_the_module():
    module = command_runner.use_c_locale(Module())
    assert module.run_command_environ_update["LC_ALL"] == "C"
    module.run_command_environ_update["LC_ALL"] = "x"
    assert command_runner.C_LOCALE["LC_ALL"] == "C"


def test_run_checked_returns_output_and_passes_the_argv_list():
    module = Module(out="ok\n")
    assert command_runner.run_checked(module, ("sysctl", "-p", "/etc/x"), "reload") == ("ok\n", "")
    assert module.calls == [([*BOUND, "sysctl", "-p", "/etc/x"], {})]


def test_run_checked_fails_with_what_rc_and_output_attached():
    module = Module(rc=2, out="", err="line one\nsysctl: permission denied\n")
    with pytest.raises(RuntimeError) as failure:
        command_runner.run_checked(module, ["sysctl", "-p"], "reload the drop-in", hint="run as root")
    result = failure.value.args[0]
    assert result["msg"] == "could not reload the drop-in: sysctl exited 2: sysctl: permission denied. run as root"
    assert (result["rc"], result["stderr"], result["cmd"]) == (
        2,
        "line one\nsysctl: permission denied\n",
        ["sysctl", "-p"],
    )


@pytest.mark.parametrize("rc", [124, 137])
def test_a_command_that_runs_out_of_time_fails_and_says_so(rc):
    module = Module(rc=rc)
    with pytest.raises(RuntimeError) as failure:
        command_runner.run_bounded(module, ["/usr/bin/nvidia-smi", "-L"], "list the GPUs", 20, hint="check the GPUs")
    result = failure.value.args[0]
    assert result["msg"] == (
        "could not list the GPUs: /usr/bin/nvidia-smi did not finish in 20 s and was stopped. check the GPUs"
    )
    assert result["timed_out"] is True
    assert result["cmd"] == ["/usr/bin/timeout", "-k", "5", "20", "/usr/bin/nvidia-smi", "-L"]
    with pytest.raises(RuntimeError, match="did not finish in 60 s"):
        command_runner.run_checked(Module(rc=rc), ["sysctl", "-p"], "reload")


def test_no_command_runs_without_coreutils_timeout():
    module = Module(timeout=None)
    with pytest.raises(RuntimeError, match="coreutils timeout was not found on the node"):
        command_runner.run_bounded(module, ["sysctl", "-p"], "reload")
    assert module.calls == []


def test_read_value_strips_and_defaults(tmp_path):
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "knob").write_bytes(b" always [madvise] \xff\n")
    assert file_reader.read_value(file_reader.under(str(tmp_path), "/sys/knob")) == "always [madvise] \ufffd"
    assert file_reader.read_value(file_reader.under(str(tmp_path), "sys", "absent"), "none") == "none"
    assert file_reader.read_value(str(tmp_path / "sys")) is None


def test_first_line_is_the_first_non_blank_line_of_the_first_text_that_has_one():
    assert command_runner.first_line("", "  \n", "\n  E: Unable to locate package x  \nmore\n", "later") == (
        "E: Unable to locate package x"
    )
    assert command_runner.first_line(None, "") == ""
