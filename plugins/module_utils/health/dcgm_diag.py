# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the JSON report of ``dcgmi diag -r <level> -j``.

DCGM 3 nests results as ``test_categories[].tests[].results[]`` and DCGM 4
adds entity fields; both carry a ``status`` (``Pass``, ``Fail``, ``Warn``,
``Skip``) next to the test's ``name``. This reader walks the document rather
than one schema, so a minor layout change does not blind the health check.
"""

from __future__ import annotations

import json


def _info(value):
    """Messages of a result as one string (DCGM lists ``[{warning, error_id}]``)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(_info(item) for item in value)
    if isinstance(value, dict):
        return str(value.get("warning") or value.get("message") or value)
    return str(value)


def _gpu_index(node):
    for key in ("gpu_id", "entity_id", "gpu_ids"):
        value = node.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _walk(node, test_name, found):
    if isinstance(node, dict):
        name = node.get("name") or node.get("test_name") or test_name
        status = node.get("status")
        if isinstance(status, str):
            found.append(
                {
                    "test": name,
                    "status": status.strip().lower(),
                    "gpu_index": _gpu_index(node),
                    "info": _info(node.get("info") or node.get("warnings") or node.get("error_message")),
                }
            )
        for value in node.values():
            _walk(value, name, found)
    elif isinstance(node, list):
        for item in node:
            _walk(item, test_name, found)


def parse(text):
    """``{results: [{test, status, gpu_index, info}], failed: [...], warnings}``."""
    warnings = []
    try:
        document = json.loads(text or "")
    except ValueError as error:
        return {"results": [], "failed": [], "warnings": ["dcgmi diag output is not JSON: %s" % error]}
    results = []
    _walk(document, None, results)
    if not results:
        warnings.append("dcgmi diag JSON holds no test status")
    failed = [result for result in results if result["status"] in ("fail", "failed", "error")]
    return {"results": results, "failed": failed, "warnings": warnings}
