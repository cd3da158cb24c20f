#!/usr/bin/env bash
# install-apptainer.sh - install a real Apptainer on a Debian 12 (bookworm) host, as root.
#
# Debian 12 has no apptainer package, and the one in Debian unstable (sid) needs a newer glibc
# than bookworm's. So this script downloads the sid packages with a private apt state (the host's
# apt configuration is only read, never changed), unpacks them into a private prefix together with
# sid's glibc, and points the ELF interpreter and RPATH of every program Apptainer runs at that
# prefix with patchelf. Apptainer finds its configuration relative to its own binary.
#
# It then configures the install for root on VMs whose root lacks some capabilities
# (typically CAP_SYS_RESOURCE), so that `apptainer exec` and `apptainer build --fakeroot` work:
#   - `root default capabilities = file` plus `apptainer capability add --user root` for every
#     capability root actually holds,
#   - a subuid/subgid range for root (needed by --fakeroot),
#   - /dev/fuse present and read/write for everyone (squashfuse_ll in user-namespace mode),
#   - a symlink $APPTAINER_BIN_DIR/apptainer -> the private binary.
# It ends with an offline smoke test (sandbox build, exec, `build --fakeroot` with %post,
# `exec --fakeroot`).
#
# Usage: install-apptainer.sh [--force] [--check] [--help]
#   (no option)  install if needed; a second run finds the working install and does nothing.
#                If an apptainer or singularity that works is already on PATH (and is not one
#                this script installed), it says so and changes nothing.
#   --force      reinstall the private prefix and redo the configuration in any case.
#   --check      change nothing: report the state, run the smoke test, exit 0 if all is well.
#
# Environment (all optional):
#   APPTAINER_DEBIAN_MIRROR   Debian mirror URL (default: read from the host's apt sources)
#   APPTAINER_DEBIAN_SUITE    suite to take apptainer from (default: sid)
#   APPTAINER_DEBIAN_KEYRING  keyring that signs that suite
#                             (default: /usr/share/keyrings/debian-archive-keyring.gpg)
#   APPTAINER_PREFIX          private prefix (default: /opt/apptainer-sid)
#   APPTAINER_BIN_DIR         where the apptainer symlink goes (default: /usr/local/bin)
#   APPTAINER_VERSION         version expected from the suite; a mismatch only warns (default: 1.4.5)
#   APPTAINER_LINK_SINGULARITY=1  also link `singularity` to the installed apptainer
#   APPTAINER_FUSE_CHMOD=0    leave /dev/fuse's permissions alone
#   APPTAINER_SKIP_SMOKE=1    skip the smoke test
#   TMPDIR                    scratch space for downloads (default: /var/tmp)
set -Eeuo pipefail

readonly SELF=install-apptainer
PREFIX="${APPTAINER_PREFIX:-/opt/apptainer-sid}"
BIN_DIR="${APPTAINER_BIN_DIR:-/usr/local/bin}"
SUITE="${APPTAINER_DEBIAN_SUITE:-sid}"
KEYRING="${APPTAINER_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
WANT_VERSION="${APPTAINER_VERSION:-1.4.5}"
LINK_SINGULARITY="${APPTAINER_LINK_SINGULARITY:-0}"
FUSE_CHMOD="${APPTAINER_FUSE_CHMOD:-1}"
SKIP_SMOKE="${APPTAINER_SKIP_SMOKE:-0}"
APTSOURCES="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/containers/host/aptsources.py"
readonly APTSOURCES
readonly SUBID_COUNT=65536
readonly SUBID_MIN=100000

# Packages taken from the suite: apptainer, the glibc it needs, squashfuse_ll (unprivileged SIF
# mounts) and the libraries all of them link against, so nothing is resolved from the host.
readonly SUITE_PKGS=(apptainer libc6 libgcc-s1 libseccomp2 libsqlite3-0
    squashfuse libsquashfuse0 libfuse3-4 liblz4-1 libxxhash0 liblzma5 liblzo2-2 libzstd1 zlib1g)
# Host (bookworm) packages Apptainer runs: debootstrap for `Bootstrap: debootstrap`,
# mksquashfs/unsquashfs, newuidmap/newgidmap for --fakeroot, fusermount3 and fuse-overlayfs,
# mkfs.ext3; patchelf and the keyring for this script.
readonly HOST_PKGS=(patchelf debootstrap squashfs-tools uidmap fuse3 fuse-overlayfs e2fsprogs
    debian-archive-keyring gpgv ca-certificates)
