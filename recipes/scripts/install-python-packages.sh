#!/bin/sh
# Runs inside %post from the staged build context: installs the env spec's pip list with the
# build host's pip settings, records `pip freeze` as a label, and removes what the build host lent.
#
#   sh install-python-packages.sh /opt/venv   a new venv on the image's python3
#   sh install-python-packages.sh system      into the image's own python3, keeping its torch
#                                             (NGC builds torch from source: pip must not replace it)
set -eu
ctx=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: install-python-packages.sh VENV_DIR|system}
labels=${APPTAINER_LABELS:-${SINGULARITY_LABELS:-/dev/null}}

if ls "$ctx"/ca-certificates/*.crt >/dev/null 2>&1 && command -v update-ca-certificates >/dev/null; then
    mkdir -p /usr/local/share/ca-certificates/build-host
    cp "$ctx"/ca-certificates/*.crt /usr/local/share/ca-certificates/build-host/
    update-ca-certificates >/dev/null
fi
export PIP_CONFIG_FILE="$ctx/pip.conf" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# DeepSpeed: no ops compiled at install time (they are JIT-built when first used).
export DS_BUILD_OPS="${DS_BUILD_OPS:-0}"

if [ "$target" = system ]; then
    python=python3
    "$python" -m pip freeze | grep -i -E '^(torch|torchvision|torchaudio|triton)==' \
        > "$ctx/constraints.txt" || true
    export PIP_CONSTRAINT="$ctx/constraints.txt"
    freeze=/opt/pip-freeze.txt
else
    python3 -m venv "$target"
    python="$target/bin/python"
    freeze="$target/pip-freeze.txt"
fi
"$python" -m pip install --progress-bar off -r "$ctx/requirements.txt"
"$python" -m pip freeze > "$freeze"
echo "containers.pip-freeze $(tr '\n' ' ' < "$freeze")" >> "$labels"

# The build host's trust anchors do not belong in a shared image.
if [ -d /usr/local/share/ca-certificates/build-host ]; then
    rm -rf /usr/local/share/ca-certificates/build-host
    update-ca-certificates --fresh >/dev/null
fi
if [ "$target" != system ]; then
    find "$target" -name __pycache__ -prune -exec rm -rf {} +
fi
