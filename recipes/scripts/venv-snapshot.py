"""Installed-environment snapshots: the venv an install produced, kept in the build host's package
cache, so that a rebuild whose pip resolution differs by a package or two copies the venv it
already installed and lets pip add only what is new, instead of unpacking every wheel again.

Runs inside ``%post`` with the image's own python3 (3.6 or newer, standard library only):

    python3 venv-snapshot.py restore STORE WHEELHOUSE VENV   exit 0: VENV restored; 3: no
                                                             snapshot applies (VENV untouched)
    python3 venv-snapshot.py save STORE WHEELHOUSE VENV      keep VENV as a snapshot
    python3 venv-snapshot.py prefetch STORE DEST [link]      copy (link) the likeliest ahead
    python3 venv-snapshot.py check DEST                      check what was linked ahead
    python3 venv-snapshot.py keep-fresh STORE VENV [replace] keep a venv python3 -m venv made
    python3 venv-snapshot.py restore STORE WHEELHOUSE VENV DEST   ... using that copy if it fits

STORE is ``<cache>/envs/<key>``: the tool's key names everything but the resolution that decides
what an install writes (the base image's sha256, the definition, its arguments, these scripts),
so a snapshot is only ever offered to a build on the same base, of the same definition, into the
same venv path. WHEELHOUSE holds exactly the files this build's resolution chose; a snapshot
records the sha256 of the files it was installed from. A snapshot is used only when every one of
those files is in this build's set (the same versions, byte for byte): pip then sees those
packages installed and installs only the rest, from the same wheelhouse, so the venv ends as a
fresh install of the whole set would (the benchmark compares every file). Any other set, a
removal or a version change, installs from scratch.

Ahead of the restore: the likeliest snapshot (the most recently used) is copied and checked
while pip downloads, or, by a definition's ``%setup`` on the host where the root and the cache
are plain folders on one filesystem, hard-linked (nothing written; in ``%post`` the cache is a
bind mount, which links cannot cross). With links the image's venv files are the cache's files
until the build ends: pip writes every file it installs to a new inode (it unlinks first), the
install script only removes files and writes new ones after, and a definition that links must
not rewrite a venv file in place after the install (``>>``, ``chmod``, ``sed -i`` is fine): that
would change the snapshot (which the next restore then refuses) and any build restoring it.

Trust: the snapshot's manifest (sha256, size and mode of every file, every link's target) is
made from the venv the build installed; a restored copy is checked against it file by file and
thrown away, with the snapshot, when anything differs or is missing or extra, and the build
installs from scratch. A snapshot appears under its final name only once complete (written to a
temporary folder and renamed). A lock on the store keeps a prune from removing a snapshot while
another build copies it.
"""

import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time

#: Snapshots kept per store (the newest used): each is a whole venv (about 0.8 GB for cpu).
KEEP = 2
#: A build that restored a snapshot and added fewer files than this keeps no new one: adding
#: them again costs less than copying a whole venv into the cache.
NEW_AT = 4
#: A temporary folder older than this is a killed build's: removed when a snapshot is saved.
STALE_S = 6 * 3600
WHEELS = "wheels.txt"
#: The store's venv as ``python3 -m venv`` made it, before pip installed anything (no
#: wheels.txt: never offered as a snapshot).
FRESH = "fresh"
MANIFEST = "manifest.txt"
USED = "used"
#: restore's exit status when no snapshot applies (the venv is left as it was); any other
#: failure removes what it copied and exits 1, and the install script starts a new venv.
NONE = 3


def say(message):
    print("environment snapshot: " + message, flush=True)


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_set(wheelhouse):
    """'sha256  name' of every file the resolution chose, sorted."""
    return sorted("%s  %s" % (file_sha256(os.path.join(wheelhouse, name)), name)
                  for name in os.listdir(wheelhouse)
                  if os.path.isfile(os.path.join(wheelhouse, name)))


def set_id(lines):
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def manifest(root):
    """One line per entry under ``root``: 'f sha256 size mode path', 'l target path',
    'd mode path'; sorted, so two trees compare line by line."""
    lines = []
    for parent, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(parent, name)
            rel = os.path.relpath(path, root)
            info = os.lstat(path)
            mode = "%o" % stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                lines.append("l %s %s" % (os.readlink(path), rel))
            elif stat.S_ISDIR(info.st_mode):
                lines.append("d %s %s" % (mode, rel))
            elif stat.S_ISREG(info.st_mode):
                lines.append("f %s %d %s %s" % (file_sha256(path), info.st_size, mode, rel))
            else:
                lines.append("? %s" % rel)  # nothing pip installs: never matches a restore
    return sorted(lines)


