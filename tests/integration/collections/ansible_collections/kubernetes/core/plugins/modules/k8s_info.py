# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A test double of kubernetes.core.k8s_info for the integration tests: no API server runs here.

Answers ``kind: Node`` with the Nodes of the ``kubectl get nodes -o json`` file named as ``kubeconfig``
(``items``), in k8s_info's result shape (``resources``); any other kind fails. Only for tests/integration, whose
harness puts this collection before the real kubernetes.core where a test asks for it.
"""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={"kind": {"type": "str", "required": True}, "kubeconfig": {"type": "raw", "required": True}},
        supports_check_mode=True,
    )
    if module.params["kind"] != "Node":
        module.fail_json(msg="this test double reads Nodes only, got kind %s" % module.params["kind"])
    with open(module.params["kubeconfig"], encoding="utf-8") as handle:
        nodes = json.load(handle)
    module.exit_json(changed=False, api_found=True, resources=nodes["items"])


if __name__ == "__main__":
    main()
