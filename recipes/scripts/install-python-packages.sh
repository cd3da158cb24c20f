#!/bin/sh
# Runs inside %post from the staged build context: installs the env spec's pip list with the
# build host's pip settings, records `pip freeze` as a label, and removes what the build host lent.
#
#   sh install-python-packages.sh /opt/venv   a new venv on the image's python3
#   sh install-python-packages.sh system      into the image's own python3, keeping its torch
#                                             (NGC builds torch from source: pip must not replace it)
set -eu
# The same modes whoever runs it: apptainer build's %post (umask 002) or a rebuild's exec (the
# caller's umask).
umask 022
ctx=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: install-python-packages.sh VENV_DIR|system}
labels=${APPTAINER_LABELS:-${SINGULARITY_LABELS:-/dev/null}}

export PIP_CONFIG_FILE="$ctx/pip.conf" PIP_DISABLE_PIP_VERSION_CHECK=1
conf() { sed -n "s/^$1 = //p" "$ctx/pip.conf"; }
# The build host's extra CA certificates (a TLS-intercepting proxy's) reach the installers in a
# bundle of the build context beside the image's own roots: the image's trust store is never
# touched (a shared image does not carry the build host's trust anchors; and no
# update-ca-certificates, a minute each way under emulation).
cert=$(conf cert)
if [ -z "$cert" ] && ls "$ctx"/ca-certificates/*.crt >/dev/null 2>&1; then
    cert="$ctx/ca-bundle.pem"
    cat /etc/ssl/certs/ca-certificates.crt "$ctx"/ca-certificates/*.crt > "$cert" 2>/dev/null ||
        cat "$ctx"/ca-certificates/*.crt > "$cert"
    export PIP_CERT="$cert"
fi
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

# uv, a pinned release taken from the site's index as pip sees it, resolves in about a second
# from its cache and installs without pip's per-file Python work; pip serves where uv cannot.
UV_VERSION=0.13.9
find_uv() {
    if grep -q -E -e '--(require-)?hash' "$ctx/requirements.txt"; then
        echo "installer: pip (the env spec pins hashes, which pip checks as written)" >&2
        return 1
    fi
    home=${cache:+$cache/uv-bin/$UV_VERSION-$(uname -m)}
    home=${home:-$ctx/uv-bin}
    if [ ! -x "$home/bin/uv" ]; then
        if ! "$python" -m pip install -q --progress-bar off --no-compile --target "$home.$$" \
                "uv==$UV_VERSION" >&2; then
            rm -rf "$home.$$"
            echo "installer: pip (uv $UV_VERSION is not on this site's package index)" >&2
            return 1
        fi
        mv -T "$home.$$" "$home" 2>/dev/null || rm -rf "$home.$$"  # another build's came first
    fi
    echo "installer: uv $UV_VERSION" >&2
    echo "$home/bin/uv"
}

# uv reads no pip.conf: the tool staged uv.toml with the same sources; timeout and proxy come
# from pip.conf. The resolution is fresh (compile), then the venv holds exactly
# it (sync): a rebuild resolves as a clean build would, whatever the venv held before.
install_with_uv() {
    export UV_CONFIG_FILE="$ctx/uv.toml" UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never \
        UV_NO_PROGRESS=1 UV_CACHE_DIR="${cache:+$cache/uv}"
    UV_CACHE_DIR=${UV_CACHE_DIR:-$ctx/uv-cache}
    # uv trusts its own roots unless told: pip's certificates, else the image's
    [ ! -f "${cert:-/etc/ssl/certs/ca-certificates.crt}" ] ||
        export SSL_CERT_FILE="${cert:-/etc/ssl/certs/ca-certificates.crt}"
    [ -z "$(conf timeout)$(conf default-timeout)" ] ||
        export UV_HTTP_TIMEOUT="$(conf timeout)$(conf default-timeout)"
    [ -z "$(conf proxy)" ] || export HTTPS_PROXY="$(conf proxy)" HTTP_PROXY="$(conf proxy)"
    # the env spec's own --extra-index-url and build options kept for sync to find the files
    "$uv" pip compile --quiet --python "$python" --no-header --emit-index-url \
        --emit-find-links --emit-build-options -o "$ctx/pins.txt" "$ctx/requirements.txt"
    "$uv" pip sync --python "$python" "$ctx/pins.txt"
}

install_with_pip() {
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
    { $lock "$python" -m pip download --progress-bar off -d "$downloads" \
          -r "$ctx/requirements.txt"
      echo $? > "$ctx/download.status"; } 2>&1 | tee "$ctx/download.log"
    [ "$(cat "$ctx/download.status")" = 0 ] || exit 1
    sed -n -e 's/^ *Saved //p' -e 's/^ *File was already downloaded //p' "$ctx/download.log" |
        while IFS= read -r file; do
            ln "$file" "$ctx/wheelhouse/" 2>/dev/null || cp "$file" "$ctx/wheelhouse/"
        done
    echo "install: $(ls "$ctx/wheelhouse" | wc -l) downloaded files, nothing else (--no-index)"
    # Exactly the versions downloaded, as constraints: an installed one that differs is
    # replaced, one no longer chosen removed (the installer's own pip, setuptools and wheel
    # stay), and the venv checked to hold this resolution.
    cat > "$ctx/resolution.py" <<'PY'
import os, re, sys
def name(text):
    return re.sub(r"[-_.]+", "-", text).lower()
if sys.argv[1] == "pins":  # name==version of each downloaded file
    for file in sorted(os.listdir(sys.argv[2])):
        stem = re.sub(r"(\.tar\.gz|\.zip|\.whl)$", "", file)
        parts = stem.split("-") if file.endswith(".whl") else stem.rsplit("-", 1)
        print("%s==%s" % (name(parts[0]), parts[1]))
    sys.exit()
pins = dict(line.strip().split("==", 1) for line in open(sys.argv[2]))
have = dict(line.strip().split("==", 1) for line in sys.stdin if "==" in line)
have = {name(key): value for key, value in have.items()}
if sys.argv[1] == "extra":
    print(" ".join(sorted(set(have) - set(pins) - {"pip", "setuptools", "wheel"})))
else:
    wrong = sorted(key for key in set(pins) | set(have) - {"pip", "setuptools", "wheel"}
                   if pins.get(key) != have.get(key))
    if wrong:
        sys.exit("the venv does not hold exactly the downloaded versions of: " + " ".join(wrong))
PY
    "$python" "$ctx/resolution.py" pins "$ctx/wheelhouse" > "$ctx/pins.txt"
    # Compiled below, the same way whichever installer ran.
    "$python" -m pip install --progress-bar off --no-compile --no-index \
        --find-links "$ctx/wheelhouse" -r "$ctx/requirements.txt" -c "$ctx/pins.txt"
    extra=$("$python" -m pip freeze --all | "$python" "$ctx/resolution.py" extra "$ctx/pins.txt")
    [ -z "$extra" ] || "$python" -m pip uninstall -y $extra
    "$python" -m pip freeze --all | "$python" "$ctx/resolution.py" check "$ctx/pins.txt"
}

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
    # A rebuild from a kept root (containers/image/rebuild.py) runs this again over the venv
    # it made: the installer then changes only what this resolution changes.
    [ -x "$target/bin/python" ] || python3 -m venv "$target"
    python="$target/bin/python"
    freeze="$target/pip-freeze.txt"
    if uv=$(find_uv); then
        install_with_uv
    else
        install_with_pip
    fi
fi
# A new file, not the old one rewritten: a rebuild cut short leaves the old one whole.
"$python" -m pip freeze > "$freeze.new"
mv -f "$freeze.new" "$freeze"
echo "containers.pip-freeze $(tr '\n' ' ' < "$freeze")" >> "$labels"

if [ "$target" != system ]; then
    # Every module compiled once here, not by each process of each job (importing torch from
    # source costs ~2.5 s of CPU per process). Unchecked hash-based pycs (PEP 552): no build
    # time in them, and an import does not read the source to check them (checked ones cost
    # ~1 s more per torch import; the image is read-only, its sources cannot change). A
    # rebuild keeps those whose recorded hash is their source's, compiles the rest.
    cat > "$ctx/bytecode.py" <<'PY'
import importlib.util as util, os, py_compile, sys
sys.pycache_prefix = None  # beside their sources, into the image, whatever the caller set
HEADER = util.MAGIC_NUMBER + b"\x01\0\0\0"  # flags: hash-based, not checked
def compiled(source):  # 1: compiled now, 0: current, -1: does not compile on this Python
    try:
        with open(util.cache_from_source(source), "rb") as pyc, open(source, "rb") as src:
            if pyc.read(16) == HEADER + util.source_hash(src.read()):
                return 0
    except OSError:
        pass
    try:
        py_compile.compile(source, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        return -1
    return 1
sources = [os.path.join(folder, name) for folder, _, files in os.walk(sys.argv[1])
           for name in files if name.endswith(".py")]
try:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor() as pool:
        done = list(pool.map(compiled, sources, chunksize=64))
except (ImportError, OSError, NotImplementedError):  # no sem_open here: one process
    done = [compiled(source) for source in sources]
print(f"bytecode: {done.count(1)} modules compiled, {done.count(0)} current, "
      f"{done.count(-1)} left as source")
PY
    "$python" "$ctx/bytecode.py" "$target/lib"
fi