class Locked:
    """flock on the store's lock file: shared to read a snapshot, exclusive to remove one."""

    def __init__(self, store, exclusive):
        self.path = os.path.join(store, ".lock")
        self.mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, self.mode)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def snapshots(store):
    """(folder, set of wheel lines) of every complete snapshot in the store."""
    found = []
    for name in sorted(os.listdir(store)):
        folder = os.path.join(store, name)
        if name.startswith(".") or not os.path.isfile(os.path.join(folder, MANIFEST)):
            continue
        try:
            with open(os.path.join(folder, WHEELS)) as handle:
                found.append((folder, set(handle.read().splitlines())))
        except OSError:
            continue
    return found


def used(folder):
    """When a snapshot was last kept or restored (0 when it is gone)."""
    try:
        return os.stat(os.path.join(folder, USED)).st_mtime
    except OSError:
        return 0.0


def copy_checked(folder, dest):
    """Copy the snapshot's venv to ``dest`` and check the copy against its manifest: '' when it
    matches, else what differs (the copy is removed then). Called with the store locked."""
    shutil.rmtree(dest, ignore_errors=True)
    try:
        subprocess.check_call(["cp", "-a", os.path.join(folder, "venv"), dest])
    except (OSError, subprocess.CalledProcessError) as error:
        shutil.rmtree(dest, ignore_errors=True)
        return "could not be copied (%s)" % error
    return verified(dest, os.path.join(folder, MANIFEST))


def verified(venv, listing):
    """'' when the tree at ``venv`` is the one the manifest file ``listing`` describes, else
    what differs (the tree is removed then)."""
    try:
        with open(listing) as handle:
            expected = handle.read().splitlines()
        got = manifest(venv)
    except OSError as error:
        shutil.rmtree(venv, ignore_errors=True)
        return "could not be read (%s)" % error
    if got == expected:
        return ""
    shutil.rmtree(venv, ignore_errors=True)
    bad = sorted(set(got) ^ set(expected))
    return "does not match its manifest (%d entries differ, first: %s)" % (
        len(bad), bad[0].split()[-1] if bad else "?")


def link_problem(folder, dest):
    """Why files of ``folder`` cannot be hard-linked beside ``dest`` ('' when they can): another
    filesystem, or another mount of the same one (a bind), refuses with EXDEV."""
    probe = dest + ".link-probe"
    try:
        os.link(os.path.join(folder, MANIFEST), probe)
    except OSError as error:
        return error.strerror or str(error)
    os.unlink(probe)
    return ""


def prefetch(store, dest, mode="copy"):
    """Copy (``copy``, in %post while pip downloads) or hard-link (``link``, in %setup on the
    host, where the root and the cache are plain folders) the most recently used snapshot into
    ``dest``, beside the venv on the image's filesystem: if the resolution then picks it,
    restoring it is a rename. ``dest/source`` names the snapshot, ``dest/how`` how it came,
    ``dest/problem`` what was wrong with it ('' nothing). A copy is checked here; links are
    checked by :func:`check` in %post, while the venv is made and pip downloads (the
    snapshot's manifest is linked with them), and by the restore if that did not run.
    Linking also brings the store's fresh venv (:func:`keep_fresh`) to ``dest/fresh``."""
    if not os.path.isdir(store):
        return 0
    with Locked(store, exclusive=False):
        kept = sorted((folder for folder, _ in snapshots(store)), key=used)
        fresh, link = os.path.join(store, FRESH), mode == "link"
        if not kept and not (link and os.path.isdir(fresh)):
            return 0
        os.makedirs(dest, exist_ok=True)
        if link:
            why = link_problem(kept[-1] if kept else fresh, dest)
            if why:
                shutil.rmtree(dest, ignore_errors=True)
                say("not linked ahead (%s): copied in %%post instead" % why)
                return 0
            why = linked(fresh, os.path.join(dest, FRESH)) if os.path.isdir(fresh) else ""
            if why:
                say("the fresh venv %s: made again in %%post" % why)
            if not kept:
                return 0
            problem = linked(kept[-1], dest) or None
        else:
            problem = copy_checked(kept[-1], os.path.join(dest, "venv"))
    marks = [("source", os.path.basename(kept[-1])), ("how", "linked" if link else "copied")]
    for name, text in marks + ([("problem", problem)] if problem is not None else []):
        with open(os.path.join(dest, name), "w") as handle:
            handle.write(text)
    return 0


