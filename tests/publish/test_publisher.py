"""Unit tests of the publish sequence, on a small stand-in image file (no Apptainer: unsigned,
and the checks are the caller's function). The real image, signing, Lmod and killed publishes
are in ``test_publish_image.py``."""

from __future__ import annotations

import errno
import getpass
import grp
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from containers.errors import ConfigError, StateError, UsageError, VerdictFailed, WriteRefused
from containers.publish import catalogue as cat, diff as diffing, publisher
from containers.publish.planning import PublishRequest, check_dest
from containers.publish.publisher import COPY_DELAY_ENV, publish
from containers.image.identity import chain_hashes
from tests.fixtures.data import load_targets
from tests.fixtures import ROOT
from tests.fixtures.disks import Ways
from tests.publish import htmlcheck
from tests.publish.standin import IMAGE, RUNTIME, SHA, Built, no_quick_check, tree
from tests.test_progress import on_a_terminal


def test_published_module_loads_the_sites_job_modules(data_built: Built) -> None:
    """The module file loads what the site's jobs load (``modules``, then ``runtime_module``:
    Derecho's cuda and apptainer), and names them for the wrapper."""
    data_built.site = data_built.site.model_copy(update={"modules": ("cuda",),
                                                         "runtime_module": "apptainer"})
    publish(data_built.plan(version="1.0"), RUNTIME,
            quick_check=data_built.quick_check_writing_verdict(), say=lambda line: None)
    lines = (data_built.dest / "modules" / "cpu" / "1.0.lua").read_text().splitlines()
    assert [line for line in lines if line.startswith("depends_on(")] == [
        'depends_on("cuda")', 'depends_on("apptainer")']
    assert 'setenv("CONTAINER_MODULES", "cuda apptainer")' in lines


# ------------------------------------------------------------------------------ sequence
def test_publish_copies_checksums_catalogues_and_links(data_built: Built) -> None:
    lines: list[str] = []
    entry = publish(data_built.plan(version="1.0"), RUNTIME,
                    quick_check=data_built.quick_check_writing_verdict(), say=lines.append)
    dest = data_built.dest
    assert (dest / "cpu" / "1.0.sif").read_bytes() == IMAGE
    assert (dest / "cpu" / "1.0.sif.sha256").read_text() == f"{SHA}  1.0.sif\n"
    assert os.readlink(dest / "cpu" / "latest") == "1.0.sif"
    assert os.readlink(dest / "modules" / "cpu" / "default") == "1.0.lua"
    assert (dest / "cpu" / "bin" / "cpu-exec").stat().st_mode & 0o111
    assert cat.load(dest / cat.CATALOGUE_NAME)["targets"]["cpu"]["versions"] == [entry]
    assert entry["sha256"] == SHA and entry["size_bytes"] == len(IMAGE)
    assert entry["signed"] is False and entry["forced"] is False
    assert entry["checks"]["smoke"]["run_now"] is True
    assert "labels" not in entry["provenance"] and entry["provenance"]["sha256"] == SHA
    assert "  smoke: PASS" in lines and lines[-1].startswith("module: module use ")
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            wanted = 0o755 if path.is_dir() or path.name == "cpu-exec" else 0o644
            assert stat.S_IMODE(path.stat().st_mode) == wanted, path
    assert not list(dest.rglob(".*")), "no temp left, and no lock file either"


def _reviewed_with_a_diff(plan, checks, say) -> dict:
    """A review (as the app's) whose diff against the current latest says one package moved."""
    def side(version: str, numpy: str) -> dict:
        return diffing.side(f"cpu@{version}", {"pip_packages": [
            {"name": "numpy", "version": numpy}]}, size=len(IMAGE), smoke=None)
    return {"diff": diffing.diff(side("1.0", "2.0.0"), side(plan.version, "2.1.0"))}


