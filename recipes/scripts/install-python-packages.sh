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
export PIP_CONFIG_FILE="$ctx/pip.conf" PIP_DISABLE_PIP_VERSION_CHECK=1
# The build host's shared package cache, when the tool bound one: it stages this file only then
# (invoke build --no-cache does not). The definition, the inputs hash and what is installed are
# the same either way: only where downloaded files are kept differs.
cache=
if [ -s "$ctx/pip-cache-dir" ]; then
    cache=$(cat "$ctx/pip-cache-dir")
    echo "package cache: $cache"
    export PIP_CACHE_DIR="$cache/pip"
else
    export PIP_NO_CACHE_DIR=1
fi
# DeepSpeed: no ops compiled at install time (they are JIT-built when first used).
export DS_BUILD_OPS="${DS_BUILD_OPS:-0}"
# setup.py-built metadata (DeepSpeed's) lists sets in hash order: fixed, so builds are repeatable.
export PYTHONHASHSEED=0
cd /  # pip names files under the working folder relative to it; below, every path is absolute

if [ "$target" = system ]; then
    # The image's own torch stays (NGC builds it from source): pip resolves against what is
    # installed, so only pip's own cache (where the index allows caching) is shared here.
    python=python3
    "$python" -m pip freeze | grep -i -E '^(torch|torchvision|torchaudio|triton)==' \
        > "$ctx/constraints.txt" || true
    export PIP_CONSTRAINT="$ctx/constraints.txt"
    freeze=/opt/pip-freeze.txt
    "$python" -m pip install --progress-bar off -r "$ctx/requirements.txt"
else
    # Download first, then install from exactly the files this resolution chose (--no-index).
    # The download folder is the cache's when there is one: pip checks a file already there
    # against the index's hash and fetches it again when it differs, and fetches only what is
    # missing, whatever caching the index or a proxy allows. Without a cache it is this build's.
    downloads=${cache:+$cache/downloads}
    downloads=${downloads:-$ctx/downloads}
    mkdir -p "$downloads" "$ctx/wheelhouse"
    # pip copies a new download straight to its final name: builds sharing the folder take
    # turns (flock, from util-linux, in every base we build on; without it, no lock).
    lock=
    if [ -n "$cache" ] && command -v flock >/dev/null; then
        lock="flock $downloads/.lock"
    fi
    # With the cache, a venv an earlier build installed from a subset of exactly the files this
    # resolution chooses replaces the new one, and pip installs only the rest (venv-snapshot.py
    # says when and why it may). The tool stages the snapshot key only for a base it can name
    # by content. The likeliest snapshot comes ahead, beside the venv: hard-linked by the
    # definition's %setup where it can (the host sees the root and the cache as plain folders;
    # here they are two mounts, which links cannot cross) and checked here while the venv is
    # made and pip downloads, else copied and checked meanwhile.
    snapshots= prefetching= ahead="$target.prefetch"
    if [ -n "$cache" ] && [ -s "$ctx/env-snapshot-key" ]; then
        snapshots="$cache/envs/$(cat "$ctx/env-snapshot-key")"
        if [ ! -e "$ahead/source" ]; then
            python3 "$ctx/venv-snapshot.py" prefetch "$snapshots" "$ahead" \
                > "$ctx/prefetch.log" 2>&1 &
            prefetching=$!
        elif [ ! -e "$ahead/problem" ]; then
            python3 "$ctx/venv-snapshot.py" check "$ahead" > "$ctx/prefetch.log" 2>&1 &
            prefetching=$!
        fi
    elif [ -n "$cache" ]; then
        echo "environment snapshot: none for this build (its base is not named by content)"
    fi
    # The venv pip downloads with: the one an earlier build of this key made, when %setup
    # linked it and it passes its check (python3 -m venv unpacks pip and setuptools: ~2 s),
    # else a new one, kept for the next build.
    fresh="$ahead/fresh"
    if [ -d "$fresh/venv" ]; then
        python3 "$ctx/venv-snapshot.py" check "$fresh"
    fi
    if [ -d "$fresh/venv" ] && [ -e "$fresh/problem" ] && [ ! -s "$fresh/problem" ]; then
        mv "$fresh/venv" "$target"
        echo "environment snapshot: the venv pip starts from is the kept fresh one (linked, checked)"
    else
        python3 -m venv "$target"
        if [ -n "$snapshots" ]; then
            replace=
            if [ -s "$fresh/problem" ]; then
                echo "environment snapshot: the kept fresh venv $(cat "$fresh/problem"): replaced"
                replace=replace
            fi
            python3 "$ctx/venv-snapshot.py" keep-fresh "$snapshots" "$target" $replace
        fi
    fi
    python="$target/bin/python"
    freeze="$target/pip-freeze.txt"
    { $lock "$python" -m pip download --progress-bar off -d "$downloads" \
          -r "$ctx/requirements.txt"
      echo $? > "$ctx/download.status"; } 2>&1 | tee "$ctx/download.log"
    if [ -n "$prefetching" ]; then
        wait "$prefetching" || echo "environment snapshot: the work ahead failed (exit $?)"
        cat "$ctx/prefetch.log"
    fi
    [ "$(cat "$ctx/download.status")" = 0 ] || exit 1
    sed -n -e 's/^ *Saved //p' -e 's/^ *File was already downloaded //p' "$ctx/download.log" |
        while IFS= read -r file; do
            ln "$file" "$ctx/wheelhouse/" 2>/dev/null || cp "$file" "$ctx/wheelhouse/"
        done
    echo "install: $(ls "$ctx/wheelhouse" | wc -l) downloaded files, nothing else (--no-index)"
    if [ -n "$snapshots" ]; then
        # 0: restored; 3: none applies, the new venv untouched; anything else (a snapshot that
        # failed its check, a crash): whatever is there goes, and a new venv is made.
        python3 "$ctx/venv-snapshot.py" restore "$snapshots" "$ctx/wheelhouse" "$target" \
            "$ahead" || [ $? = 3 ] || { rm -rf "$target"; python3 -m venv "$target"; }
    fi
    rm -rf "$ahead"
    # The venv's __pycache__ folders are removed below: compiling them first only costs time.
    "$python" -m pip install --progress-bar off --no-compile --no-index \
        --find-links "$ctx/wheelhouse" -r "$ctx/requirements.txt"
fi
# A new file, not the old one rewritten: a restored venv's files may be hard links to the
# cache's, which nothing here may change in place (venv-snapshot.py).
"$python" -m pip freeze > "$freeze.new"
mv -f "$freeze.new" "$freeze"
echo "containers.pip-freeze $(tr '\n' ' ' < "$freeze")" >> "$labels"

# The build host's trust anchors do not belong in a shared image.
if [ -d /usr/local/share/ca-certificates/build-host ]; then
    rm -rf /usr/local/share/ca-certificates/build-host
    update-ca-certificates --fresh >/dev/null
fi
if [ "$target" != system ]; then
    find "$target" -name __pycache__ -prune -exec rm -rf {} +
    if [ -n "$snapshots" ]; then
        python3 "$ctx/venv-snapshot.py" save "$snapshots" "$ctx/wheelhouse" "$target"
    fi
fi
