"""``invoke publish``: shared images for a whole site, safely (``verify`` checks the result).

Publishing refuses an image that has not passed its checks (:mod:`containers.publish.checks`:
``apptainer test`` and a 2-rank smoke run, found as a passing ``verdict.json`` for the image's
exact sha256, or run now by the caller's ``quick_check``), then, under ``<dest>/.publish.lock``
so concurrent publishes are serialised:

1. copies the image to a temp name in the target folder, hashing as it reads (the copy must
   match the build's sha256), fsyncs, signs the temp copy (so a signed version never appears
   unsigned), writes the ``sha256sum`` file of the final bytes, then renames it into place;
2. writes the Lmod module file and the ``<target>-exec`` wrapper, then the catalogue (atomic,
   the source of truth), then moves ``latest`` and the module ``default`` (atomic symlinks);
3. prunes to ``--keep N`` versions (never the one ``latest`` names), and sets and re-checks
   permissions (group as configured, never world-writable).

A publish killed at any point leaves every final name either old or complete: only temp files
(``.<name>.<pid>.partial`` / ``.tmp``), which ``verify`` ignores and the next publish removes.
The layout is described in :mod:`containers.publish.catalogue`. Nothing inside ``<dest>`` is
reached through a link (:func:`containers.publish.permissions.unsafe_layout`, checked before the
first write), and every name that becomes a path (target, version, and each one read back from
the catalogue) passes the one name rule first.

Everything here takes plain values (a :class:`PublishRequest`, the Target, Site and Settings, a
Runtime, a ``quick_check`` function): the application layer gathers them from the project, so
publishing sits below it and knows nothing of projects or how a smoke run is started.

``CONTAINERS_PUBLISH_COPY_DELAY`` (seconds per 8 MiB chunk) slows the copy down: a fault
injection hook, so tests can kill a publish while it is copying.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from containers.errors import (ConfigError, ImageMissing, StateError, UsageError, VerdictFailed,
                               os_failure)
from containers.files import (copy_hashing, fsync_path, not_a_folder, read_regular,
                              refuse_replacing, sha256_file, temp_name, temp_symlink, write_temp)
from containers.host.facts import gpu_kinds_here, utc_now
from containers.host.runtime import Runtime
from containers.image.inspect import sbom_path
from containers.image import provenance as image_provenance
from containers.image.provenance import LABEL_PREFIX
from containers.inputs.flags import GROUP
from containers.inputs.recipes import Target
from containers.inputs.schema import TEMP_ENDINGS, check_name, is_env_name, name_problem
from containers.inputs.settings import Settings
from containers.inputs.sites import Gpu, Site
from containers.locking import file_lock
from containers.progress import byte_progress
from containers.publish import catalogue as cat, signing
from containers.publish.checks import QuickCheck, ensure_checks, skipped
from containers.publish.diff import shown
from containers.publish.modulefile import (ModuleSpec, exec_name, render_exec_wrapper,
                                           render_modulefile)
from containers.publish.permissions import (Modes, apply_modes, managed_paths, mode_problems,
                                            open_parent, resolve_group, umask, unsafe_layout)
from containers.publish.page import batch_job, render_diff_page, render_page
from containers.records import BuildRecord, CatalogueEntry, json_text
from containers.report import Say, human_bytes, say_line

COPY_DELAY_ENV = "CONTAINERS_PUBLISH_COPY_DELAY"
#: Beside each published image: its SBOM (as the build wrote it, :func:`sbom_path`) and the
#: diff against the version it replaced (``<version>.diff.json``), with the same diff as a page
#: people read (``<version>.diff.html``, linked from the catalogue page).
DIFF_SUFFIX = ".diff.json"
DIFF_PAGE_SUFFIX = ".diff.html"
#: The caller's review of a version before it is published (site fit, diff against latest,
#: release gate): (plan, checks, say) -> what the entry records ({"fit", "gate", "stack",
#: "diff"}); raises VerdictFailed to refuse it.
Review = Callable[["PublishPlan", dict, Say], dict]
#: The most an image's build record may hold (its pip freeze is the bulk of it).
PROVENANCE_LIMIT = 16 << 20
#: Free space a publish needs beyond the image's size: its checksum, module file, wrapper,
#: catalogue (which keeps every version's pip freeze) and a signature, with room to spare.
SPACE_MARGIN = 64 << 20


# ---------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class PublishRequest:
    """What ``invoke publish`` was asked, checked once, here, before anything is looked at."""

    target: str
    dest: Path
    version: str | None = None
    sign: bool = False
    keep: int | None = None
    group: str | None = None
    force: bool = False
    skip_checks: bool = False

    def __post_init__(self) -> None:
        """The flags' own rules, without looking at the disk (the folder as it is there:
        :func:`check_dest`, which :func:`plan_publish` runs first)."""
        if not self.target:
            raise UsageError("name the image target to publish", flag="--target")
        if problem := name_problem("target", self.target):
            raise UsageError(problem, flag="--target")
        if not self.dest:
            raise UsageError("name the site folder to publish into", flag="--dest")
        object.__setattr__(self, "dest", Path(os.path.abspath(Path(self.dest).expanduser())))
        if self.version is not None:
            cat.validate_version(self.version)
        GROUP("--group", self.group)
        if self.keep is not None and self.keep < 1:
            raise UsageError(f"must be at least 1 (got {self.keep})", flag="--keep")


def check_dest(dest: Path) -> None:
    """Refuse, in one line naming ``--dest``, a folder publishing cannot safely write into: a
    file (or one below a file), a world-writable folder (anyone could replace published images)
    or one under a world-writable parent without the sticky bit (anyone could swap it)."""
    problem = not_a_folder(dest)
    if problem:
        raise UsageError(problem, flag="--dest")
    if dest.exists() and stat.S_IMODE(dest.stat().st_mode) & 0o002:
        raise UsageError(f"{dest} is world-writable: anyone could replace published images; "
                         "publish into a folder only admins can write", flag="--dest")
    problem = open_parent(dest)
    if problem:
        raise UsageError(problem, flag="--dest")


# ------------------------------------------------------------------------------------ plan
@dataclass(frozen=True)
class PublishPlan:
    """Where everything goes and what will be done; computed before anything is touched."""

    target: Target
    site: Site
    image: Path
    provenance: BuildRecord
    version: str
    dest: Path
    sign: bool
    keep: int | None
    force: bool
    skip_checks: bool
    modes: Modes
    #: Signing key, results folder and the versions it pins (``containers.publish_pinned``).
    settings: Settings
    #: The site's directives of the batch job the catalogue page shows (None: no scheduler).
    batch_preamble: tuple[str, ...] | None = None

    @property
    def gpu(self) -> Gpu:
        """The GPU kind the image must run on: the target's, else its site's (none: CPU)."""
        return self.target.gpu if self.target.gpu != Gpu.NONE else self.site.gpus.kind

    @property
    def folder(self) -> Path:
        return self.dest / self.target.name

    @property
    def sif(self) -> Path:
        return self.folder / cat.sif_name(self.version)

    @property
    def temp(self) -> Path:
        return temp_name(self.sif, "partial")

    @property
    def module_dir(self) -> Path:
        return self.dest / "modules" / self.target.name

    @property
    def module(self) -> Path:
        return self.module_dir / f"{self.version}.lua"

    @property
    def exec_path(self) -> Path:
        return self.folder / "bin" / exec_name(self.target.name)


def plan_publish(request: PublishRequest, *, target: Target, site: Site,
                 settings: Settings, inputs_hash: str | None = None) -> PublishPlan:
    """The plan for ``request``, refusing before any work what publishing could not finish.
    ``inputs_hash``: the target's now (None when the caller cannot tell); a version is published
    as what its target builds today, so an image built from other inputs is stale."""
    check_dest(request.dest)
    check_name("target", target.name, path=target.manifest.parent, key="target")
    image = settings.image_path(target.name)
    record = settings.provenance_path(target.name)
    if not image.is_file():
        raise ImageMissing(image, target.name)
    provenance = image_provenance.read(record)
    if not cat.SHA256.match(provenance.sha256 or ""):
        raise StateError(f"{image} has no provenance record with a sha256 ({record}); rebuild "
                         f"it with invoke build --target {target.name} --force")
    if provenance.target != target.name:
        raise StateError(f"{image}: its build record names target {provenance.target}, "
                         f"not {target.name}: rebuild it with invoke build --target {target.name}"
                         " --force")
    _refuse_other_label(image, provenance, target.name)
    built = str(provenance.inputs_hash or "")
    if inputs_hash is not None and built != inputs_hash:
        raise StateError(f"{image} is stale: it was built from inputs {built[:12] or 'unknown'},"
                         f" the target's inputs are now {inputs_hash[:12]}; rebuild it with "
                         f"invoke build --target {target.name} before publishing")
    for key in site.env:
        if not is_env_name(key):
            raise ConfigError("not a usable environment variable name for a module file",
                              path=site.path, line=site.lines.get("env"), key=key)
    gid = (resolve_group(settings.publish_group, named_by="containers.publish_group")
           if request.group is None else resolve_group(request.group, named_by="--group"))
    return PublishPlan(
        target=target, site=site, image=image, provenance=provenance,
        version=request.version or cat.default_version(provenance), dest=request.dest,
        sign=request.sign, keep=request.keep, force=request.force,
        skip_checks=request.skip_checks,
        modes=Modes.of(world_readable=settings.publish_world_readable, gid=gid), settings=settings)


def _refuse_other_label(image: Path, provenance: BuildRecord, target: str) -> None:
    """The image's own ``containers.target`` label (read from it at build, in its record) must
    name the target it is published as, where the image carries this build's own labels (its
    inputs-hash label is the record's): a record edited to another target's name is not this
    target's image. Labels a base passed on (a cotainr image, an image built before the tool
    labelled every build) name the base's build: the record judges it."""
    labels = provenance.labels if isinstance(provenance.labels, dict) else {}
    label = labels.get(LABEL_PREFIX + "target")
    if label != target and labels.get(LABEL_PREFIX + "inputs-hash") == provenance.inputs_hash:
        raise StateError(f"{image}: its label {LABEL_PREFIX}target says {label!r}, not "
                         f"{target!r}, and its build record was edited to say otherwise: "
                         f"rebuild it with invoke build --target {target} --force")