def test_publish_writes_a_page_users_browse_and_a_diff_page(data_built: Built) -> None:
    """The page of a real publish sequence (stand-in image): the recipe's description, a
    ``module load`` line per version, the site's runtime line, links that resolve to the
    checksum files and the diff page; well formed, and no publisher user or host."""
    data_built.publish(version="1.0", skip_checks=True)
    entry = publish(data_built.plan(version="2.0", skip_checks=True), RUNTIME,
                    quick_check=no_quick_check, say=[].append, review=_reviewed_with_a_diff)
    dest = data_built.dest
    assert entry["description"] == data_built.target.description
    assert entry["site_runtime"] == {"runtime": "apptainer", "gpu_flag": None}
    assert entry["diff_page"] == "cpu/2.0.diff.html"
    page = (dest / cat.PAGE_NAME).read_text()
    seen = htmlcheck.text_of(page)
    assert data_built.target.description in seen
    assert [line for line in seen.splitlines() if line.startswith("module load cpu/")] == \
        ["module load cpu/2.0", "module load cpu/1.0"]
    assert seen.count('apptainer exec "$SIF" python -c') == 2  # the local site: no GPU flag
    assert 'href="cpu/1.0.sif.sha256"' in page and 'href="cpu/2.0.diff.html"' in page
    assert f"{getpass.getuser()}@" not in page and socket.gethostname() not in seen.split()
    for written in (dest / cat.PAGE_NAME, dest / "cpu" / "2.0.diff.html"):
        assert htmlcheck.problems(written, dest) == []
    data_built.publish(version="3.0", skip_checks=True, keep=1)  # prunes the diff page too
    assert not (dest / "cpu" / "2.0.diff.html").exists()
    assert htmlcheck.problems(dest / cat.PAGE_NAME, dest) == []


def test_publish_refuses_a_version_twice_unless_forced(data_built: Built) -> None:
    first = data_built.publish(version="1.0", skip_checks=True)
    with pytest.raises(StateError, match=r"^cpu 1.0 is already published \(.*1.0.sif\); give "
                                         "another --version, or --force to replace it$"):
        data_built.publish(version="1.0", skip_checks=True)
    again = data_built.publish(version="1.0", skip_checks=True, force=True)
    assert again["forced"] is True and again["replaced_sha256"] == first["sha256"]
    assert len(cat.entries(cat.load(data_built.dest / cat.CATALOGUE_NAME), "cpu")) == 1


def test_publish_refuses_a_file_the_catalogue_does_not_know(data_built: Built) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    stray = data_built.dest / "cpu" / "2.0.sif"
    stray.write_bytes(b"hand copy")
    with pytest.raises(StateError, match="2.0.sif exists but is not in the catalogue"):
        data_built.publish(version="2.0", skip_checks=True)
    (data_built.dest / cat.CATALOGUE_NAME).write_text("{")
    with pytest.raises(StateError, match="catalogue is not valid JSON"):
        data_built.publish(version="3.0", skip_checks=True)
    (data_built.dest / cat.CATALOGUE_NAME).write_text("[]")
    with pytest.raises(StateError, match=f"^{data_built.dest / cat.CATALOGUE_NAME}: not a "
                                         "catalogue"):
        data_built.publish(version="3.0", skip_checks=True)


def test_a_copy_that_does_not_match_the_build_record_is_refused(data_built: Built) -> None:
    data_built.settings.image_path("cpu").write_bytes(IMAGE + b"changed since the build")
    with pytest.raises(StateError, match="does not match its build record"):
        data_built.publish(version="1.0", skip_checks=True)
    assert not (data_built.dest / "cpu").exists(), "rolled back: no temp, no folder it made"
    assert not (data_built.dest / cat.CATALOGUE_NAME).exists()


def test_leftovers_of_a_killed_publish_are_swept(data_built: Built, monkeypatch) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    leftover = data_built.dest / "cpu" / ".2.0.sif.12345.partial"
    leftover.write_bytes(b"half")
    monkeypatch.setenv(COPY_DELAY_ENV, "0.001")
    lines: list[str] = []
    data_built.publish(lines, version="2.0", skip_checks=True)
    assert f"removing leftover of an interrupted publish: {leftover}" in lines
    assert not leftover.exists()


def test_failed_checks_publish_nothing(data_built: Built) -> None:
    def failing(say) -> None:
        raise VerdictFailed("smoke FAILED for cpu (2 ranks)")

    with pytest.raises(VerdictFailed, match="^not publishing cpu: smoke FAILED"):
        publish(data_built.plan(version="1.0"), RUNTIME, quick_check=failing, say=print)
    assert not data_built.dest.exists()


# ------------------------------------------------------------------------ hostile input
def test_republishing_the_same_build_under_a_new_version_is_said(data_built: Built) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    lines: list[str] = []
    data_built.publish(lines, version="2.0", skip_checks=True)
    assert (f"note: this build (sha256 {SHA[:12]}) is already published as cpu 1.0; "
            "publishing it again as 2.0") in lines


