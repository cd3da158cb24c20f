"""``invoke publish`` and ``invoke verify``: shared images for a whole site, safely.

Publishing refuses an image that has not passed its checks (``apptainer test`` and a 2-rank smoke
run, found as a passing ``verdict.json`` for the image's exact sha256, or run now), then, under
``<dest>/.publish.lock`` so concurrent publishes are serialised:

1. copies the image to a temp name in the target folder, hashing as it reads (the copy must
   match the build's sha256), fsyncs, signs the temp copy (so a signed version never appears
   unsigned), writes the ``sha256sum`` file of the final bytes, then renames it into place;
2. writes the Lmod module file and the ``<target>-exec`` wrapper, then the catalogue (atomic,
   the source of truth), then moves ``latest`` and the module ``default`` (atomic symlinks);
3. prunes to ``--keep N`` versions (never the one ``latest`` names), and sets and re-checks
   permissions (group as configured, never world-writable).

A publish killed at any point leaves every final name either old or complete: only temp files
(``.<name>.<pid>.partial`` / ``.tmp``), which ``verify`` ignores and the next publish removes.
The layout is described in :mod:`containers.publish.catalogue`.

``CONTAINERS_PUBLISH_COPY_DELAY`` (seconds per 8 MiB chunk) slows the copy down: a fault
injection hook, so tests can kill a publish while it is copying.
"""

from __future__ import annotations

import datetime
import getpass
import grp
import hashlib
import json
import os
import socket
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from containers.app import Project, smoke
from containers.build import provenance as image_provenance
from containers.errors import (CommandFailed, ConfigError, ContainersError, PerformanceFailed,
                               VerdictFailed)
from containers.files import atomic_write_bytes, atomic_write_text, sha256_file
from containers.host.process import run
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.sites import Site
from containers.locking import file_lock
from containers.prove.smoke import SmokeOptions
from containers.publish import catalogue as cat, signing
from containers.publish.modulefile import (ModuleSpec, exec_name, is_env_name, render_exec_wrapper,
                                           render_modulefile)
from containers.report import console, human_bytes, table

Say = Callable[[str], None]
LOCK_NAME = ".publish.lock"
CATALOGUE_NAME = "catalogue.json"
COPY_CHUNK = 8 << 20
COPY_DELAY_ENV = "CONTAINERS_PUBLISH_COPY_DELAY"
# Enough to prove ranks talk and sum correctly; the bandwidth table is `invoke smoke`'s job.
QUICK_SMOKE = SmokeOptions(gpus=2, sizes="4K:256K", iters=3, warmup=1, timeout=300)


def _print(line: str) -> None:
    print(line, flush=True)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------- permissions
@dataclass(frozen=True)
class Modes:
    """Permissions of published files: world-readable (0644/0755) or group-only (0640/0750)."""

    file: int
    dir: int
    gid: int | None

    @classmethod
    def of(cls, *, world_readable: bool, gid: int | None) -> "Modes":
        return cls(0o644, 0o755, gid) if world_readable else cls(0o640, 0o750, gid)

    @property
    def umask(self) -> int:
        return 0o777 & ~self.dir


def resolve_group(name: str) -> int | None:
    """The group id for ``--group`` (empty: leave groups alone), checked before any work."""
    if not name:
        return None
    try:
        gid = grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"group '{name}' does not exist on this machine", key="--group") \
            from None
    if os.geteuid() != 0 and gid not in os.getgroups():
        raise ConfigError(f"you are not a member of group '{name}', so files cannot be given "
                          "to it", key="--group")
    return gid


def expected_mode(path: Path, modes: Modes) -> int:
    if path.is_dir():
        return modes.dir
    return modes.dir if path.name.endswith("-exec") and path.parent.name == "bin" else modes.file


def managed_paths(dest: Path, target: str) -> list[Path]:
    """What one publish owns: the target's folders and files, modules, keys and catalogue."""
    roots = [dest / target, dest / "modules" / target, dest / "keys"]
    paths = [dest / CATALOGUE_NAME, dest / LOCK_NAME, dest / "modules"]
    for root in roots:
        if root.is_dir():
            paths += [root, *root.rglob("*")]
    return [p for p in paths if (p.exists() and not p.is_symlink())]


def apply_modes(paths: list[Path], modes: Modes) -> None:
    for path in paths:
        keep = stat.S_IMODE(path.stat().st_mode) & stat.S_ISGID if path.is_dir() else 0
        os.chmod(path, expected_mode(path, modes) | keep)
        if modes.gid is not None:
            os.chown(path, -1, modes.gid, follow_symlinks=False)