# ------------------------------------------------------------------------------ file steps
def sweep_temps(plan: PublishPlan, say: Say) -> None:
    """Remove what a killed publish left (we hold the lock, so none of it is in use)."""
    folders = [plan.dest, plan.folder, plan.folder / "bin", plan.module_dir, plan.dest / "keys"]
    for folder in folders:
        for path in folder.glob(".*") if folder.is_dir() else ():
            if path.name.endswith(TEMP_ENDINGS):
                say(f"removing leftover of an interrupted publish: {path}")
                path.unlink(missing_ok=True)


def refuse_links(plan: PublishPlan) -> None:
    """A :class:`StateError` naming the first link (or misplaced file) inside the publish folder
    that this publish would write, chmod or remove through: it never follows one."""
    problem = unsafe_layout(plan.dest, plan.target.name)
    if problem:
        raise StateError(problem)
    for link in (plan.folder / "latest", plan.module_dir / "default"):
        if os.path.lexists(link) and not link.is_symlink():
            raise StateError(f"{link} is not a symbolic link; publish keeps a link there: "
                             "move it away")


def _entry(plan: PublishPlan, runtime: Runtime, *, sha256: str, size: int, checks: dict,
           key: signing.SigningKey | None, replaced: CatalogueEntry | None, when: str,
           reviewed: dict) -> tuple[dict, list[tuple[Path, bytes, str]]]:
    """The catalogue entry, and (final path, bytes, commit step) of what a version keeps beside
    its image: the build's SBOM (copied as built) and the diff against the version it replaces
    as latest (JSON, and a page), each named in the entry, which also takes the review's
    site-fit findings and gate record. The recipe's description and the site's runtime and GPU
    flag are kept so the catalogue page says what the image is and how to run it."""
    entry = {
        "target": plan.target.name, "version": plan.version,
        "description": plan.target.description, "license": plan.target.license,
        **cat.layout_files(plan.target.name, plan.version),
        "sha256": sha256, "size_bytes": size, "signed": key is not None,
        "key_fingerprint": key.fingerprint if key else None,
        "key_user": key.user if key else None,
        "public_key": f"keys/{key.fingerprint}.pgp" if key else None,
        "checks": checks, "forced": replaced is not None,
        "replaced_sha256": replaced.sha256 if replaced else None,
        "site": plan.site.name, "published": when,
        "site_runtime": {"runtime": plan.site.runtime, "gpu_flag": plan.site.gpus.kind.flag},
        "published_by": f"{getpass.getuser()}@{socket.gethostname()}",
        "publisher_runtime": {"flavour": runtime.flavour, "version": runtime.version},
        "provenance": {k: v for k, v in plan.provenance.as_dict().items() if k != "labels"},
        "batch_example": batch_job(plan.batch_preamble, target=plan.target.name,
                                   version=plan.version, dest=plan.dest,
                                   stack=plan.provenance.stack or {}),
    }
    beside = []
    if sbom_path(plan.image).is_file():
        final = sbom_path(plan.sif)
        beside.append((final, read_regular(sbom_path(plan.image), limit=PROVENANCE_LIMIT), "sbom"))
        entry["sbom_file"] = str(final.relative_to(plan.dest))
    if reviewed.get("diff") is not None:
        final = plan.sif.with_name(f"{plan.version}{DIFF_SUFFIX}")
        beside.append((final, json_text(reviewed["diff"]).encode(), "diff"))
        entry["diff_file"] = str(final.relative_to(plan.dest))
        page = plan.sif.with_name(f"{plan.version}{DIFF_PAGE_SUFFIX}")
        beside.append((page, render_diff_page(reviewed["diff"], target=plan.target.name,
                                              version=plan.version).encode(), "diff page"))
        entry["diff_page"] = str(page.relative_to(plan.dest))
    entry.update({k: reviewed[k] for k in ("fit", "gate", "stack") if k in reviewed})
    entry["driver_needed"] = cat.driver_needed(entry.get("stack"))
    return CatalogueEntry.of(entry, source=plan.dest / cat.CATALOGUE_NAME).as_dict(), beside