def _record(built: Built, text: str) -> Path:
    record = built.settings.provenance_path("cpu")
    record.write_text(text)
    return record


@pytest.mark.parametrize("text", ["[]", '"sha"', "null", "7"])
def test_a_build_record_that_is_not_a_json_object_is_named(data_built: Built, text: str) -> None:
    record = _record(data_built, text)
    with pytest.raises(StateError, match=f"^the image record {record} is unreadable: the image "
                                         "record is not a JSON object; rebuild"):
        data_built.plan(version="1.0")


def test_a_build_record_with_a_nan_arch_is_never_published(data_built: Built) -> None:
    """Issue 48: ``arch: NaN`` published, and catalogue.json got a bare NaN."""
    path = data_built.settings.provenance_path("cpu")
    _record(data_built, json.dumps({**json.loads(path.read_text()), "arch": float("nan")}))
    with pytest.raises(StateError, match=f"^the image record {path} is unreadable: key 'arch': "
                                         "Input should be a valid string \\(got nan\\); rebuild"):
        data_built.publish(version="1.0", skip_checks=True)
    assert not data_built.dest.exists()


def test_a_build_record_with_a_bad_sha256_is_refused_before_copying(data_built: Built) -> None:
    _record(data_built, '{"sha256": "5", "build_date": "2026-11-21"}')
    with pytest.raises(StateError, match="has no provenance record with a sha256"):
        data_built.publish(version="1.0", skip_checks=True)
    path = _record(data_built, '{"sha256": 5, "build_date": "2026-11-21"}')
    with pytest.raises(StateError, match=f"^the image record {path} is unreadable: key 'sha256': "
                                         "Input should be a valid string \\(got 5\\); rebuild"):
        data_built.publish(version="1.0", skip_checks=True)
    record = _record(data_built, "{")
    with pytest.raises(StateError, match=f"^the image record {record} is unreadable: not JSON"):
        data_built.plan(version="1.0")
    assert not data_built.dest.exists()


HOSTILE = "cpu\nos.execute('touch PWNED')\n--"


def test_a_hostile_target_name_never_reaches_the_writers(data_built: Built) -> None:
    with pytest.raises(UsageError, match=r"^--target: \"cpu\\nos.execute.*is not a usable "
                                         "target name"):
        PublishRequest(target=HOSTILE, dest=data_built.dest)
    for name in (HOSTILE, "../cpu", "modules"):
        data_built.target = data_built.target.model_copy(update={"name": name})
        with pytest.raises(ConfigError, match="target: .* is not a usable target name") as no:
            data_built.publish(version="1.0", skip_checks=True)
        assert "\n" not in str(no.value)
    assert not data_built.dest.exists()