# Nice to have (ext3 overlay images in user-namespace mode); a failure only warns.
readonly HOST_PKGS_OPTIONAL=(fuse2fs)

FORCE=0
CHECK_ONLY=0
WORK=""
STAGE=""
STAMP=""
ARCH=""
TRIPLET=""
LDNAME=""

log() { printf '[%s] %s\n' "$SELF" "$*"; }
warn() { printf '[%s] WARNING: %s\n' "$SELF" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$SELF" "$*" >&2
    exit 1
}

on_err() {
    local rc=$1 line=$2 cmd=$3
    printf '[%s] ERROR: command failed (exit %s) at line %s: %s\n' "$SELF" "$rc" "$line" "$cmd" >&2
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

cleanup() {
    local rc=$?
    [[ -n "$STAGE" && -d "$STAGE" ]] && rm -rf -- "$STAGE"
    [[ -n "$WORK" && -d "$WORK" ]] && rm -rf -- "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

usage() { sed -n '2,/^set -Eeuo/{/^set -Eeuo/d;s/^# \{0,1\}//;p}' "$0"; }

# run_logged DESCRIPTION CMD...: run CMD with its output in a log; show the log's tail on failure.
run_logged() {
    local desc=$1
    shift
    local logf
    logf="$WORK/log.$((++LOG_N))"
    if ! "$@" >"$logf" 2>&1; then
        printf '[%s] ERROR: %s failed: %s\n' "$SELF" "$desc" "$*" >&2
        printf '[%s] ---- last lines of its output ----\n' "$SELF" >&2
        tail -n 40 "$logf" >&2 || true
        die "$desc failed (see above)"
    fi
}
LOG_N=0

ensure_work() {
    if [[ -z "$WORK" ]]; then
        WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/install-apptainer.XXXXXX")
    fi
}

# ---------------------------------------------------------------------------------------------
# Facts about the host
# ---------------------------------------------------------------------------------------------

detect_arch() {
    command -v dpkg >/dev/null 2>&1 || die "dpkg not found: this script is for Debian hosts"
    ARCH=$(dpkg --print-architecture)
    case "$ARCH" in
        amd64) TRIPLET=x86_64-linux-gnu LDNAME=ld-linux-x86-64.so.2 ;;
        arm64) TRIPLET=aarch64-linux-gnu LDNAME=ld-linux-aarch64.so.1 ;;
        *) die "unsupported architecture '$ARCH' (amd64 and arm64 are supported)" ;;
    esac
}

# The Debian mirror: $APPTAINER_DEBIAN_MIRROR, else the host's apt sources as the project's one
# parser of them reads them (containers/host/aptsources.py, standard library only, so the system
# python3 runs it before any venv exists): the first enabled `deb` source serving the host's own
# release (VERSION_CODENAME), deb822 *.sources first, then one-line sources.list files.
detect_mirror() {
    if [[ -n "${APPTAINER_DEBIAN_MIRROR:-}" ]]; then
        printf '%s\n' "${APPTAINER_DEBIAN_MIRROR%/}"
        return 0
    fi
    [[ -r "$APTSOURCES" ]] || die "$APTSOURCES not found; set APPTAINER_DEBIAN_MIRROR"
    command -v python3 >/dev/null 2>&1 \
        || die "python3 is needed to read the apt sources; install it or set APPTAINER_DEBIAN_MIRROR"
    python3 "$APTSOURCES"
}

pkg_installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true)" == ii* ]]
}

# ---------------------------------------------------------------------------------------------
# State checks
# ---------------------------------------------------------------------------------------------

prefix_bin() { printf '%s/usr/bin/apptainer\n' "$PREFIX"; }
conf_file() { printf '%s/usr/etc/apptainer/apptainer.conf\n' "$PREFIX"; }