def _existing(plan: PublishPlan, catalogue: dict) -> CatalogueEntry | None:
    """The entry this publish would replace; refused unless ``--force``."""
    entry = cat.find(catalogue, plan.target.name, plan.version)
    if entry is None and plan.sif.exists() and not plan.force:
        raise StateError(f"{plan.sif} exists but is not in the catalogue (a publish killed "
                         "after its rename, or a hand copy): check it, then --force to publish "
                         "this version properly")
    if entry is not None and not plan.force:
        raise StateError(f"{plan.target.name} {plan.version} is already published "
                         f"({plan.sif}); give another --version, or --force to replace it")
    return entry if entry is not None else (CatalogueEntry() if plan.sif.exists() else None)


def _remove_version(plan: PublishPlan, version: str, say: Say) -> None:
    sif = plan.folder / cat.sif_name(version)
    for path in (plan.module_dir / f"{version}.lua", sif.with_name(sif.name + ".sha256"),
                 sbom_path(sif), sif.with_name(f"{version}{DIFF_SUFFIX}"),
                 sif.with_name(f"{version}{DIFF_PAGE_SUFFIX}"), sif):
        if path.exists():
            say(f"  removing {path}")
        path.unlink(missing_ok=True)


def _prune(plan: PublishPlan, before: dict) -> list[str]:
    """The versions ``--keep`` removes once this version is published into the catalogue
    ``before``. A version in use, as the folder was before this publish, is refused in one line
    naming it, before anything is made: ``--keep`` never removes what users may be running. In
    use: a module ``default`` link set by hand to a version other than the catalogue's
    ``latest`` (the old latest is not in use once the new version is latest), the versions the
    catalogue pins (the target block's ``pinned`` list: versions queued jobs or a site's
    documentation rely on) and those the config pins (``containers.publish_pinned``)."""
    if plan.keep is None:
        return []
    # the versions once this one is published: a republished version moves to the end
    versions = [e.version for e in cat.entries(before, plan.target.name)
                if e.version != plan.version] + [plan.version]
    gone = cat.select_prune(versions, keep=plan.keep, latest=plan.version)
    uses: dict[str, str] = {}
    default = plan.module_dir / "default"
    linked = os.readlink(default) if default.is_symlink() else ""
    if linked.endswith(".lua") and linked[:-len(".lua")] != cat.latest(before, plan.target.name):
        uses[linked[:-len(".lua")]] = f"the module default: {default} points to it"
    for version in cat.pinned(before, plan.target.name):
        uses[version] = f"pinned in {plan.dest / cat.CATALOGUE_NAME}"
    for version in plan.settings.publish_pinned.get(plan.target.name, ()):
        uses[version] = "pinned in the config: containers.publish_pinned"
    blocked = [v for v in gone if v in uses]
    if blocked:
        raise StateError(f"--keep {plan.keep} would remove {plan.target.name} {blocked[0]}, "
                         f"which is in use ({uses[blocked[0]]}); nothing was published or "
                         "removed: keep more versions, or unpin it first")
    return gone