def _outside(tmp_path: Path) -> Path:
    """A folder outside the publish folder holding a private file a link might expose."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "private").write_text("secret")
    os.chmod(folder / "private", 0o600)
    return folder


@pytest.mark.parametrize("linked", ["modules/cpu", "cpu", "cpu/bin", "modules", "keys",
                                    "catalogue.json", ".publish.lock"])
def test_publish_never_follows_a_link_inside_dest(data_built: Built, tmp_path: Path,
                                                  linked: str) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    elsewhere = _outside(tmp_path)
    link = data_built.dest / linked
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink(missing_ok=True)  # keys/ exists only once something was signed
    link.symlink_to(elsewhere if linked.count("/") or "." not in linked
                    else elsewhere / "private")
    group = grp.getgrgid(os.getgid()).gr_name
    with pytest.raises(StateError) as refused:
        data_built.publish(version="2.0", skip_checks=True, group=group)
    assert str(refused.value).startswith(f"{link} is a symbolic link; nothing inside "
                                         f"{data_built.dest} is reached through a link")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["private"]
    assert stat.S_IMODE((elsewhere / "private").stat().st_mode) == 0o600
    assert (elsewhere / "private").read_text() == "secret"


@pytest.mark.parametrize("planted", ["fifo", pytest.param("other", marks=pytest.mark.skipif(
    os.geteuid() != 0, reason="chown to another uid needs root"))])
def test_publish_never_replaces_a_fifo_or_another_users_file(data_built: Built,
                                                             planted: str) -> None:
    """A FIFO or another user's file where publish writes one of its files (the page) is
    refused in one line before anything is renamed into place, and left as it was."""
    data_built.publish(version="1.0", skip_checks=True)
    catalogue = data_built.dest / cat.PAGE_NAME
    before = tree(data_built.dest)
    catalogue.unlink()
    if planted == "fifo":
        os.mkfifo(catalogue, 0o644)
        why = "is a FIFO, not a regular file; refusing to replace it"
    else:
        catalogue.write_text("{}")
        os.chown(catalogue, 65534, 65534)
        why = "is a file that belongs to .*uid 65534.*; refusing to replace it"
    with pytest.raises(WriteRefused, match=f"^{catalogue} {why}"):
        data_built.publish(version="2.0", skip_checks=True)
    assert catalogue.is_fifo() if planted == "fifo" else catalogue.stat().st_uid == 65534
    assert not (data_built.dest / "cpu" / "2.0.sif").exists()
    assert os.readlink(data_built.dest / "cpu" / "latest") == "1.0.sif"
    catalogue.unlink()  # _tree reads every file: not a FIFO
    assert tree(data_built.dest) == {
        k: v for k, v in before.items() if k != cat.PAGE_NAME}


def test_latest_that_is_not_a_link_is_refused(data_built: Built) -> None:
    data_built.publish(version="1", skip_checks=True)
    latest = data_built.dest / "cpu" / "latest"
    latest.unlink()
    latest.mkdir()
    with pytest.raises(StateError, match=f"^{latest} is not a symbolic link"):
        data_built.publish(version="2", skip_checks=True)


# ------------------------------------------------------------------------- all or nothing


def test_too_little_free_space_is_refused_before_any_copy(data_built: Built,
                                                          monkeypatch) -> None:
    data_built.dest.mkdir()
    usage = shutil.disk_usage(data_built.dest)
    monkeypatch.setattr(publisher, "SPACE_MARGIN", usage.total)  # more than can ever be free
    with pytest.raises(StateError, match=r"^not enough free space in .*pub: publishing cpu 1.0 "
                                         r"needs .* \(the image, 48.83 KiB, plus .*\) and .* is "
                                         "free; nothing was published$"):
        data_built.publish(version="1.0", skip_checks=True)
    assert list(data_built.dest.iterdir()) == []


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 256 KiB tmpfs (we run as root in CI), unmounted at teardown; skipped where it cannot
    be mounted."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_while_publishing_rolls_back_and_a_retry_works(
        data_built: Built, small_tmpfs: Path, monkeypatch) -> None:
    """ENOSPC for real: the free-space check passes (no margin), the disk fills while writing
    the catalogue (it keeps a big build record); nothing half-published is left."""
    record = json.loads(data_built.settings.provenance_path("cpu").read_text())
    record["pip_freeze"] = [f"package-{i}==1.0" for i in range(8000)]  # ~150 KiB per entry
    data_built.settings.provenance_path("cpu").write_text(json.dumps(record))
    monkeypatch.setattr(publisher, "SPACE_MARGIN", 0, raising=False)
    dest = small_tmpfs / "pub"
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"x" * (40 << 10))
    with pytest.raises(StateError, match=f"^publishing cpu 1.0 to {dest} failed: the disk is "
                                         "full .*; everything this publish made was removed$"):
        data_built.publish(dest=dest, version="1.0", skip_checks=True)
    assert sorted(p.name for p in dest.iterdir()) == []  # nor its lock file
    filler.unlink()
    record["pip_freeze"] = []
    data_built.settings.provenance_path("cpu").write_text(json.dumps(record))
    entry = data_built.publish(dest=dest, version="1.0", skip_checks=True)
    assert entry["version"] == "1.0" and (dest / "cpu" / "1.0.sif").read_bytes() == IMAGE


# ------------------------------------------------------------------------ the command line
@pytest.fixture
def cli_built(factory_cli_project, data_built: Built, real_runtime) -> Path:
    """A project whose images folder holds the stand-in image; `invoke` runs in it (invoke
    publish asks for the runtime: ``real_runtime``, which ./setup.sh installs). Its record
    carries the cpu target's inputs now, as a fresh build's does (publish refuses a stale one)."""
    record = data_built.settings.provenance_path("cpu")
    record.write_text(json.dumps({**json.loads(record.read_text()), "inputs_hash": chain_hashes(
        load_targets(ROOT), "cpu")["cpu"]}))
    return factory_cli_project(images_dir=data_built.settings.images_dir,
                               results_dir=data_built.settings.results_dir)


def _invoke(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)


def test_cli_dest_naming_a_file_is_one_line(cli_built: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for where in (afile, afile / "pub"):
        result = _invoke(cli_built, "publish", "--target", "cpu", "--dest", str(where),
                         "--skip-checks")
        assert result.returncode == 1, result.stdout + result.stderr
        message = result.stderr.strip()  # the flag check's, or the publish request's
        assert message.startswith("error: --dest") and str(afile) in message, message
        assert len(message.splitlines()) == 1
        assert "Traceback" not in result.stdout + result.stderr
    assert afile.read_text() == "not a folder"


def test_cli_a_full_disk_is_one_line_and_publishes_nothing(cli_built: Path,
                                                           small_tmpfs: Path) -> None:
    dest = small_tmpfs / "pub"
    result = _invoke(cli_built, "publish", "--target", "cpu", "--dest", str(dest),
                     "--version", "1.0", "--skip-checks")
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.fullmatch(rf"error: not enough free space in {dest}: publishing cpu 1.0 needs "
                        r"64\.05 MiB \(the image, 48\.83 KiB, plus 64 MiB\) and .* is free; "
                        r"nothing was published\n", result.stderr), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not dest.exists() or sorted(p.name for p in dest.iterdir()) == []


# --------------------------------------------------------------------------------- progress
PUBLISH_AND_VERIFY = """
import sys
from pathlib import Path
from containers.publish.verify import verify
from tests.publish.standin import Built
built = Built.make(Path(sys.argv[1]))
built.publish(version="1.0", skip_checks=True)
verify(built.dest, runtime=lambda: None, say=print)
"""


def test_publish_and_verify_show_copy_and_hash_progresson_a_terminal(tmp_path: Path) -> None:
    drawn = on_a_terminal([sys.executable, "-c", PUBLISH_AND_VERIFY, str(tmp_path)])
    assert "copy 1.0.sif" in drawn and "sha256 cpu/1.0.sif" in drawn, drawn[-3000:]
    assert "all ok" in drawn


def test_a_failure_after_the_commit_says_the_version_was_published(data_built: Built,
                                                                  monkeypatch) -> None:
    def refused(paths, modes) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(data_built.dest))

    monkeypatch.setattr(publisher, "apply_modes", refused)
    with pytest.raises(StateError, match=r"^cpu 1.0 was published, but then: Operation not "
                                         r"permitted \(.*pub\)$"):
        data_built.publish(version="1.0", skip_checks=True)
    assert cat.latest(cat.load(data_built.dest / cat.CATALOGUE_NAME), "cpu") == "1.0"


def test_a_dest_anyone_could_swap_or_write_into_is_refused(data_built: Built,
                                                          tmp_path: Path) -> None:
    """A world-writable DEST/<t>/ (files planted there would be published with the rest), or a
    DEST under a world-writable parent without the sticky bit (anyone could rename DEST away
    and put their own): each refused in one line before anything is written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UsageError, match=rf"^--dest: {shared / 'pub'}: {shared} is "
                                         "world-writable without the sticky bit"):
        check_dest(PublishRequest(target="cpu", dest=str(shared / "pub")).dest)
    os.chmod(shared, 0o1777)  # sticky, as /tmp: only the owner renames its entries
    check_dest(PublishRequest(target="cpu", dest=str(shared / "pub")).dest)
    data_built.publish(version="1.0", skip_checks=True)
    dest = data_built.dest
    os.chmod(dest / "cpu", 0o777)
    with pytest.raises(StateError, match=rf"^{dest / 'cpu'} is world-writable \(mode 0777\)"):
        data_built.publish(version="2.0", skip_checks=True)
    assert not (dest / "cpu" / "2.0.sif").exists()


def test_a_dest_through_a_link_someone_else_controls_is_refused(data_built: Built,
                                                                tmp_path: Path) -> None:
    """``--dest DIR/lnk/site``, ``lnk`` another user's link in a sticky world-writable folder
    (they may re-point it at any time), or a site under a folder anyone may write: refused in
    one line before anything is written; a site's own link (/scratch) is followed."""
    ways = Ways(tmp_path / "ways")
    for folder, refusal in ways.refusals.items():
        with pytest.raises(UsageError, match=f"^--dest: {folder / 'site'}: {refusal}"):
            data_built.publish(version="1.0", skip_checks=True, dest=folder / "site")
    ways.untouched()
    data_built.publish(version="1.0", skip_checks=True, dest=ways.site / "site")
    assert (ways.elsewhere / "site" / "cpu" / "1.0.sif").read_bytes() == IMAGE
