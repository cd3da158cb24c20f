"""``invoke publish``: shared images for a whole site, safely (``verify`` checks the result).

Under the publish lock every file is prepared under a temporary name and committed by renames,
the catalogue last, so a publish killed at any point leaves every final name old or complete.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import time
from pathlib import Path

from containers.errors import StateError, VerdictFailed, os_failure
from containers.files import (copy_hashing, fsync_path, read_regular, refuse_replacing,
                              sha256_file, temp_symlink, write_temp)
from containers.host.facts import gpu_kinds_here, utc_now
from containers.host.runtime import Runtime
from containers.image.inspect import sbom_path
from containers.inputs.schema import TEMP_ENDINGS
from containers.locking import file_lock
from containers.progress import byte_progress
from containers.publish import catalogue as cat, signing
from containers.publish.checks import QuickCheck, ensure_checks, skipped
from containers.publish.diff import shown
from containers.publish.modulefile import ModuleSpec, render_exec_wrapper, render_modulefile
from containers.publish.page import batch_job, render_diff_page, render_page
from containers.publish.permissions import apply_modes, managed_paths, mode_problems, umask, \
    unsafe_layout
from containers.publish.planning import PublishPlan, Review
from containers.publish.pruning import remove_version, to_prune
from containers.publish.transaction import Transaction
from containers.records import BuildRecord, CatalogueEntry, json_text
from containers.report import Say, human_bytes, say_line

#: Seconds to sleep per 8 MiB copied: a fault-injection hook, so tests can kill a publish mid-copy.
COPY_DELAY_ENV = "CONTAINERS_PUBLISH_COPY_DELAY"
#: The most an image's build record may hold (its pip freeze is the bulk of it).
PROVENANCE_LIMIT = 16 << 20
#: Room beyond the image for its small files and the catalogue (which keeps every pip freeze).
SPACE_MARGIN = 64 << 20


def sweep_temps(plan: PublishPlan, say: Say) -> None:
    """Remove what a killed publish left (we hold the lock, so none of it is in use)."""
    folders = [plan.dest, plan.folder, plan.folder / "bin", plan.module_dir, plan.dest / "keys"]
    for folder in folders:
        for path in folder.glob(".*") if folder.is_dir() else ():
            if path.name.endswith(TEMP_ENDINGS):
                say(f"removing leftover of an interrupted publish: {path}")
                path.unlink(missing_ok=True)


def refuse_links(plan: PublishPlan) -> None:
    """A :class:`StateError` naming a link this publish would go through."""
    if problem := unsafe_layout(plan.dest, plan.target.name):
        raise StateError(problem)
    for link in (plan.folder / "latest", plan.module_dir / "default"):
        if os.path.lexists(link) and not link.is_symlink():
            raise StateError(f"{link} is not a symbolic link; publish keeps a link there: "
                             "move it away")


def _entry(plan: PublishPlan, runtime: Runtime, *, sha256: str, size: int, checks: dict,
           key: signing.SigningKey | None, replaced: CatalogueEntry | None, when: str,
           reviewed: dict) -> tuple[dict, list[tuple[Path, bytes, str]]]:
    """The catalogue entry, and what a version keeps beside its image."""
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
        final = plan.sif.with_name(f"{plan.version}{cat.DIFF_SUFFIX}")
        beside.append((final, json_text(reviewed["diff"]).encode(), "diff"))
        entry["diff_file"] = str(final.relative_to(plan.dest))
        page = plan.sif.with_name(f"{plan.version}{cat.DIFF_PAGE_SUFFIX}")
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
    """Prepare and commit under the publish lock; a failure before the commit is undone."""
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
    """Roll ``tx`` back after ``exc``; a one-line StateError for an OSError."""
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
    """The image under its temp name: copied, checked, signed, with its checksum file."""
    size = plan.image.stat().st_size
    say(f"copying {plan.image} -> {plan.temp} ({human_bytes(size)})")
    started = time.monotonic()
    delay = float(os.environ.get(COPY_DELAY_ENV) or 0)
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
    """Prepare under temp names, commit by renames, the catalogue last; prune, set modes."""
    refuse_links(plan)  # again: another publish may have run while this one waited
    for folder in (plan.folder, plan.folder / "bin", plan.module_dir):
        tx.folder(folder)
    sweep_temps(plan, say)
    before = cat.load(plan.dest / cat.CATALOGUE_NAME)
    replaced = _existing(plan, before)
    refuse_no_space(plan)
    when = utc_now()
    # Checked before the copy: a refused --keep must not cost a multi-GB copy.
    gone = to_prune(plan, before)
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
        remove_version(plan, version, say)
    # an existing folder's own mode is the site's business
    paths = [plan.dest] * (plan.dest in tx.created) + managed_paths(plan.dest, plan.target.name)
    apply_modes(paths, plan.modes)
    if problems := mode_problems(paths, plan.modes):
        raise StateError("permissions are not as configured: " + "; ".join(problems))
    return entry


def _stage(plan: PublishPlan, tx: Transaction, *, sha256: str, when: str,
           key: signing.SigningKey | None, public: bytes, beside: list[tuple],
           catalogue: dict) -> list[tuple[Path, Path, str]]:
    """``(temp, final, commit step)`` of every file, in commit order."""
    def written(final: Path, data: bytes, step: str) -> tuple[Path, Path, str]:
        return tx.temp(write_temp(final, data)), final, step

    def link(final: Path, to: str) -> tuple[Path, Path, str]:
        return tx.temp(temp_symlink(final, to)), final, final.name

    keyfile = plan.dest / "keys" / f"{key.fingerprint}.pgp" if key else None
    if keyfile is not None:
        tx.folder(keyfile.parent)
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
        written(plan.dest / cat.PAGE_NAME, render_page(catalogue, plan.dest).encode(), "page"),
    ]


def publish(plan: PublishPlan, runtime: Runtime, *, quick_check: QuickCheck,
            say: Say = say_line, review: Review | None = None) -> dict:
    """Publish one image; its catalogue entry (``quick_check``: a short smoke if needed)."""
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
