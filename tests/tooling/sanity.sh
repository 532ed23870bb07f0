#!/usr/bin/env bash
# ansible-test sanity for gpuops.cluster without Docker.
#
# ansible-test needs the collection at ansible_collections/gpuops/cluster and
# resolves physical paths, so it runs on a copy of the tracked (and
# not-ignored) files, placed OUTSIDE any git work tree: inside one it walks up
# to the outer .git, skips every target and exits 0.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv_bin=$repo/.venv/bin

# ansible-test passes only HOME, PATH and LC_ALL to its children, so pyenv
# shims do not work: expose each interpreter as pythonX.Y on PATH.
pythons=$repo/.cache/pythons
mkdir -p "$pythons"
versions=()
for v in 3.9 3.10 3.11 3.12 3.13; do
  for candidate in "$HOME"/.pyenv/versions/"$v".*/bin/python"$v" /usr/bin/python"$v"; do
    if [ -x "$candidate" ]; then
      ln -sfn "$candidate" "$pythons/python$v"
      versions+=("$v")
      break
    fi
  done
done
export PATH="$pythons:$venv_bin:$PATH"

# Offline pip bootstrap for ansible-test's per-test virtual environments.
pip_version=$("$venv_bin/python" - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
print(get_venv_packages(NativePythonConfig(version="3.12", path="python3.12"))["pip"])
PY
)
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
install -m 0644 "$repo/tests/tooling/get_pip_standin.py" "$cache/get_pip_${pip_version//./_}.py"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpuops/cluster
mkdir -p "$dest"
(cd "$repo" && git ls-files -co --exclude-standard -z | grep -zv '^\.collections/' | xargs -0 cp --parents -P -t "$dest")
cd "$dest"

log=$work/sanity.log
set +e
"$venv_bin/ansible-test" sanity --venv --color no "${@}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if grep -q "All targets skipped" "$log"; then
  echo "sanity.sh: ansible-test skipped every target: the copy is not seen as a collection" >&2
  exit 1
fi
# Fail if the requested Python versions were not all found.
echo "sanity.sh: interpreters available: ${versions[*]}"
exit "$rc"
