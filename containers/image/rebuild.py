"""Rebuilds at the floor: an image made from the root file system a full build kept.

A full build of a venv-install target keeps its root in the package cache (``roots/<key>``, every
input but the env spec); a later build of the key reruns ``%post`` in it and writes a clean
build's image with ``mksquashfs`` and ``apptainer sif``; a root whose manifest changed goes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import ValidationError

from containers.errors import ContainersError
from containers.files import atomic_write_text
from containers.host.process import capture, run
from containers.host.runtime import Runtime
from containers.image.arch import squashfs_offset
from containers.image.plan import CONTEXT_MOUNT, BuildStep
from containers.inputs.definition import parse_definition
from containers.locking import file_lock
from containers.records import Model
from containers.report import Say

#: What a kept root's folder holds: the root, and what it was made from with its manifest.
ROOT, KEPT = "root", "kept.json"
#: The file ``%post`` adds labels to (``APPTAINER_LABELS``), as ``apptainer build`` names it.
BUILD_LABELS = "/.build.labels"
#: ``apptainer sif add --partarch`` of each architecture the tool builds.
PARTARCH = {"x86_64": "2", "aarch64": "4"}


def manifest(root: Path) -> str:
    """The sha256 of each entry's path, type, mode, owner and (not for folders, whose mtime a
    restored failed rebuild changes) size, mtime and link target under ``root``: a rewritten
    file changes its mtime. Hashing every byte would cost more than the rebuild's floor."""
    listing = capture(["find", str(root), "(", "-type", "d", "-printf", "%P\t%y\t%m\t%U\t%G\\0",
                       ")", "-o", "-printf", "%P\t%y\t%m\t%U\t%G\t%s\t%T@\t%l\\0"],
                      timeout=600)
    return hashlib.sha256("\0".join(sorted(listing.split("\0"))).encode()).hexdigest()


class KeptRoot(Model):
    """``kept.json`` beside a kept root: the image it is, and its :func:`manifest`."""

    sha256: str
    manifest: str


@dataclass
class Kept:
    """The kept root of one key, locked for one build; ``work``: a full build's root, unpacked;
    ``changing``: the root changed by a rebuild not yet kept (or restored)."""

    folder: Path
    say: Say
    work: Path | None = None
    changing: bool = False
    #: The rebuilt root's manifest, read while its image is tested (nothing writes it then).
    listing: Future | None = None

    @property
    def root(self) -> Path:
        return self.folder / ROOT

    def _made_from(self) -> str | None:
        """The sha256 of the image the kept root is, if it passes its manifest (else removed)."""
        try:
            kept = KeptRoot.model_validate_json((self.folder / KEPT).read_bytes())
        except (OSError, ValidationError):
            return None
        if kept.manifest != manifest(self.root):
            self.say("==> kept root: does not match its manifest: removed, full build")
            self.forget()
            return None
        return kept.sha256

    def rebuild(self, step: BuildStep, runtime: Runtime, env: dict[str, str],
                on_line: Say) -> str | None:
        """``step.partial`` from the kept root: the sha256 of the image it was, or None (none
        kept, or it fails its check: the caller builds in full)."""
        made_from = self._made_from()
        if made_from is None:
            self.say("==> kept root: none for these inputs yet: full build")
            return None
        self.say(f"==> kept root: rebuilding from the image {made_from[:12]}")
        started = time.monotonic()
        self.changing = True
        shutil.copytree(step.workdir / "context", self.root / CONTEXT_MOUNT.lstrip("/"))
        labels = self.root / BUILD_LABELS.lstrip("/")
        labels.touch()
        post = parse_definition(step.rendered or "").section("post")
        assert post is not None  # plan.kept_root_key: only a definition with one
        argv = runtime.exec_argv(image=self.root, command=["/bin/sh", "-e", "-c", post.body],
                                 binds=step.binds, env={"APPTAINER_LABELS": BUILD_LABELS},
                                 options=["--writable", "--contain", "--no-home", "--cleanenv",
                                          "--pwd", "/"])
        own = {k: v for k, v in env.items() if k not in runtime.own.bind_variables}
        run(argv, env=own, on_line=on_line).check(f"%post in the kept root of "
                                                   f"{step.target.name}")  # no user's binds
        added = labels.read_text().splitlines()
        labels.unlink()
        self._metadata(step, runtime, added)
        post_s = time.monotonic() - started
        write_sif(self.root, step, runtime, env)
        pool = ThreadPoolExecutor(1)
        self.listing = pool.submit(manifest, self.root)
        pool.shutdown(wait=False)
        self.say(f"==> kept root: %post {post_s:.1f} s, squashed and assembled "
                 f"{time.monotonic() - started - post_s:.1f} s")
        return made_from

    def restore(self) -> None:
        """After a failed rebuild: the kept root as before, its context and labels file removed,
        if ``%post`` changed nothing (the manifest says), else none."""
        shutil.rmtree(self.root / CONTEXT_MOUNT.lstrip("/"), ignore_errors=True)
        (self.root / BUILD_LABELS.lstrip("/")).unlink(missing_ok=True)
        self.changing = False
        self._made_from()

    def _metadata(self, step: BuildStep, runtime: Runtime, added: list[str]) -> None:
        """Labels and definition as ``apptainer build`` writes them into ``/.singularity.d``:
        the kept labels with this build's own, those ``%post`` added, and the build date."""
        meta = self.root / ".singularity.d"
        labels = json.loads((meta / "labels.json").read_text())
        labels.update(step.labels)
        labels.update((key, value.strip()) for key, _, value in
                      (line.strip().partition(" ") for line in added) if key)
        labels["org.label-schema.build-date"] = time.strftime(
            "%A_%-d_%B_%Y_%-H:%M:%S_%Z", time.gmtime()).replace("GMT", "UTC")
        for name, text in (("labels.json", json.dumps(labels, indent="\t", sort_keys=True)),
                           ("Singularity", step.rendered)):
            atomic_write_text(meta / name, text)
            (meta / name).chmod(0o644)

    def keep(self, step: BuildStep, runtime: Runtime, sha256: str) -> None:
        """This build's root as the key's only kept one: the rebuilt root, or the image unpacked."""
        if not self.changing:
            if self.work is None:
                self.work = Path(tempfile.mkdtemp(prefix="work-", dir=self.folder))
                self.work.rmdir()
                offset = squashfs_offset(runtime, step.partial)
                run(["unsquashfs", "-no-progress", "-quiet", "-o", str(offset), "-d",
                     str(self.work), str(step.partial)]).check("unsquashfs of the built image")
            self.forget()  # no manifest names a root being replaced
            os.rename(self.work, self.root)
            self.work = None
        listed = self.listing.result() if self.changing and self.listing else None
        made = KeptRoot(sha256=sha256, manifest=listed or manifest(self.root))
        atomic_write_text(self.folder / KEPT, made.model_dump_json() + "\n")
        self.changing = False
        self.say(f"==> kept root: this build's, for the next change of its env spec "
                 f"({self.folder})")

    def forget(self) -> None:
        """No kept root for this key (the next build is a full one)."""
        (self.folder / KEPT).unlink(missing_ok=True)
        self.discard(self.root)

    @staticmethod
    def discard(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)