# Prints the version of the private apptainer, or fails.
prefix_version() {
    local out
    out=$("$(prefix_bin)" --version 2>/dev/null) || return 1
    out=${out#apptainer version }
    [[ -n "$out" ]] || return 1
    printf '%s\n' "$out"
}

# 0 when the private prefix holds a working apptainer installed by this script.
prefix_ok() {
    [[ -f "$STAMP" && -x "$(prefix_bin)" ]] || return 1
    prefix_version >/dev/null
}

has_root_subid() { [[ -r "$1" ]] && grep -q '^root:[0-9]\+:[0-9]\+' "$1"; }

fuse_ok() {
    [[ -c /dev/fuse ]] || return 1
    if [[ "$FUSE_CHMOD" != 0 ]]; then
        local mode
        mode=$(stat -c %a /dev/fuse)
        [[ "$mode" == 666 ]] || return 1
    fi
    return 0
}

link_ok() {
    local l="$BIN_DIR/apptainer"
    [[ -L "$l" && "$(readlink -f "$l")" == "$(readlink -f "$(prefix_bin)")" ]] || return 1
    if [[ "$LINK_SINGULARITY" == 1 ]]; then
        l="$BIN_DIR/singularity"
        [[ -L "$l" && "$(readlink -f "$l")" == "$(readlink -f "$(prefix_bin)")" ]] || return 1
    fi
    return 0
}

# Collects what is missing or wrong in the configuration into the array CONFIG_PROBLEMS.
CONFIG_PROBLEMS=()
check_config() {
    CONFIG_PROBLEMS=()
    local p
    for p in "${HOST_PKGS[@]}"; do
        pkg_installed "$p" || CONFIG_PROBLEMS+=("host package $p not installed")
    done
    grep -q '^root default capabilities = file$' "$(conf_file)" 2>/dev/null \
        || CONFIG_PROBLEMS+=("apptainer.conf: root default capabilities is not 'file'")
    "$(prefix_bin)" capability list root 2>/dev/null | grep -q 'CAP_' \
        || CONFIG_PROBLEMS+=("no capabilities granted to root")
    has_root_subid /etc/subuid || CONFIG_PROBLEMS+=("no root range in /etc/subuid")
    has_root_subid /etc/subgid || CONFIG_PROBLEMS+=("no root range in /etc/subgid")
    fuse_ok || CONFIG_PROBLEMS+=("/dev/fuse missing or not mode 0666")
    link_ok || CONFIG_PROBLEMS+=("$BIN_DIR/apptainer does not point to $(prefix_bin)")
    [[ ${#CONFIG_PROBLEMS[@]} -eq 0 ]]
}

problems() {
    local p out=""
    for p in "${CONFIG_PROBLEMS[@]}"; do out+="${out:+; }$p"; done
    printf '%s' "$out"
}

# Prints "PATH: VERSION" for a working apptainer/singularity on PATH that is not ours.
foreign_runtime() {
    local name path real ours version
    ours=$(readlink -f "$(prefix_bin)" 2>/dev/null || true)
    for name in apptainer singularity; do
        path=$(command -v "$name" 2>/dev/null) || continue
        real=$(readlink -f "$path" 2>/dev/null || printf '%s' "$path")
        [[ -n "$ours" && "$real" == "$ours" ]] && continue
        [[ "$real" == "$PREFIX"/* ]] && continue
        version=$("$path" --version 2>/dev/null) || continue
        printf '%s: %s\n' "$path" "$version"
        return 0
    done
    return 1
}

# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------

install_host_packages() {
    local missing=() optional=() p
    for p in "${HOST_PKGS[@]}"; do
        pkg_installed "$p" || missing+=("$p")
    done
    for p in "${HOST_PKGS_OPTIONAL[@]}"; do
        pkg_installed "$p" || optional+=("$p")
    done
    if [[ ${#missing[@]} -eq 0 && ${#optional[@]} -eq 0 ]]; then
        log "host packages: all present"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    local apt_install=(apt-get install -y --no-install-recommends -o Dpkg::Use-Pty=0)
    if [[ ${#missing[@]} -gt 0 ]]; then
        log "host packages: installing ${missing[*]}"
        if ! "${apt_install[@]}" "${missing[@]}" >"$WORK/apt-install.log" 2>&1; then
            log "host packages: apt-get install failed; running apt-get update and retrying"
            run_logged "apt-get update" apt-get update
            run_logged "apt-get install ${missing[*]}" "${apt_install[@]}" "${missing[@]}"
        fi
    fi
    for p in "${optional[@]}"; do
        log "host packages: installing optional $p"
        "${apt_install[@]}" "$p" >"$WORK/apt-optional.log" 2>&1 \
            || warn "optional package $p could not be installed (ext3 overlays in user-namespace mode will not work)"
    done
}

# Downloads the suite's packages into $WORK/debs with a private apt state.
download_suite_packages() {
    local mirror=$1 st="$WORK/apt"
    [[ -r "$KEYRING" ]] || die "keyring $KEYRING not found (install debian-archive-keyring or set APPTAINER_DEBIAN_KEYRING)"
    mkdir -p "$st/lists/partial" "$st/cache/archives/partial" "$st/sources.list.d" \
        "$st/preferences.d" "$WORK/debs"
    : >"$st/status"
    printf 'deb [arch=%s signed-by=%s] %s %s main\n' "$ARCH" "$KEYRING" "$mirror" "$SUITE" \
        >"$st/sources.list"
    APT_OPTS=(
        -o "Dir::State::Lists=$st/lists"
        -o "Dir::State::status=$st/status"
        -o "Dir::Etc::SourceList=$st/sources.list"
        -o "Dir::Etc::SourceParts=$st/sources.list.d"
        -o "Dir::Etc::Preferences=$st/preferences"
        -o "Dir::Etc::PreferencesParts=$st/preferences.d"
        -o "Dir::Cache=$st/cache"
        -o "Acquire::Check-Valid-Until=false"
        -o "Acquire::Languages=none"
        -o "APT::Sandbox::User=root"
    )
    log "downloading the $SUITE package index from $mirror (signature checked with $KEYRING)"
    # --error-on=any: without it an unreachable mirror or a bad signature is only a warning.
    run_logged "apt-get update ($SUITE, private state)" \
        apt-get "${APT_OPTS[@]}" --error-on=any update
    compgen -G "$st/lists/*_Packages*" >/dev/null \
        || die "apt-get update fetched no package index for $SUITE from $mirror"
    log "downloading ${SUITE_PKGS[*]}"
    cd "$WORK/debs"
    run_logged "apt-get download" apt-get "${APT_OPTS[@]}" download "${SUITE_PKGS[@]}"
    cd - >/dev/null
    local n
    n=$(find "$WORK/debs" -maxdepth 1 -name '*.deb' | wc -l)
    [[ "$n" -eq ${#SUITE_PKGS[@]} ]] || die "expected ${#SUITE_PKGS[@]} .deb files, got $n"
}

# Refuses to delete a PREFIX that does not look like one of ours.
check_prefix_safe() {
    [[ "$PREFIX" == /* ]] || die "APPTAINER_PREFIX must be an absolute path (got '$PREFIX')"
    case "${PREFIX%/}" in
        "" | /bin | /boot | /dev | /etc | /home | /lib | /lib64 | /opt | /proc | /root | /run | /sbin | \
            /srv | /sys | /tmp | /usr | /usr/local | /var | /var/tmp)
            die "refusing to use $PREFIX as a private prefix" ;;
    esac
    if [[ -e "$PREFIX" && ! -f "$STAMP" ]] && [[ -n "$(ls -A "$PREFIX" 2>/dev/null)" ]] \
        && ! compgen -G "$PREFIX/usr/lib/*/apptainer" >/dev/null; then
        die "$PREFIX exists and was not made by this script; choose another APPTAINER_PREFIX"
    fi
}

# Unpacks the .debs into a staging folder and gives it the layout Apptainer's relocation expects.
unpack_prefix() {
    local d
    STAGE="${PREFIX%/}.staging.$$"
    rm -rf -- "$STAGE"
    mkdir -p "$STAGE"
    log "unpacking into $PREFIX"
    for d in "$WORK"/debs/*.deb; do
        run_logged "dpkg-deb -x $(basename "$d")" dpkg-deb -x "$d" "$STAGE"
    done
    # Apptainer computes its configuration and state folders from the location of its binary
    # (<prefix>/usr/bin/apptainer -> <prefix>/usr/etc, <prefix>/usr/var/lib); the starter
    # computes its prefix one level too low (<prefix>/usr/lib), hence the two symlinks there.
    [[ -d "$STAGE/etc/apptainer" ]] || die "the apptainer package has no etc/apptainer"
    mv "$STAGE/etc" "$STAGE/usr/etc"
    [[ -d "$STAGE/var" ]] && mv "$STAGE/var" "$STAGE/usr/var"
    mkdir -p "$STAGE/usr/var/lib/apptainer/mnt/session"
    ln -s ../etc "$STAGE/usr/lib/etc"
    ln -s ../var "$STAGE/usr/lib/var"
    # Apptainer looks for squashfuse_ll next to its starter before it looks on PATH.
    local abin="$STAGE/usr/lib/$TRIPLET/apptainer/bin"
    [[ -x "$abin/starter" ]] || die "no starter in the apptainer package ($abin)"
    [[ -x "$STAGE/usr/bin/squashfuse_ll" ]] || die "no squashfuse_ll in the squashfuse package"
    ln -s ../../../../bin/squashfuse_ll "$abin/squashfuse_ll"
    [[ -e "$abin/squashfuse_ll" ]] || die "squashfuse_ll symlink is dangling"

    if [[ -e "$PREFIX" ]]; then
        log "removing the previous $PREFIX"
        rm -rf -- "$PREFIX"
    fi
    mkdir -p "$(dirname "$PREFIX")"
    mv "$STAGE" "$PREFIX"
    STAGE=""
}

# Points every dynamically linked program in the prefix at the prefix's loader and libraries.
patch_prefix() {
    local libdir="$PREFIX/usr/lib/$TRIPLET" ld f patched=0 list
    ld="$libdir/$LDNAME"
    [[ -e "$ld" ]] || die "the loader $ld is missing from the libc6 package"
    local dirs=() d
    for d in "$PREFIX/usr/bin" "$PREFIX/usr/sbin" "$PREFIX/usr/lib/$TRIPLET/apptainer/bin"; do
        [[ -d "$d" ]] && dirs+=("$d")
    done
    while IFS= read -r -d '' f; do
        [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
        patchelf --print-interpreter "$f" >/dev/null 2>&1 || continue # static, or a library
        # --force-rpath writes DT_RPATH, which (unlike DT_RUNPATH) also applies to the
        # libraries' own dependencies, so none of them falls back to the host's older glibc.
        run_logged "patchelf $f" patchelf --set-interpreter "$ld" --force-rpath --set-rpath "$libdir" "$f"
        # Every library must resolve, and inside the prefix.
        list=$("$ld" --list "$f" 2>&1) || die "cannot list the libraries of $f: $list"
        if grep -q 'not found' <<<"$list"; then
            die "unresolved libraries for $f: $(grep 'not found' <<<"$list" | tr -s ' \t\n' ' ')"
        fi
        if grep '=>' <<<"$list" | grep -v "=> $PREFIX/" | grep -q '/'; then
            warn "$f uses libraries outside $PREFIX: $(grep '=>' <<<"$list" | grep -v "=> $PREFIX/" | tr -s ' \t\n' ' ')"
        fi
        patched=$((patched + 1))
        log "patched $(basename "$f")"
    done < <(find "${dirs[@]}" -maxdepth 1 -type f -perm -u+x -print0)
    [[ "$patched" -ge 3 ]] || die "patched only $patched programs; expected apptainer, starter and squashfuse_ll"
}

# Names of Linux capabilities by bit number (linux/capability.h).
readonly CAP_NAMES=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE
    SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME
    SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG
    WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE)

configure_capabilities() {
    local conf app avail hexcap i name grant=() missing=()
    conf=$(conf_file)
    app=$(prefix_bin)
    [[ -f "$conf" ]] || die "$conf not found"
    # The default (full) makes every root exec request all capabilities, which fails where root
    # does not hold them all ("Requesting capability set ... while permitted ...").
    if grep -q '^[#[:space:]]*root default capabilities[[:space:]]*=' "$conf"; then
        sed -i -E 's/^[#[:space:]]*root default capabilities[[:space:]]*=.*/root default capabilities = file/' "$conf"
    else
        printf '\nroot default capabilities = file\n' >>"$conf"
    fi
    grep -q '^root default capabilities = file$' "$conf" || die "could not set root default capabilities in $conf"

    hexcap=$(awk '/^CapPrm:/ {print $2}' /proc/self/status)
    [[ -n "$hexcap" ]] || die "cannot read CapPrm from /proc/self/status"
    avail=$("$app" capability avail 2>/dev/null | grep -o '^CAP_[A-Z_]*' || true)
    [[ -n "$avail" ]] || die "'apptainer capability avail' listed nothing"
    for i in "${!CAP_NAMES[@]}"; do
        name="CAP_${CAP_NAMES[$i]}"
        grep -qx "$name" <<<"$avail" || continue
        if (((16#$hexcap >> i) & 1)); then
            grant+=("$name")
        else
            missing+=("$name")
        fi
    done
    [[ ${#grant[@]} -gt 0 ]] || die "root holds none of the capabilities Apptainer knows"
    log "capabilities: root default capabilities = file; granting root ${#grant[@]} capabilities${missing[*]:+ (root lacks: ${missing[*]})}"
    local IFS=,
    run_logged "apptainer capability add" "$app" capability add --user root "${grant[*]}"
}

# Adds "root:START:65536" to FILE when root has no range there, after every existing range.
ensure_subid() {
    local f=$1 start
    if has_root_subid "$f"; then
        log "$f: root already has a range ($(grep -m1 '^root:' "$f"))"
        return 0
    fi
    start=$SUBID_MIN
    if [[ -s "$f" ]]; then
        start=$(awk -F: -v min="$SUBID_MIN" '
            BEGIN { s = min }
            NF >= 3 && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { if ($2 + $3 > s) s = $2 + $3 }
            END { print s }' "$f")
    fi
    printf 'root:%s:%s\n' "$start" "$SUBID_COUNT" >>"$f"
    log "$f: added root:$start:$SUBID_COUNT"
}

ensure_fuse() {
    if [[ ! -c /dev/fuse ]]; then
        modprobe fuse >/dev/null 2>&1 || true
        if [[ ! -c /dev/fuse ]]; then
            mknod -m 0666 /dev/fuse c 10 229 || die "/dev/fuse is missing and could not be created"
            log "/dev/fuse: created"
        fi
    fi
    if [[ "$FUSE_CHMOD" != 0 && "$(stat -c %a /dev/fuse)" != 666 ]]; then
        chmod 0666 /dev/fuse
        log "/dev/fuse: mode set to 0666 (as Debian's udev rules do; not kept across reboots here)"
    else
        log "/dev/fuse: $(stat -c '%A' /dev/fuse)"
    fi
}

link_one() {
    local name=$1 target l
    target=$(prefix_bin)
    l="$BIN_DIR/$name"
    mkdir -p "$BIN_DIR"
    if [[ -e "$l" || -L "$l" ]] && [[ "$(readlink -f "$l")" != "$(readlink -f "$target")" ]]; then
        if [[ -L "$l" ]]; then
            warn "replacing the symlink $l -> $(readlink "$l")"
        else
            warn "moving the existing $l aside to $l.before-$SELF"
            mv -f "$l" "$l.before-$SELF"
        fi
    fi
    ln -sfn "$target" "$l"
    log "linked $l -> $target"
}

configure() {
    configure_capabilities
    ensure_subid /etc/subuid
    ensure_subid /etc/subgid
    ensure_fuse
    link_one apptainer
    [[ "$LINK_SINGULARITY" == 1 ]] && link_one singularity
    return 0
}

# Offline smoke test: a sandbox holding the host's sh, built into a SIF as plain root, run as
# root (kernel squashfs mount), rebuilt with --fakeroot through a %post, and run with --fakeroot
# (squashfuse_ll in a user namespace).
smoke_test() {
    local app sh s out lib
    app=$(prefix_bin)
    s="$WORK/smoke"
    sh=$(readlink -f /bin/sh)
    mkdir -p "$s/sandbox/usr/bin" "$s/sandbox/etc" "$s/sandbox/tmp" "$s/sandbox/root"
    ln -s usr/bin "$s/sandbox/bin"
    cp "$sh" "$s/sandbox/usr/bin/sh"
    while IFS= read -r lib; do
        [[ -n "$lib" ]] && cp -L --parents "$lib" "$s/sandbox/"
    done < <(ldd "$sh" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$s/sandbox/etc/passwd"
    printf 'root:x:0:\n' >"$s/sandbox/etc/group"
    printf 'Bootstrap: localimage\nFrom: %s\n\n%%post\n    echo post-ok > /smoke-post\n' \
        "$s/base.sif" >"$s/smoke.def"

    log "smoke test: build from a sandbox, exec, build --fakeroot with %post, exec --fakeroot"
    run_logged "apptainer build (sandbox -> SIF)" "$app" build "$s/base.sif" "$s/sandbox"
    out=$("$app" exec "$s/base.sif" /bin/sh -c 'echo exec-ok' 2>"$s/exec.err") \
        || die "apptainer exec failed: $(cat "$s/exec.err")"
    [[ "$out" == exec-ok ]] || die "apptainer exec printed '$out' instead of 'exec-ok'"
    run_logged "apptainer build --fakeroot (localimage + %post)" \
        "$app" build --fakeroot "$s/smoke.sif" "$s/smoke.def"
    # shellcheck disable=SC2016 # $x is expanded by the container's shell
    out=$("$app" exec --fakeroot "$s/smoke.sif" /bin/sh -c 'read -r x < /smoke-post; echo "$x"' 2>"$s/exec.err") \
        || die "apptainer exec --fakeroot failed: $(cat "$s/exec.err")"
    [[ "$out" == post-ok ]] || die "apptainer exec --fakeroot printed '$out' instead of 'post-ok'"
    log "smoke test: passed"
}

write_stamp() {
    local version=$1 mirror=$2
    {
        printf 'version=%s\n' "$version"
        printf 'suite=%s\n' "$SUITE"
        printf 'mirror=%s\n' "$mirror"
        printf 'installed=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$STAMP"
}

# ---------------------------------------------------------------------------------------------

main() {
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --force) FORCE=1 ;;
            --check) CHECK_ONLY=1 ;;
            -h | --help)
                usage
                exit 0
                ;;
            *) die "unknown argument '$1' (try --help)" ;;
        esac
        shift
    done
    PREFIX="${PREFIX%/}"
    STAMP="$PREFIX/.installed-by-$SELF"

    [[ "$(id -u)" -eq 0 ]] || die "run this as root"
    detect_arch

    if [[ "$CHECK_ONLY" == 1 ]]; then
        local rc=0
        if prefix_ok; then
            log "found apptainer $(prefix_version) in $PREFIX"
        elif foreign_runtime >/dev/null; then
            log "not installed by this script; on PATH: $(foreign_runtime)"
            exit 0
        else
            log "no working apptainer in $PREFIX"
            exit 1
        fi
        if ! check_config; then
            local p
            for p in "${CONFIG_PROBLEMS[@]}"; do log "problem: $p"; done
            rc=1
        fi
        if [[ "$SKIP_SMOKE" != 1 ]]; then
            ensure_work
            smoke_test
        fi
        exit "$rc"
    fi

    local need_prefix=1
    if [[ "$FORCE" != 1 ]]; then
        if prefix_ok; then
            need_prefix=0
            if check_config; then
                log "apptainer $(prefix_version) is installed and configured in $PREFIX" \
                    "($BIN_DIR/apptainer -> $(prefix_bin)); nothing to do (--force reinstalls)"
                exit 0
            fi
            log "apptainer $(prefix_version) found in $PREFIX; to fix: $(problems)"
        else
            local found
            if found=$(foreign_runtime); then
                log "a working runtime is already on PATH: $found"
                log "nothing to do (run with --force to install the Debian $SUITE apptainer anyway)"
                exit 0
            fi
        fi
    fi

    ensure_work
    log "prefix $PREFIX, architecture $ARCH"
    install_host_packages

    local mirror="" version
    if [[ "$need_prefix" == 1 ]]; then
        check_prefix_safe
        mirror=$(detect_mirror) || die "no Debian mirror found in /etc/apt/sources.list{,.d}; set APPTAINER_DEBIAN_MIRROR"
        local t0=$SECONDS
        download_suite_packages "$mirror"
        unpack_prefix
        patch_prefix
        version=$(prefix_version) || die "the installed apptainer does not run: $("$(prefix_bin)" --version 2>&1 || true)"
        log "installed apptainer $version in $((SECONDS - t0)) s ($(du -sh "$PREFIX" | cut -f1))"
        if [[ -n "$WANT_VERSION" && "$version" != "$WANT_VERSION"* ]]; then
            warn "expected apptainer $WANT_VERSION from $SUITE, got $version"
        fi
    else
        version=$(prefix_version)
        mirror=$(sed -n 's/^mirror=//p' "$STAMP")
    fi

    configure
    rm -f -- "$STAMP"
    if [[ "$SKIP_SMOKE" != 1 ]]; then
        smoke_test
    fi
    write_stamp "$version" "$mirror"
    check_config || die "configuration still incomplete: $(problems)"
    log "done in ${SECONDS} s: $("$BIN_DIR/apptainer" --version) ($BIN_DIR/apptainer -> $(prefix_bin))"
}

# Sourced (tests call detect_mirror), it only defines the functions.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
