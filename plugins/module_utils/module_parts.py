# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several modules' work in one remote execution.

A module whose work can also run as a *part* of another module keeps that work in
module_utils as two names:

* ``MODULE_KWARGS``: the keyword arguments of its ``AnsibleModule`` (``argument_spec`` and the
  ``required_if``/``mutually_exclusive``/... rules, ``supports_check_mode``);
* ``run(module) -> dict``: everything its ``main()`` did after ``AnsibleModule(...)`` and
  ``use_c_locale``, returning the result instead of calling ``exit_json`` (it still calls
  ``module.fail_json`` on an error).

The module itself is then ``module = AnsibleModule(**MODULE_KWARGS); use_c_locale(module);
module.exit_json(**run(module))``. A module that runs several parts (``node_tuning``,
``node_stack``) has one ``dict`` option per part and calls :func:`run_parts`: every part's options
are checked first with :func:`validate`, then each ``run`` gets a :class:`Part`: the part's own
``params`` over the one ``AnsibleModule`` of the execution (its ``run_command`` in the C locale,
check mode, diff mode, ``atomic_move``, warnings), with ``fail_json`` raising :class:`PartFailed`
so the result says which part failed and what the parts before it did.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# The AnsibleModule keyword arguments that ArgumentSpecValidator also takes.
_RULES = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


class PartFailed(Exception):
    """A part called ``fail_json``: ``msg`` and the other keys it passed are in ``result``."""

    def __init__(self, msg, result):
        super().__init__(msg)
        self.msg = msg
        self.result = result


def validate(module_kwargs, options):
    """Check ``options`` against a part's ``MODULE_KWARGS``: ``(params with defaults, [errors])``."""
    validator = ArgumentSpecValidator(
        module_kwargs["argument_spec"], **{rule: module_kwargs[rule] for rule in _RULES if rule in module_kwargs}
    )
    outcome = validator.validate(dict(options or {}))
    return outcome.validated_parameters, [str(error) for error in outcome.errors]


class Part:
    """One part's view of the execution's ``AnsibleModule``: its own validated ``params``."""

    def __init__(self, module, params):
        self._module = module
        self.params = params

    def fail_json(self, msg, **kwargs):
        raise PartFailed(msg, kwargs)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        # A missing required binary fails this part (named by the caller), not the whole execution.
        path = self._module.get_bin_path(arg, required=False, opt_dirs=opt_dirs)
        if path is None and required:
            self.fail_json(msg=f"Failed to find required executable {arg!r} on the node")
        return path

    def exit_json(self, **kwargs):  # pragma: no cover - a part returns its result instead
        raise TypeError("a part returns its result from run(); it does not call exit_json")

    def __getattr__(self, name):
        # check_mode, _diff, run_command, get_bin_path, atomic_move, tmpdir, warn: the execution's own.
        return getattr(self._module, name)


def part_options(parts):
    """The argument spec of a module running ``parts`` (name -> module_utils with MODULE_KWARGS and run)."""
    return {name: dict(type="dict") for name in parts}


def run_parts(module, parts):
    """Run the parts ``module.params`` asks for, in the order of ``parts``; ends the module.

    Nothing runs when any part's options are wrong. The result has ``results`` (each part's own result,
    without its diff), ``changed_parts`` and, in diff mode, every part's diff entries in order. A part's
    failure ends the run with ``failed_part``, its message prefixed with the part's name, its own
    return values, and the results of the parts before it.
    """
    asked = [name for name in parts if module.params.get(name) is not None]
    params, problems = {}, []
    for name in asked:
        params[name], errors = validate(parts[name].MODULE_KWARGS, module.params[name])
        problems.extend(f"{name}: {error}" for error in errors)
    if problems:
        module.fail_json(msg="; ".join(problems) + ". Nothing was changed.", results={}, changed_parts=[])
    results, diffs = {}, []
    for name in asked:
        try:
            result = parts[name].run(Part(module, params[name]))
        except PartFailed as failure:
            changed = [part for part, done in results.items() if done.get("changed")]
            failed = dict(failure.result)
            failed.update(
                msg=f"{name}: {failure.msg}",
                failed_part=name,
                results=results,
                changed_parts=changed,
                changed=bool(changed),
            )
            module.fail_json(**failed)
        diff = result.pop("diff", None)
        if diff:
            diffs.extend(diff if isinstance(diff, list) else [diff])
        results[name] = result
    changed = [name for name, result in results.items() if result.get("changed")]
    outcome = dict(changed=bool(changed), changed_parts=changed, results=results)
    if module._diff and diffs:
        outcome["diff"] = diffs
    module.exit_json(**outcome)