def write_sif(root: Path, step: BuildStep, runtime: Runtime, env: dict[str, str]) -> None:
    """``step.partial`` from ``root``: squashed as Apptainer does (``-noappend``, gzip unless
    ``APPTAINER_MKSQUASHFS_ARGS`` says otherwise), then the SIF objects ``apptainer build`` adds."""
    squashfs, metadata = step.workdir / "root.squashfs", step.workdir / "inspect-metadata.json"
    options = env.get("APPTAINER_MKSQUASHFS_ARGS", "-comp gzip").split()
    run(["mksquashfs", str(root), str(squashfs), "-noappend", *options]).check("mksquashfs")
    atomic_write_text(metadata, capture([runtime.binary, "inspect", "--all", "--json",
                                         str(root)]))
    atomic_write_text(step.workdir / "definition.rendered", step.rendered or "")
    sif = [runtime.binary, "sif"]
    run([*sif, "new", str(step.partial)]).check("apptainer sif new")
    for argv in (["--datatype", "1", "--groupid", "1", str(step.workdir / "definition.rendered")],
                 ["--datatype", "6", "--groupid", "1", "--filename", metadata.name,
                  str(metadata)],
                 ["--datatype", "4", "--parttype", "2", "--partfs", "1", "--partarch",
                  PARTARCH[step.target.arch], "--groupid", "1", str(squashfs)]):
        run([*sif, "add", *argv[:-1], str(step.partial), argv[-1]]).check("apptainer sif add")
    squashfs.unlink()


@contextmanager
def held(step: BuildStep, say: Say) -> Iterator[Kept | None]:
    """The kept root of ``step``'s key, locked for this build, a killed build's work removed;
    None without a key, a package cache, or root (the root's owners, /etc/shadow's group among
    them, would be lost unpacking it as another user)."""
    key = step.kept_root.digest() if step.kept_root and step.package_cache else None
    if key is None or os.geteuid() != 0:
        yield None
        return
    folder = step.package_cache.roots / key
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700 if step.package_cache.gid is None else 0o2770)  # as cache.in_use
    with file_lock(folder / ".lock", on_wait=lambda: say("waiting for another build of the "
                                                          "same kept root…")):
        for stale in folder.glob("work-*"):
            Kept.discard(stale)
        kept = Kept(folder, say)
        try:
            yield kept
        finally:
            if kept.work is not None:
                Kept.discard(kept.work)
            if kept.changing:  # rebuilt, but its image was not kept: nor is the root
                kept.forget()


def made_with(kept: Kept | None, step: BuildStep, runtime: Runtime, env: dict[str, str],
              on_line: Say) -> str | None:
    """The rebuild from the kept root, if any; a failure is said and the caller builds in full."""
    if kept is None:
        return None
    try:
        return kept.rebuild(step, runtime, env, on_line)
    except (ContainersError, OSError) as error:
        kept.say(f"==> kept root: the rebuild failed ({error}): full build")
        kept.restore()
        step.partial.unlink(missing_ok=True)
        return None
