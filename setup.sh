#!/usr/bin/env bash
# One-stop set-up for a fresh Debian 12 machine (root), then the main job or the test suite.
#
#   ./setup.sh smoke   set up, build the CPU image and smoke-test it with 2 ranks (bandwidth table)
#   ./setup.sh test    set up, then run the whole test suite (what CI runs)
#   ./setup.sh env     set up only
#
# Idempotent: what is already there (apt packages, Apptainer, the venv) is kept.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
say() { printf '[setup] %s\n' "$*"; }

apt_missing=()
command -v debootstrap >/dev/null || apt_missing+=(debootstrap)
command -v git >/dev/null || apt_missing+=(git)
python3 -c 'import ensurepip, venv' 2>/dev/null || apt_missing+=(python3-venv)
command -v g++ >/dev/null || apt_missing+=(g++)
# Lmod: the tests load the module files that invoke publish writes
[[ -f /usr/share/lmod/lmod/init/bash ]] || apt_missing+=(lmod)
# GnuPG: invoke publish --sign exports the signing key's public part with gpg
command -v gpg >/dev/null || apt_missing+=(gnupg)
# Slurm and munge: the tests (and invoke local-slurm) start a two-node Slurm cluster on this
# machine (containers/host/slurmcluster.py)
command -v slurmctld >/dev/null || apt_missing+=(slurm-wlm)
command -v munged >/dev/null || apt_missing+=(munge)
# MariaDB and slurmdbd: a site-shaped cluster enforces its QoS through accounting
command -v mariadbd >/dev/null || apt_missing+=(mariadb-server)
command -v slurmdbd >/dev/null || apt_missing+=(slurmdbd)
# qemu-user and binfmt: aarch64 (Olivia's) images built and run here under emulation (cpu-arm64)
command -v update-binfmts >/dev/null || apt_missing+=(binfmt-support)
[[ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]] || apt_missing+=(qemu-user-static)
if ((${#apt_missing[@]})); then
    say "installing Debian packages: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

# One line when the host refuses emulation; only the aarch64 targets then refuse to build or run.
bash scripts/enable-emulation.sh || true

if ! command -v apptainer >/dev/null && ! command -v singularity >/dev/null; then
    bash scripts/install-apptainer.sh
else
    say "container runtime: $(command -v apptainer || command -v singularity)"
fi

stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -f $stamp ]]; then
    say "creating the Python environment in .venv"
    [[ -x .venv/bin/python ]] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    # torch is pinned in the same pip call as everything else (see pyproject's dev extra).
    DS_BUILD_OPS=0 .venv/bin/python -m pip install -q -e '.[dev]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"

case "${1:-env}" in
    smoke)
        invoke build --target cpu
        invoke smoke --target cpu --gpus 2
        ;;
    test)
        shift
        # Debian's chromium, for the tests only: they open the catalogue page publish writes
        # in a real headless browser (tests/publish/test_release_image.py)
        if ! command -v chromium >/dev/null; then
            say "installing chromium (the tests' headless browser)"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq chromium >/dev/null
        fi
        # Two pytest-xdist workers by default (TEST_WORKERS=N for N, 1 for one process): what
        # shares one thing of the machine runs in one (tests/conftest.py, docs/tests.md).
        workers=${TEST_WORKERS:-2}
        if [[ $workers != 1 ]]; then
            exec python -m pytest -n "$workers" --dist loadgroup "$@"
        fi
        exec python -m pytest "$@"
        ;;
    env) say "ready: . .venv/bin/activate; invoke --list" ;;
    *) echo "usage: $0 smoke|test|env" >&2; exit 2 ;;
esac
