#!/bin/sh
# Makes a Debian root of another architecture (an arm64 root on an x86_64 build host) and then
# runs the command after `--` (the apptainer build of a definition whose From: is that root).
#
#   sh foreign-root.sh DEBIAN_ARCH SUITE MIRROR ROOT -- apptainer build ...
#
# Why not `Bootstrap: debootstrap`: Apptainer ignores `build --arch` there and bootstraps the
# host's architecture. So: debootstrap --foreign (unpack only, 24 s), the second stage run inside
# the root under qemu-user emulation (binfmt_misc; ~2 min), then the device nodes the second stage
# made are removed (Apptainer's --fakeroot build cannot carry them). Needs root and debootstrap.
set -eu
arch=${1:?usage: foreign-root.sh DEBIAN_ARCH SUITE MIRROR ROOT -- COMMAND...}
suite=${2:?suite}
mirror=${3:?mirror}
root=${4:?root}
shift 4
[ "${1:-}" = "--" ] && shift
include=ca-certificates,python3,python3-venv
echo "I: foreign root: debootstrap --arch=$arch --foreign $suite into $root"
debootstrap --arch="$arch" --foreign --variant=minbase --include="$include" \
    "$suite" "$root" "$mirror"
echo "I: foreign root: second stage under emulation"
chroot "$root" /debootstrap/debootstrap --second-stage
find "$root/dev" -mindepth 1 \( -type c -o -type b -o -type p -o -type s \) -exec rm -f {} +
echo "I: foreign root: $(chroot "$root" uname -m) root ready"
exec "$@"