def linked(folder, dest):
    """Hard-link ``folder``'s venv and manifest into ``dest`` ('' done, else why not; what
    was linked is removed then)."""
    try:
        os.makedirs(dest, exist_ok=True)
        subprocess.check_call(["cp", "-al", os.path.join(folder, "venv"),
                               os.path.join(dest, "venv")])
        os.link(os.path.join(folder, MANIFEST), os.path.join(dest, MANIFEST))
        return ""
    except (OSError, subprocess.CalledProcessError) as error:
        shutil.rmtree(os.path.join(dest, "venv"), ignore_errors=True)
        return "could not be linked (%s)" % error


def keep_fresh(store, venv, replace=False):
    """Keep ``venv``, just made by ``python3 -m venv``, as the store's fresh venv: a later
    build of the same key links it ahead and checks it instead of making one (pip and
    setuptools unpacked again: ~2 s). ``replace``: the kept one failed its check."""
    final = os.path.join(store, FRESH)
    os.makedirs(store, mode=0o700, exist_ok=True)
    if replace:
        with Locked(store, exclusive=True):
            shutil.rmtree(final, ignore_errors=True)
    if os.path.isdir(final):
        return 0
    try:
        entries, _ = keep(store, FRESH, venv)
    except OSError as error:
        say("the fresh venv not kept (%s): this build goes on without it" % error)
        return 0
    say("the fresh venv kept for later builds (%d entries)" % entries)
    return 0


def keep(store, name, venv, files=()):
    """Copy ``venv`` into the store as ``name``, with its manifest and ``files`` ((file name,
    lines) pairs): written to a temporary folder and renamed, so it appears only complete (a
    concurrent build that kept the same name first wins), then the store is pruned. Returns
    (the manifest's entries, snapshots pruned)."""
    final = os.path.join(store, name)
    temp = os.path.join(store, ".tmp-%s-%d" % (name, os.getpid()))
    os.mkdir(temp, 0o700)
    try:
        listing = manifest(venv)
        copied = subprocess.run(["cp", "-a", venv, os.path.join(temp, "venv")],
                                stderr=subprocess.PIPE, universal_newlines=True)
        if copied.returncode:  # a full disk, most often: the first line says it once
            raise OSError((copied.stderr.strip().splitlines() or ["cp failed"])[0])
        for file_name, lines in ((MANIFEST, listing),) + tuple(files):
            with open(os.path.join(temp, file_name), "w") as handle:
                handle.write("".join(line + "\n" for line in lines))
        with Locked(store, exclusive=True):
            if os.path.isdir(final):
                shutil.rmtree(temp)
            else:
                os.rename(temp, final)
            removed = prune(store)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return len(listing), removed


def check(dest):
    """Check what :func:`prefetch` linked into ``dest`` against the manifest linked with it;
    ``dest/problem`` says the outcome (the venv is removed if it does not match)."""
    problem = verified(os.path.join(dest, "venv"), os.path.join(dest, MANIFEST))
    with open(os.path.join(dest, "problem"), "w") as handle:
        handle.write(problem)
    return 0


def prefetched(dest, name):
    """The prefetch's (venv, problem, how) if it is of snapshot ``name``, else Nones; a linked
    one not checked yet (:func:`check` did not run) is checked now."""
    found = {}
    for part in ("source", "how"):
        try:
            with open(os.path.join(dest, part)) as handle:
                found[part] = handle.read()
        except OSError:
            return None, "", ""
    if found["source"] != name:
        return None, "", ""
    if not os.path.isfile(os.path.join(dest, "problem")):
        check(dest)
    with open(os.path.join(dest, "problem")) as handle:
        return os.path.join(dest, "venv"), handle.read(), found["how"]


def restore(store, wheelhouse, venv, ahead=None):
    """Replace ``venv`` with the best snapshot for this wheelhouse (``ahead``: what
    :func:`prefetch` copied, used if it is that one, removed in any case)."""
    try:
        return restore_best(store, wheelhouse, venv, ahead)
    finally:
        if ahead:
            shutil.rmtree(ahead, ignore_errors=True)