class Transaction:
    """Everything one publish makes, so a failure anywhere undoes exactly that.

    Files are first written under temp names (:meth:`temp`); :meth:`install` renames one over
    its final name, keeping what was there as a hard link (no space needed) until
    :meth:`done`; :meth:`rollback` puts every final name back as it was, removes the folders
    this run created (when empty) and every temp. Failures while undoing are collected, so one
    bad step does not stop the others."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._temps: list[Path] = []
        self._backups: list[Path] = []
        self.created: set[Path] = set()
        self.committed = False

    def folder(self, path: Path) -> None:
        """Make ``path`` (and its missing parents) unless it is there; undone when empty."""
        if path.is_dir():
            return
        self.folder(path.parent)
        path.mkdir()
        self.created.add(path)
        self._undo.append(lambda: path.rmdir() if not any(path.iterdir()) else None)

    def temp(self, path: Path) -> Path:
        self._temps.append(path)
        return path

    def install(self, temp: Path, final: Path, step: str) -> None:
        """Rename ``temp`` over ``final``, keeping the old one to undo. A file never replaces
        a link, a device or another user's file (:func:`refuse_replacing`); a link (``latest``)
        replaces the link :func:`refuse_links` found there."""
        before_commit(step)
        if not temp.is_symlink():
            refuse_replacing(final)
        backup = None
        if os.path.lexists(final):
            backup = temp_name(final, "old.tmp")
            self._backups.append(backup)
            backup.unlink(missing_ok=True)
            os.link(final, backup, follow_symlinks=False)
        os.replace(temp, final)
        self._undo.append(lambda: os.replace(backup, final) if backup
                          else final.unlink(missing_ok=True))

    def rollback(self) -> list[str]:
        """Undo every step, newest first; the problems met while undoing (none: all undone)."""
        for path in self._temps:  # first: a folder is removed only when empty
            path.unlink(missing_ok=True)
        problems = []
        for undo in reversed(self._undo):
            try:
                undo()
            except OSError as exc:
                problems.append(str(exc))
        self.done()
        return problems

    def commit(self) -> None:
        """Every final name is in place: nothing is undone from now on."""
        self.committed = True
        self.done()

    def done(self) -> None:
        self._undo.clear()
        for path in self._temps + self._backups:
            path.unlink(missing_ok=True)


def before_commit(step: str) -> None:
    """Called before each commit step (a rename); a fault-injection point for tests."""


def refuse_no_space(plan: PublishPlan) -> None:
    """Refused before the copy: a full disk half-way through a multi-GB copy wastes it."""
    size = plan.image.stat().st_size
    free = shutil.disk_usage(plan.folder if plan.folder.is_dir() else plan.dest).free
    need = size + SPACE_MARGIN
    if free < need:
        raise StateError(f"not enough free space in {plan.dest}: publishing {plan.target.name} "
                         f"{plan.version} needs {human_bytes(need)} (the image, "
                         f"{human_bytes(size)}, plus {human_bytes(SPACE_MARGIN)}) and "
                         f"{human_bytes(free)} is free; nothing was published")


def execute(plan: PublishPlan, runtime: Runtime, *, checks: dict,
            key: signing.SigningKey | None, say: Say, reviewed: dict | None = None) -> dict:
    """Prepare and commit, under the publish lock; any failure before the commit (a full disk
    included) undoes what this run made, still under the lock, and an OSError becomes one line
    (:class:`StateError`)."""
    tx = Transaction()
    try:
        with umask(plan.modes.umask):
            tx.folder(plan.dest)
            refuse_links(plan)  # the lock file too, before it is opened
            with file_lock(plan.dest / cat.LOCK_NAME, remove=True,  # not left in DEST
                           on_wait=lambda: say("waiting for another publish to finish")):
                try:
                    return _execute_locked(plan, runtime, checks=checks, key=key, say=say,
                                           tx=tx, reviewed=reviewed or {})
                except BaseException as exc:
                    failure = _undone(plan, tx, exc, say)
                    if failure is exc:
                        raise
                    raise failure from exc
    except OSError as exc:  # making the folder or its lock: nothing else was made
        raise _undone(plan, tx, exc, say) from exc


def _undone(plan: PublishPlan, tx: Transaction, exc: BaseException, say: Say) -> BaseException:
    """Roll ``tx`` back after ``exc``; what to raise: a one-line :class:`StateError` for an
    OSError, saying whether the version was published (the failure came after the commit)."""
    problems = tx.rollback()
    if problems:
        say(f"rollback incomplete: {'; '.join(problems)}")
    if not isinstance(exc, OSError):
        return exc
    if tx.committed:
        return StateError(f"{plan.target.name} {plan.version} was published, but then: "
                          f"{os_failure(exc)}")
    return StateError(f"publishing {plan.target.name} {plan.version} to {plan.dest} failed: "
                      f"{os_failure(exc)}" + ("; everything this publish made was removed"
                                               if not problems else
                                               "; the rollback was incomplete (see above)"))


def _prepare(plan: PublishPlan, runtime: Runtime, tx: Transaction,
             key: signing.SigningKey | None, say: Say) -> tuple[str, int]:
    """The image under its temp name: copied and checked, signed, its checksum file beside it
    (also a temp); nothing under a final name yet."""
    size = plan.image.stat().st_size
    say(f"copying {plan.image} -> {plan.temp} ({human_bytes(size)})")
    started = time.monotonic()
    delay = float(os.environ.get(COPY_DELAY_ENV) or 0)  # the fault-injection hook, per chunk
    with byte_progress(f"copy {plan.sif.name}", size) as advance:
        copied = copy_hashing(plan.image, tx.temp(plan.temp), mode=plan.modes.file,
                              progress=advance,
                              after_chunk=(lambda: time.sleep(delay)) if delay else None)
    seconds = time.monotonic() - started
    say(f"copied in {seconds:.1f} s ({human_bytes(int(size / max(seconds, 1e-3)))}/s)")
    if copied != plan.provenance.sha256:
        raise StateError(f"{plan.image} does not match its build record (sha256 "
                         f"{copied[:12]}, recorded {plan.provenance.sha256[:12]}); "
                         f"rebuild it: invoke build --target {plan.target.name} --force")
    sha256 = copied
    if key is not None:
        say(f"signing with key #{key.index} {key.fingerprint} ({key.user})")
        signing.sign(runtime, plan.temp, keysdir=key.keysdir, keyidx=key.index)
        if key.fingerprint not in signing.signers(runtime, plan.temp, keysdir=key.keysdir):
            raise VerdictFailed(f"{plan.temp}: the new signature is not by {key.fingerprint}")
        fsync_path(plan.temp)
        with byte_progress(f"sha256 {plan.sif.name}", plan.temp.stat().st_size) as advance:
            sha256 = sha256_file(plan.temp, progress=advance)
    return sha256, plan.temp.stat().st_size


def _execute_locked(plan: PublishPlan, runtime: Runtime, *, checks: dict,
                    key: signing.SigningKey | None, say: Say, tx: Transaction,
                    reviewed: dict) -> dict:
    """Prepare everything under temp names, then commit with renames and one catalogue write
    (the last rename: until then users see the old state); then prune and set modes."""
    refuse_links(plan)  # again: another publish may have run while this one waited
    for folder in (plan.folder, plan.folder / "bin", plan.module_dir):
        tx.folder(folder)
    sweep_temps(plan, say)
    before = cat.load(plan.dest / cat.CATALOGUE_NAME)
    replaced = _existing(plan, before)
    refuse_no_space(plan)
    when = utc_now()
    # Checked before the copy: a refused --keep must not cost a multi-GB copy.
    gone = _prune(plan, before)
    public = signing.public_key(key.keysdir, key.fingerprint) if key else b""
    sha256, size = _prepare(plan, runtime, tx, key, say)
    entry, beside = _entry(plan, runtime, sha256=sha256, size=size, checks=checks, key=key,
                           replaced=replaced, when=when, reviewed=reviewed)
    for version in gone:
        say(f"pruning {plan.target.name} {version} (--keep {plan.keep})")
    catalogue = cat.with_entry(before, entry, now=when, without=gone)
    staged = _stage(plan, tx, sha256=sha256, when=when, key=key, public=public, beside=beside,
                    catalogue=catalogue)
    for temp, final, _ in staged:  # every refusal before the first rename
        if not temp.is_symlink():
            refuse_replacing(final)
    for temp, final, step in staged:
        tx.install(temp, final, step)
    tx.commit()  # what follows never undoes the publish
    for folder in {final.parent for _, final, _ in staged}:
        fsync_path(folder)
    say(f"published {plan.sif} (sha256 {sha256})")
    for version in gone:
        _remove_version(plan, version, say)
    # an existing folder's own mode is the site's business
    paths = [plan.dest] * (plan.dest in tx.created) + managed_paths(plan.dest, plan.target.name)
    apply_modes(paths, plan.modes)
    problems = mode_problems(paths, plan.modes)
    if problems:
        raise StateError("permissions are not as configured: " + "; ".join(problems))
    return entry


def _stage(plan: PublishPlan, tx: Transaction, *, sha256: str, when: str,
           key: signing.SigningKey | None, public: bytes, beside: list[tuple],
           catalogue: dict) -> list[tuple[Path, Path, str]]:
    """Every file of the publish written under a temp name beside its final one: ``(temp, final,
    commit step)`` in commit order, the catalogue last but for the page that shows it."""
    def written(final: Path, data: bytes, step: str) -> tuple[Path, Path, str]:
        return tx.temp(write_temp(final, data)), final, step

    def link(final: Path, to: str) -> tuple[Path, Path, str]:
        return tx.temp(temp_symlink(final, to)), final, final.name

    keyfile = plan.dest / "keys" / f"{key.fingerprint}.pgp" if key else None
    if keyfile is not None:
        tx.folder(keyfile.parent)
    # no version's facts: each module file carries its own
    wrapper = written(plan.exec_path, render_exec_wrapper(plan.target.name).encode(), "wrapper")
    os.chmod(wrapper[0], plan.modes.dir)  # executable from its first moment under its final name
    spec = ModuleSpec(target=plan.target.name, version=plan.version,
                      description=plan.target.description, image=str(plan.sif),
                      bin_dir=str(plan.exec_path.parent), runtime=plan.site.runtime,
                      gpu_flag=plan.site.gpus.kind.flag, binds=plan.site.binds,
                      env=dict(plan.site.env), modules=plan.site.job_modules,
                      sha256=sha256, signed_by=key and key.fingerprint, published=when)
    checksum = plan.sif.with_name(plan.sif.name + ".sha256")
    return [  # (temp, final, commit step), in commit order: the catalogue last
        written(checksum, cat.checksum_line(sha256, plan.version).encode(), "checksum"),
        (plan.temp, plan.sif, "image"),
        written(plan.module, render_modulefile(spec).encode(), "module"),
        wrapper,
        *([written(keyfile, public, "key")] if keyfile else []),
        *[written(*file) for file in beside],
        link(plan.folder / "latest", plan.sif.name),
        link(plan.module_dir / "default", plan.module.name),
        written(plan.dest / cat.CATALOGUE_NAME, json_text(catalogue).encode(),
                "catalogue"),
        # the page shows what the catalogue says: replaced right after it
        written(plan.dest / cat.PAGE_NAME, render_page(catalogue, plan.dest).encode(), "page"),
    ]


def publish(plan: PublishPlan, runtime: Runtime, *, quick_check: QuickCheck,
            say: Say = say_line, review: Review | None = None) -> dict:
    """Publish one image; its catalogue entry. ``quick_check`` runs a short smoke of the image
    when no passing verdict for it exists."""
    say(f"publish: {plan.target.name} {plan.version} -> {plan.sif}")
    if plan.dest.is_dir():  # early, friendly refusals; checked again under the lock
        refuse_links(plan)
        catalogue = cat.load(plan.dest / cat.CATALOGUE_NAME)
        _existing(plan, catalogue)
        same = [str(entry.version) for entry in cat.entries(catalogue, plan.target.name)
                if BuildRecord.of(entry.provenance or {}).sha256 == plan.provenance.sha256
                and entry.version != plan.version]  # this very build, as other versions
        if same:
            say(f"note: this build (sha256 {plan.provenance.sha256[:12]}) is already "
                f"published as {plan.target.name} {', '.join(same)}; publishing it again as "
                f"{plan.version}")
        refuse_no_space(plan)
    key = signing.signing_key(runtime, signing.keyring(runtime, plan.settings.sign_keysdir),
                              plan.settings.sign_keyidx) if plan.sign else None
    if plan.skip_checks:
        checks = skipped(plan.target.name, say)
    else:
        checks = ensure_checks(runtime, target=plan.target, image=plan.image,
                               provenance=plan.provenance, results_dir=plan.settings.results_dir,
                               quick_check=quick_check, say=say, gpus_here=gpu_kinds_here(),
                               gpu=plan.gpu)
        if (checks.get("smoke") or {}).get("performance_failed"):
            performance = checks["smoke"]["performance"]
            say(f"checks: performance {shown(performance.get('state') or 'fail').upper()} "
                f"({shown(performance.get('message'))}): recorded in the catalogue entry")
    reviewed = review(plan, checks, say) if review is not None else {}
    entry = execute(plan, runtime, checks=checks, key=key, say=say, reviewed=reviewed)
    say(f"module: module use {plan.dest / 'modules'}; module load "
        f"{plan.target.name}/{plan.version}")
    return entry
