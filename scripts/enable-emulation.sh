#!/usr/bin/env bash
# Lets this machine run aarch64 binaries (qemu-user through binfmt_misc), which building and
# running the cpu-arm64 image on x86_64 needs. Idempotent; run by ./setup.sh after it installs
# Debian's qemu-user-static and binfmt-support. Exits 1 with ONE line saying why when the host
# refuses (binfmt_misc cannot be mounted in an unprivileged container, for example): everything
# else still works, only the aarch64 targets are refused with that reason.
set -uo pipefail
dir=/proc/sys/fs/binfmt_misc
say() { printf '[setup] %s\n' "$*"; }
[[ $(uname -m) == aarch64 ]] && { say "aarch64 host: no emulation needed"; exit 0; }
if ! command -v update-binfmts >/dev/null || [[ ! -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P \
        && ! -x /usr/bin/qemu-aarch64-static ]]; then
    say "aarch64 emulation unavailable: install qemu-user-static and binfmt-support"; exit 1
fi
if [[ ! -e $dir/status ]] && ! mount -t binfmt_misc binfmt_misc "$dir" 2>/dev/null; then
    say "aarch64 emulation unavailable: this host refuses to mount binfmt_misc at $dir" \
        "(a container without privileges; the host must run: mount -t binfmt_misc binfmt_misc $dir)"
    exit 1
fi
if ! grep -qx enabled "$dir/qemu-aarch64" 2>/dev/null; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
if ! grep -qx enabled "$dir/qemu-aarch64" 2>/dev/null; then
    say "aarch64 emulation unavailable: update-binfmts --enable qemu-aarch64 did not register it" \
        "(is $dir writable here?)"
    exit 1
fi
if ! grep -q '^flags:.*F' "$dir/qemu-aarch64"; then
    say "aarch64 emulation unusable in containers: the qemu-aarch64 entry lacks the F flag" \
        "(use Debian's qemu-user-static, which registers it with F)"
    exit 1
fi
say "aarch64 emulation: enabled ($dir/qemu-aarch64)"