def mode_problems(paths: list[Path], modes: Modes | None) -> list[str]:
    """Files that are world-writable, or (with ``modes``) not as configured."""
    problems = []
    for path in paths:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o002:
            problems.append(f"{path}: world-writable (mode {mode:04o})")
        elif modes is not None and mode & 0o777 != expected_mode(path, modes):
            problems.append(f"{path}: mode {mode:04o}, expected {expected_mode(path, modes):04o}")
        if modes is not None and modes.gid is not None and info.st_gid != modes.gid:
            problems.append(f"{path}: group {info.st_gid}, expected {modes.gid}")
    return problems


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    """Files are born with their final modes, so none is ever briefly too open."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


# ------------------------------------------------------------------------------------ plan
@dataclass(frozen=True)
class PublishPlan:
    """Where everything goes and what will be done; computed before anything is touched."""

    target: Target
    site: Site
    image: Path
    provenance: dict
    version: str
    dest: Path
    sign: bool
    keep: int | None
    force: bool
    skip_checks: bool
    modes: Modes
    keysdir: Path | None
    keyidx: int

    @property
    def folder(self) -> Path:
        return self.dest / self.target.name

    @property
    def sif(self) -> Path:
        return self.folder / cat.sif_name(self.version)

    @property
    def checksum(self) -> Path:
        return self.sif.with_name(self.sif.name + ".sha256")

    @property
    def temp(self) -> Path:
        return self.folder / f".{self.sif.name}.{os.getpid()}.partial"

    @property
    def module_dir(self) -> Path:
        return self.dest / "modules" / self.target.name

    @property
    def module(self) -> Path:
        return self.module_dir / f"{self.version}.lua"

    @property
    def exec_path(self) -> Path:
        return self.folder / "bin" / exec_name(self.target.name)


def plan_publish(project: Project, *, target: str, dest: Path | str, version: str | None,
                 sign: bool, keep: int | None, group: str | None, force: bool,
                 skip_checks: bool) -> PublishPlan:
    item = project.target(target)
    site = project.site_of(item)
    settings = project.settings
    image = settings.image_path(item.name)
    provenance = image_provenance.read(settings.provenance_path(item.name))
    if not image.is_file():
        raise ConfigError(f"image {image} is not built; run: invoke build --target {item.name}")
    if not provenance.get("sha256"):
        raise ConfigError(f"{image} has no provenance record with a sha256 "
                          f"({settings.provenance_path(item.name)}); rebuild it with "
                          f"invoke build --target {item.name} --force")
    for key in site.env:
        if not is_env_name(key):
            raise ConfigError("not a usable environment variable name for a module file",
                              path=site.path, line=site.lines.get("env"), key=key)
    if keep is not None and keep < 1:
        raise ConfigError(f"--keep must be at least 1 (got {keep})", key="--keep")
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    if dest.exists() and stat.S_IMODE(dest.stat().st_mode) & 0o002:
        raise ConfigError(f"{dest} is world-writable: anyone could replace published images; "
                          "publish into a folder only admins can write")
    gid = resolve_group(settings.publish_group if group is None else group)
    return PublishPlan(
        target=item, site=site, image=image, provenance=provenance,
        version=cat.validate_version(version) if version else cat.default_version(provenance),
        dest=dest, sign=sign, keep=keep, force=force, skip_checks=skip_checks,
        modes=Modes.of(world_readable=settings.publish_world_readable, gid=gid),
        keysdir=settings.sign_keysdir, keyidx=settings.sign_keyidx)


# ---------------------------------------------------------------------------------- checks
def find_verdict(results_dir: Path, target: str, sha256: str) -> tuple[Path, dict] | None:
    """The newest passing smoke verdict (2 ranks or more) for exactly this image."""
    best: tuple[Path, dict] | None = None
    for path in (results_dir / "smoke").glob("*/verdict.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (record.get("target") == target and record.get("sha256") == sha256
                and record.get("passed") is True and int(record.get("ranks") or 0) >= 2
                and (best is None or str(record.get("date")) > str(best[1].get("date")))):
            best = (path, record)
    return best


def _smoke_summary(path: Path, record: dict, *, run_now: bool) -> dict:
    keys = ("passed", "site", "partition", "ranks", "nodes", "backend", "wrong_total", "largest",
            "transport", "performance", "seconds", "date")
    return {**{k: record.get(k) for k in keys}, "verdict": str(path), "run_now": run_now}


def _apptainer_test(runtime: Runtime, plan: PublishPlan, *, tested_at_build: bool,
                    say: Say) -> dict:
    if not plan.target.test:
        return {"passed": None, "how": "the definition has no %test"}
    if tested_at_build:
        return {"passed": True, "how": "at build (provenance)",
                "date": plan.provenance.get("build_date")}
    say(f"checks: {' '.join(runtime.test_argv(plan.image))}")
    result = run(runtime.test_argv(plan.image), timeout=600, on_line=lambda l: say(f"  {l}"))
    if not result.ok:
        raise VerdictFailed(f"not publishing {plan.target.name}: apptainer test failed (exit "
                          f"{result.returncode}): " + " | ".join(result.tail[-4:]))
    return {"passed": True, "how": "run now", "date": _now()}


def ensure_checks(project: Project, plan: PublishPlan, runtime: Runtime, *, say: Say) -> dict:
    """The checks record for the catalogue; raises :class:`VerdictFailed` when one fails."""
    if plan.skip_checks:
        banner = "!" * 72
        warning = (f"WARNING: --skip-checks: {plan.target.name} is published WITHOUT "
                   "apptainer test and smoke checks.")
        for line in (banner, warning,
                     "This is recorded in its catalogue entry (checks.skipped = true).", banner):
            say(line)
        return {"skipped": True, "apptainer_test": None, "smoke": None}
    sha = plan.provenance["sha256"]
    found = find_verdict(project.settings.results_dir, plan.target.name, sha)
    tested = found is not None and plan.provenance.get("tested") is True
    test = _apptainer_test(runtime, plan, tested_at_build=tested, say=say)
    if found is not None:
        say(f"checks: passing smoke verdict for this image (sha256 {sha[:12]}): {found[0]}")
        return {"skipped": False, "apptainer_test": test,
                "smoke": _smoke_summary(*found, run_now=False)}
    say(f"checks: no passing smoke verdict for sha256 {sha[:12]}; running a quick "
        f"{QUICK_SMOKE.gpus}-rank smoke test")
    try:
        smoke(project, target=plan.target.name, options=QUICK_SMOKE, say=lambda l: say(f"  {l}"))
    except VerdictFailed as exc:
        raise VerdictFailed(f"not publishing {plan.target.name}: {exc}") from None
    except PerformanceFailed as exc:
        # Only the sanity gate blocks publishing; a slow run is recorded with the verdict.
        say(f"checks: WARNING: {exc}")
    found = find_verdict(project.settings.results_dir, plan.target.name, sha)
    if found is None:
        raise VerdictFailed(f"not publishing {plan.target.name}: the smoke run passed but wrote "
                          "no verdict for this image's sha256 (was it rebuilt meanwhile?)")
    return {"skipped": False, "apptainer_test": test,
            "smoke": _smoke_summary(*found, run_now=True)}


# ------------------------------------------------------------------------------ file steps
def _fsync(path: Path) -> None:
    """Flush a file's data, or a folder's entries (so a rename in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_hashing(source: Path, temp: Path, *, mode: int, say: Say) -> str:
    """Copy ``source`` to a new ``temp`` (never an existing file), fsync it; return the sha256
    of the bytes read, so the copy is checked against the build record in the same pass."""
    delay = float(os.environ.get(COPY_DELAY_ENV) or 0)
    digest = hashlib.sha256()
    size = source.stat().st_size
    say(f"copying {source} -> {temp} ({human_bytes(size)})")
    started = time.monotonic()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with open(source, "rb") as reader, os.fdopen(fd, "wb") as writer:
        while chunk := reader.read(COPY_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
            if delay:
                time.sleep(delay)
        writer.flush()
        os.fsync(writer.fileno())
    say(f"copied in {time.monotonic() - started:.1f} s")
    return digest.hexdigest()


def replace_symlink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically: a temp symlink renamed over the old one."""
    temp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    os.symlink(target, temp)
    os.replace(temp, link)


def sweep_temps(plan: PublishPlan, say: Say) -> None:
    """Remove what a killed publish left (we hold the lock, so none of it is in use)."""
    folders = [plan.dest, plan.folder, plan.folder / "bin", plan.module_dir, plan.dest / "keys"]
    for folder in folders:
        for path in folder.glob(".*") if folder.is_dir() else ():
            if path.name.endswith(cat.TEMP_SUFFIXES):
                say(f"removing leftover of an interrupted publish: {path}")
                path.unlink(missing_ok=True)


def load_catalogue(path: Path) -> dict:
    if not path.exists():
        return cat.empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"catalogue is not valid JSON ({exc}); fix or restore it before "
                          "publishing", path=path) from None
    return cat.check_format(data, path=str(path))


def _module_spec(plan: PublishPlan, *, sha256: str, fingerprint: str | None,
                 when: str) -> ModuleSpec:
    return ModuleSpec(target=plan.target.name, version=plan.version,
                      description=plan.target.description, image=str(plan.sif),
                      bin_dir=str(plan.exec_path.parent), runtime=plan.site.runtime,
                      gpu_flag=plan.site.gpu_flag, binds=plan.site.binds, env=dict(plan.site.env),
                      sha256=sha256, signed_by=fingerprint, published=when)


def _stage_image(plan: PublishPlan, runtime: Runtime, key: signing.SigningKey | None,
                 say: Say) -> tuple[str, int]:
    """Copy, check, sign and checksum the temp copy, then rename it into place."""
    copied = copy_hashing(plan.image, plan.temp, mode=plan.modes.file, say=say)
    if copied != plan.provenance["sha256"]:
        raise ContainersError(f"{plan.image} does not match its build record (sha256 "
                              f"{copied[:12]}, recorded {plan.provenance['sha256'][:12]}); "
                              f"rebuild it: invoke build --target {plan.target.name} --force")
    sha256 = copied
    if key is not None:
        say(f"signing with key #{key.index} {key.fingerprint} ({key.user})")
        signing.sign(runtime, plan.temp, keysdir=plan.keysdir, keyidx=plan.keyidx)
        if key.fingerprint not in signing.signers(runtime, plan.temp, keysdir=plan.keysdir):
            raise ContainersError(f"{plan.temp}: the new signature is not by {key.fingerprint}")
        _fsync(plan.temp)
        sha256 = sha256_file(plan.temp)
    atomic_write_text(plan.checksum, cat.checksum_line(sha256, plan.version))
    size = plan.temp.stat().st_size
    os.replace(plan.temp, plan.sif)
    _fsync(plan.folder)
    say(f"published {plan.sif} (sha256 {sha256})")
    return sha256, size


def _entry(plan: PublishPlan, runtime: Runtime, *, sha256: str, size: int, checks: dict,
           key: signing.SigningKey | None, replaced: dict | None, when: str) -> dict:
    def dest_rel(path: Path) -> str:
        return str(path.relative_to(plan.dest))

    return {
        "target": plan.target.name, "version": plan.version, "file": dest_rel(plan.sif),
        "checksum_file": dest_rel(plan.checksum), "module": dest_rel(plan.module),
        "sha256": sha256, "size_bytes": size, "signed": key is not None,
        "key_fingerprint": key.fingerprint if key else None,
        "key_user": key.user if key else None,
        "public_key": f"keys/{key.fingerprint}.pgp" if key else None,
        "checks": checks, "forced": replaced is not None,
        "replaced_sha256": replaced.get("sha256") if replaced else None,
        "site": plan.site.name, "published": when,
        "published_by": f"{getpass.getuser()}@{socket.gethostname()}",
        "publisher_runtime": {"flavour": runtime.flavour, "version": runtime.version},
        "provenance": {k: v for k, v in plan.provenance.items() if k != "labels"},
    }


def _existing(plan: PublishPlan, catalogue: dict) -> dict | None:
    """The entry this publish would replace; refused unless ``--force``."""
    entry = cat.find(catalogue, plan.target.name, plan.version)
    if entry is None and plan.sif.exists() and not plan.force:
        raise ConfigError(f"{plan.sif} exists but is not in the catalogue (a publish killed "
                          "after its rename, or a hand copy): check it, then --force to publish "
                          "this version properly", key="--version")
    if entry is not None and not plan.force:
        raise ConfigError(f"{plan.target.name} {plan.version} is already published "
                          f"({plan.sif}); give another --version, or --force to replace it",
                          key="--version")
    return entry if entry is not None else ({} if plan.sif.exists() else None)


def _prune(plan: PublishPlan, catalogue: dict, when: str, say: Say) -> tuple[dict, list[str]]:
    if plan.keep is None:
        return catalogue, []
    versions = [e["version"] for e in cat.entries(catalogue, plan.target.name)]
    gone = cat.select_prune(versions, keep=plan.keep,
                            latest=cat.latest(catalogue, plan.target.name))
    for version in gone:
        say(f"pruning {plan.target.name} {version} (--keep {plan.keep})")
    return cat.without_versions(catalogue, plan.target.name, gone, now=when), gone


def _remove_version(plan: PublishPlan, version: str) -> None:
    sif = plan.folder / cat.sif_name(version)
    for path in (plan.module_dir / f"{version}.lua", sif.with_name(sif.name + ".sha256"), sif):
        path.unlink(missing_ok=True)


def execute(plan: PublishPlan, runtime: Runtime, *, checks: dict,
            key: signing.SigningKey | None, say: Say) -> dict:
    """Steps 1-3 of the module docstring, under the publish lock."""
    created = not plan.dest.exists()  # an existing folder's own mode is the site's business
    with _umask(plan.modes.umask), file_lock(
            plan.dest / LOCK_NAME, on_wait=lambda: say("waiting for another publish to finish")):
        for folder in (plan.folder / "bin", plan.module_dir):
            folder.mkdir(parents=True, exist_ok=True)
        sweep_temps(plan, say)
        catalogue = load_catalogue(plan.dest / CATALOGUE_NAME)
        replaced = _existing(plan, catalogue)
        public = signing.public_key(runtime, plan.keysdir, key.fingerprint) if key else b""
        try:
            sha256, size = _stage_image(plan, runtime, key, say)
        finally:
            plan.temp.unlink(missing_ok=True)
        when = _now()
        if key is not None:
            (plan.dest / "keys").mkdir(exist_ok=True)
            atomic_write_bytes(plan.dest / "keys" / f"{key.fingerprint}.pgp", public)
        spec = _module_spec(plan, sha256=sha256, fingerprint=key and key.fingerprint, when=when)
        atomic_write_text(plan.module, render_modulefile(spec))
        atomic_write_text(plan.exec_path, render_exec_wrapper(
            plan.target.name, runtime=plan.site.runtime, gpu_flag=plan.site.gpu_flag))
        entry = _entry(plan, runtime, sha256=sha256, size=size, checks=checks, key=key,
                       replaced=replaced, when=when)
        catalogue, gone = _prune(plan, cat.with_entry(catalogue, entry, now=when), when, say)
        atomic_write_text(plan.dest / CATALOGUE_NAME, json.dumps(catalogue, indent=2) + "\n")
        replace_symlink(plan.folder / "latest", plan.sif.name)
        replace_symlink(plan.module_dir / "default", plan.module.name)
        for version in gone:
            _remove_version(plan, version)
        paths = [plan.dest] * created + managed_paths(plan.dest, plan.target.name)
        apply_modes(paths, plan.modes)
        problems = mode_problems(paths, plan.modes)
        if problems:
            raise ContainersError("permissions are not as configured: " + "; ".join(problems))
    return entry


def publish(project: Project, *, target: str, dest: Path | str, version: str | None = None,
            sign: bool = False, keep: int | None = None, group: str | None = None,
            force: bool = False, skip_checks: bool = False, say: Say = _print) -> dict:
    """Check, copy, sign, checksum, catalogue and module-file one image; its catalogue entry."""
    plan = plan_publish(project, target=target, dest=dest, version=version, sign=sign, keep=keep,
                        group=group, force=force, skip_checks=skip_checks)
    runtime = project.runtime(flavour=plan.site.runtime)
    say(f"publish: {plan.target.name} {plan.version} -> {plan.sif}")
    if plan.dest.is_dir():  # early, friendly refusal; checked again under the lock
        _existing(plan, load_catalogue(plan.dest / CATALOGUE_NAME))
    key = signing.signing_key(runtime, plan.keysdir, plan.keyidx) if plan.sign else None
    checks = ensure_checks(project, plan, runtime, say=say)
    entry = execute(plan, runtime, checks=checks, key=key, say=say)
    say(f"module: module use {plan.dest / 'modules'}; module load "
        f"{plan.target.name}/{plan.version}")
    return entry


# ---------------------------------------------------------------------------------- verify
def snapshot(dest: Path) -> dict[str, cat.TargetFolder]:
    """What the publish folder holds, per target, for :func:`catalogue.consistency_problems`."""
    folders: dict[str, cat.TargetFolder] = {}
    for folder in sorted(p for p in dest.iterdir() if p.is_dir() and not p.is_symlink()):
        if folder.name in ("modules", "keys") or folder.name.startswith("."):
            continue
        found = cat.TargetFolder()
        for path in folder.iterdir():
            name = path.name
            if name.startswith("."):
                if name.endswith(cat.TEMP_SUFFIXES):
                    found.temps.append(str(path))
            elif name.endswith(".sif") and path.is_file() and not path.is_symlink():
                found.sifs.add(name[:-4])
            elif name.endswith(".sif.sha256"):
                found.checksums.add(name[:-len(".sif.sha256")])
        latest = folder / "latest"
        found.latest_link = os.readlink(latest) if latest.is_symlink() else None
        modules = dest / "modules" / folder.name
        if modules.is_dir():
            found.modules = {p.stem for p in modules.glob("*.lua")}
            default = modules / "default"
            found.default_link = os.readlink(default) if default.is_symlink() else None
        wrapper = folder / "bin" / exec_name(folder.name)
        found.has_exec = wrapper.is_file() and os.access(wrapper, os.X_OK)
        folders[folder.name] = found
    return folders


def _check_entry(dest: Path, entry: dict, runtime: Runtime | None) -> tuple[list[str], str]:
    """Problems with one published version (checksum, checksum file, signature); its
    signature cell for the table."""
    path = dest / entry["file"]
    if not path.is_file():
        return [], "-"  # reported by the consistency check
    problems = []
    actual = sha256_file(path)
    if actual != entry["sha256"]:
        problems.append(f"{path}: sha256 {actual[:16]}... does not match the catalogue "
                        f"({entry['sha256'][:16]}...): the file is corrupt or was replaced")
    sums = dest / entry["checksum_file"]
    if sums.is_file():
        parsed = cat.parse_checksum_line(sums.read_text(encoding="utf-8"))
        if parsed != (entry["sha256"], path.name):
            problems.append(f"{sums}: does not say '{entry['sha256'][:16]}...  {path.name}'")
    if not entry.get("signed"):
        return problems, "unsigned"
    try:
        signing.verify_with_key(runtime, path, dest / entry["public_key"],
                                entry["key_fingerprint"])
    except (VerdictFailed, CommandFailed) as exc:
        problems.append(str(exc))
        return problems, "FAILED"
    return problems, entry["key_fingerprint"][-16:]


def verify(project: Project, *, dest: Path | str, target: str | None = None,
           say: Say = _print) -> list[tuple]:
    """Check every published image and the catalogue; :class:`VerdictFailed` naming each problem."""
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    path = dest / CATALOGUE_NAME
    if not path.is_file():
        raise VerdictFailed(f"{path}: no catalogue (nothing was published to {dest})")
    try:
        catalogue = load_catalogue(path)
    except ConfigError as exc:
        raise VerdictFailed(str(exc)) from None
    folders = snapshot(dest)
    if target is not None:
        if target not in catalogue["targets"] and target not in folders:
            raise VerdictFailed(f"{target}: nothing published under {dest}")
        catalogue = {**catalogue, "targets": {k: v for k, v in catalogue["targets"].items()
                                              if k == target}}
        folders = {k: v for k, v in folders.items() if k == target}
    problems = cat.consistency_problems(catalogue, folders)
    signed = any(e.get("signed") for b in catalogue["targets"].values() for e in b["versions"])
    runtime = project.runtime() if signed else None
    rows = []
    for name, block in sorted(catalogue["targets"].items()):
        for entry in block["versions"]:
            found, signature = _check_entry(dest, entry, runtime)
            problems += found
            rows.append((name, entry["version"], "yes" if entry["version"] == block["latest"]
                         else "", human_bytes(entry["size_bytes"]), entry["sha256"][:16],
                         signature, "skipped" if entry["checks"].get("skipped") else "passed",
                         entry["published"], "FAILED" if found else "ok"))
    problems += mode_problems([p for p in [dest, *dest.rglob("*")] if not p.is_symlink()], None)
    console().print(table(f"Published images in {dest}", ("target", "version", "latest", "size",
                                                          "sha256", "signature", "checks",
                                                          "published", "status"), rows))
    for folder in folders.values():
        for temp in folder.temps:
            say(f"note: {temp} is a leftover of an interrupted publish (ignored; the next "
                "publish removes it)")
    for problem in problems:
        say(f"problem: {problem}")
    if problems:
        raise VerdictFailed(f"verify found {len(problems)} problem(s) in {dest}: "
                          + "; ".join(problems))
    say(f"verify: {len(rows)} published image(s) in {dest}: all ok")
    return rows