def restore_best(store, wheelhouse, venv, ahead):
    if not os.path.isdir(store) or not snapshots(store):  # (the fresh venv may be there)
        say("none yet for this base and definition (this build makes the first)")
        return NONE
    wanted = set(wheel_set(wheelhouse))
    with Locked(store, exclusive=False):
        usable = [(len(lines), used(folder), folder) for folder, lines in snapshots(store)
                  if lines <= wanted]
        if not usable:
            say("none of the %d kept was installed from a subset of this build's %d files: "
                "installing all" % (len(snapshots(store)), len(wanted)))
            return NONE
        reused, _, folder = max(usable)
        label = os.path.basename(folder)[:12]
        copied, problem, how = (prefetched(ahead, os.path.basename(folder)) if ahead
                                else (None, "", ""))
        shutil.rmtree(venv, ignore_errors=True)
        if copied and not problem:
            os.rename(copied, venv)
            how = ("linked ahead of %post and checked" if how == "linked"
                   else "copied and checked while pip downloaded")
        else:
            problem = problem or copy_checked(folder, venv)
            how = "every file checked against its manifest"
    if problem:
        say("%s %s: thrown away, installing all" % (label, problem))
        shutil.rmtree(venv, ignore_errors=True)
        with Locked(store, exclusive=True):
            shutil.rmtree(folder, ignore_errors=True)
        return 1
    try:
        os.utime(os.path.join(folder, USED))
    except OSError:
        pass  # pruned since it was copied: the copy was checked, it stands
    say("%s restored (%s): installed from %d of this build's %d files; pip installs the "
        "other %d" % (label, how, reused, len(wanted), len(wanted) - reused))
    return 0


def save(store, wheelhouse, venv):
    os.makedirs(store, mode=0o700, exist_ok=True)
    lines = wheel_set(wheelhouse)
    ident = set_id(lines)
    final = os.path.join(store, ident)
    if os.path.isdir(final):
        os.utime(os.path.join(final, USED))
        say("%s kept already (the same %d files)" % (ident[:12], len(lines)))
        return 0
    wanted = set(lines)
    covered = max((len(kept) for _, kept in snapshots(store) if kept <= wanted), default=0)
    if covered and len(wanted) - covered < NEW_AT:
        say("not kept again: one kept covers all but %d of these %d files"
            % (len(wanted) - covered, len(wanted)))
        return 0
    started = time.time()
    try:
        entries, removed = keep(store, ident, venv, ((WHEELS, lines), (USED, [])))
    except OSError as error:  # the cache's disk, not the image: the build goes on without it
        say("not kept (%s): this build goes on without it" % error)
        return 0
    say("%s kept (%d files, %d entries, %.1f s)%s"
        % (ident[:12], len(lines), entries, time.time() - started,
           "; removed %d older" % removed if removed else ""))
    return 0


def prune(store):
    """Keep the :data:`KEEP` most recently used snapshots; remove stale temporary folders.
    Called with the store's lock held exclusively."""
    kept = sorted((folder for folder, _ in snapshots(store)), key=used, reverse=True)
    removed = 0
    for folder in kept[KEEP:]:
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    for name in os.listdir(store):
        path = os.path.join(store, name)
        if name.startswith(".tmp-") and time.time() - os.lstat(path).st_mtime > STALE_S:
            shutil.rmtree(path, ignore_errors=True)
    return removed


def main(argv):
    if argv[1:2] == ["prefetch"] and len(argv) in (4, 5) and argv[4:] in ([], ["copy"],
                                                                          ["link"]):
        return prefetch(*argv[2:])
    if argv[1:2] == ["check"] and len(argv) == 3:
        return check(argv[2])
    if argv[1:2] == ["keep-fresh"] and len(argv) in (4, 5) and argv[4:] in ([], ["replace"]):
        return keep_fresh(argv[2], argv[3], bool(argv[4:]))
    if argv[1:2] == ["restore"] and len(argv) in (5, 6):
        return restore(*argv[2:])
    if argv[1:2] == ["save"] and len(argv) == 5:
        return save(*argv[2:])
    sys.exit("usage: venv-snapshot.py prefetch STORE DEST [copy|link] | check DEST | restore "
             "STORE WHEELHOUSE VENV [DEST] | save STORE WHEELHOUSE VENV | keep-fresh STORE "
             "VENV [replace]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
