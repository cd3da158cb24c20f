"""Unit tests of the shared file primitives: atomic writes, fsync, hashing copy, symlink swaps."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

import pytest

from containers import files
from containers.errors import StateError, WriteRefused
from containers.files import (MAX_DEPTH, FileRefused, TooDeep, atomic_write_bytes,
                              atomic_write_text, copy_hashing, create_replacing, first_link,
                              fsync_path, json_value, open_append_regular, read_json_object,
                              read_json_state, read_regular, resolves_outside, sha256_file,
                              temp_symlink, walk_nofollow)
from tests.fixtures.disks import PLANTED, Ways
from tests.inputs.test_recipes import bounded


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "record.json"
    atomic_write_text(path, "old\n")
    atomic_write_bytes(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["record.json"]


def test_sha256_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"a" * 3_000_000)
    assert sha256_file(path) == hashlib.sha256(b"a" * 3_000_000).hexdigest()


def test_fsync_path_takes_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    fsync_path(tmp_path / "f")
    fsync_path(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_path(tmp_path / "missing")


def test_copy_hashing_copies_hashes_and_sets_mode(tmp_path: Path) -> None:
    data = os.urandom(100_000)
    source, dest = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(data)
    chunks: list[int] = []
    old = os.umask(0)
    try:
        digest = copy_hashing(source, dest, mode=0o640, chunk=30_000,
                              after_chunk=lambda: chunks.append(1))
    finally:
        os.umask(old)
    assert digest == hashlib.sha256(data).hexdigest()
    assert dest.read_bytes() == data
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert len(chunks) == 4, "the hook runs after every chunk"


def test_copy_hashing_never_overwrites(tmp_path: Path) -> None:
    source, dest = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(b"new")
    dest.write_bytes(b"existing")
    with pytest.raises(FileExistsError):
        copy_hashing(source, dest)
    assert dest.read_bytes() == b"existing"


def test_a_temp_symlink_renamed_over_a_link_swaps_it_atomically(tmp_path: Path) -> None:
    link = tmp_path / "latest"
    os.replace(temp_symlink(link, "1.sif"), link)
    assert os.readlink(link) == "1.sif"
    os.replace(temp_symlink(link, "2.sif"), link)
    assert os.readlink(link) == "2.sif"
    stale = tmp_path / f".latest.{os.getpid()}.tmp"  # left by an earlier crash of this pid
    os.symlink("0.sif", stale)
    os.replace(temp_symlink(link, "3.sif"), link)
    assert os.readlink(link) == "3.sif"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]


def test_atomic_write_never_writes_through_a_link_planted_at_its_temp_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = tmp_path / "record.json"
    os.symlink(victim, tmp_path / f".record.json.{os.getpid()}.tmp")
    atomic_write_text(path, "new\n")
    assert victim.read_text() == "keep" and path.read_text() == "new\n"
    assert not path.is_symlink()


def test_read_regular_reads_only_bounded_regular_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert read_regular(tmp_path / "f", limit=5) == b"12345"
    with pytest.raises(FileRefused, match=r"^larger than 4 bytes \(5\)$"):
        read_regular(tmp_path / "f", limit=4)
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    for name, kind in (("fifo", "a FIFO"), ("zero", "a device"), (".", "a folder")):
        assert bounded(lambda: read_regular(tmp_path / name, limit=1 << 20)) == (
            "FileRefused", f"not a regular file ({kind})")
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", limit=1)


def test_read_json_object_is_none_for_anything_but_a_json_object(tmp_path: Path) -> None:
    (tmp_path / "ok.json").write_text('{"rank": 0}')
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "cut.json").write_text('{"rank": ')
    (tmp_path / "deep.json").write_text("[" * 100_000)
    os.mkfifo(tmp_path / "fifo.json")
    assert read_json_object(tmp_path / "ok.json") == {"rank": 0}
    for name in ("list", "cut", "deep", "fifo", "missing"):
        assert read_json_object(tmp_path / f"{name}.json") is None, name
    assert read_json_object(tmp_path / "ok.json", limit=4) is None  # larger than the limit


def test_a_state_file_missing_is_the_default_and_unusable_is_one_line_in_the_callers_words(
        tmp_path: Path) -> None:
    def read(path: Path) -> object:
        return read_json_state(path, limit=64, missing="none", unreadable="cannot read: {exc}",
                               invalid="not JSON ({detail}); fix it")

    path = tmp_path / "state.json"
    assert read(path) == "none"
    path.write_text("[1]")
    assert read(path) == [1]
    path.write_text("{")
    with pytest.raises(StateError, match=r"state.json: not JSON \(Expecting .*\); fix it\Z"):
        read(path)
    path.write_text("1" * 65)
    with pytest.raises(StateError, match=r"state.json: cannot read: larger than 64 bytes"):
        read(path)


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep under one key."""
    return '{"k": ' * depth + "1" + "}" * depth


def test_json_nested_past_reason_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    """900 levels parse, and then a copy, a dump or a model's check of them recurses past
    Python's limit (a catalogue entry made publish end in a RecursionError): every JSON read
    refuses them, as a state file's one line naming it."""
    assert json_value(nested(MAX_DEPTH)) and json_value(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    for text in (nested(MAX_DEPTH + 1), nested(900), "[" * 5000 + "]" * 5000, "[" * 100_000):
        with pytest.raises(TooDeep, match=f"nested deeper than {MAX_DEPTH} levels"):
            json_value(text)
    path = tmp_path / "state.json"
    path.write_text(nested(900))
    assert read_json_object(path) is None
    with pytest.raises(StateError, match=rf"state.json: not JSON \(nested deeper than "
                                         rf"{MAX_DEPTH} levels\)\Z"):
        read_json_state(path, limit=1 << 20, missing=None, unreadable="{exc}",
                        invalid="not JSON ({detail})")


def test_links_are_found_not_followed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "secret").write_text("x")
    base = tmp_path / "base"
    (base / "a").mkdir(parents=True)
    (base / "a" / "link").symlink_to(tmp_path / "out")
    (base / "a" / "file").write_text("x")
    assert first_link(base, base / "a" / "link" / "secret") == base / "a" / "link"
    assert first_link(base, base / "a" / "file") is None
    assert first_link(base, base / "a" / "missing" / "deeper") is None
    assert sorted(p.relative_to(base) for p in walk_nofollow(base)) == [
        Path("."), Path("a"), Path("a/file"), Path("a/link")]
    assert list(walk_nofollow(base / "a" / "link")) == [base / "a" / "link"]
    assert list(walk_nofollow(tmp_path / "missing")) == []
    assert resolves_outside(base / "a" / "file", base) is None
    assert resolves_outside(base / "a" / "link" / "secret", base) == tmp_path / "out" / "secret"
    assert resolves_outside(base / ".." / "out", base) == tmp_path / "out"


# --- what a write never goes through nor replaces (issue 42, item 1)

WRITERS = {"atomic": lambda path: atomic_write_text(path, "new\n", mode=0o755),
           "create": lambda path: create_replacing(path).close(),
           "append": lambda path: open_append_regular(path).close()}


@pytest.mark.parametrize("write", list(WRITERS))
def test_a_planted_destination_is_refused_in_one_line_and_left_alone(
        tmp_path: Path, factory_planted, write: str) -> None:
    planted = factory_planted(tmp_path)
    for kind, path in planted.paths.items():
        refusal = PLANTED[kind].replace("to replace", "to append to") if write == "append" \
            else PLANTED[kind]
        with pytest.raises(WriteRefused, match=f"^{path} {refusal}") as caught:
            WRITERS[write](path)
        assert "\n" not in str(caught.value)
    planted.untouched()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in planted.paths.values()), "no temp is left"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
@pytest.mark.parametrize("write", list(WRITERS))
def test_another_users_file_is_not_replaced(tmp_path: Path, write: str) -> None:
    path = tmp_path / "theirs"
    path.write_text("theirs\n")
    os.chown(path, 65534, 65534)
    doing = "append to" if write == "append" else "replace"
    with pytest.raises(WriteRefused, match=f"^{path} is a file that belongs to .*uid 65534.*, "
                                           f"not to you .*; refusing to {doing} it"):
        WRITERS[write](path)
    assert path.read_text() == "theirs\n" and path.stat().st_uid == 65534


def test_a_planted_file_is_refused_at_the_rename_too(tmp_path: Path, tmp_path_factory,
                                                     monkeypatch) -> None:
    """A link swapped in while the temp is written is refused when it is to be renamed over."""
    path = tmp_path / "out"
    victim = tmp_path_factory.mktemp("elsewhere") / "passwd"
    victim.write_text("root:x:0:0\n")
    real = files.write_temp

    def swap(*args, **kwargs) -> Path:
        temp = real(*args, **kwargs)
        path.symlink_to(victim)
        return temp

    monkeypatch.setattr(files, "write_temp", swap)
    with pytest.raises(WriteRefused, match="symbolic link"):
        atomic_write_text(path, "new\n")
    assert victim.read_text() == "root:x:0:0\n" and path.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_our_own_file_is_replaced_atomically_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("old\n")
    old_inode = path.stat().st_ino
    atomic_write_text(path, "new\n", mode=0o755)
    assert path.read_text() == "new\n" and path.stat().st_ino != old_inode
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    with create_replacing(tmp_path / "run.log") as log:
        log.write(b"line\n")
    assert (tmp_path / "run.log").read_bytes() == b"line\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sh", "run.log"]


# --- one write rule for the whole way (issue 48, part 2)

WAY_WRITERS = {**WRITERS, "copy": lambda path: copy_hashing(Path(__file__), path),
               "link": lambda path: temp_symlink(path, "1.sif")}


@pytest.mark.parametrize("write", list(WAY_WRITERS))
def test_no_write_goes_through_a_folder_someone_else_controls(tmp_path: Path,
                                                               write: str) -> None:
    """Another uid's link in a sticky world-writable folder (that user may re-point it at any
    time) and a folder anyone may write without the sticky bit: each writer refuses in one line
    naming the file and the link or folder, nothing is made; a link of root's in root's sticky
    folder, or another uid's in a folder only root may write (a site's /scratch), is followed."""
    ways = Ways(tmp_path)
    for folder, refusal in ways.refusals.items():
        path = folder / "deeper" / "j.sh"
        with pytest.raises(WriteRefused, match=f"^{path}: {refusal}.*; refusing to write there$"
                           ) as caught:
            WAY_WRITERS[write](path)
        assert "\n" not in str(caught.value)
    ways.untouched()
    for link in (ways.mine, ways.site):
        WAY_WRITERS[write](link / f"{link.name}.sh")
    assert {p.name for p in ways.elsewhere.iterdir()} >= (
        set() if write == "link" else {"mine.sh", "scratch.sh"})


def test_the_way_is_walked_as_the_kernel_walks_it(tmp_path: Path) -> None:
    """A link, or ``..`` after one, leads on from where the link points; a loop ends."""
    ways = Ways(tmp_path)
    (ways.elsewhere / "up").symlink_to("../sticky/theirs")
    assert re.fullmatch(f"{ways.site / 'up' / 'x'}: {ways.refusals[ways.link]}",
                        files.unsafe_way(ways.site / "up" / "x"))
    assert "open is world-writable without" in files.unsafe_way(ways.mine / ".." / "open" / "x")
    assert files.unsafe_way(ways.mine / "up" / ".." / "x") is not None
    (tmp_path / "loop").symlink_to("loop")
    assert files.unsafe_way(tmp_path / "loop" / "x").endswith("loop leads through more than 40 "
                                                             "links")
    assert files.unsafe_way(ways.mine / "missing" / "x") is None


def test_yours_alone_is_one_rule_for_files_folders_and_links(tmp_path: Path) -> None:
    """The cache, a signing keyring and the local cluster's record trust by one rule."""
    folder, record, link = tmp_path / "d", tmp_path / "d" / "r.json", tmp_path / "l"
    folder.mkdir(mode=0o700)
    record.write_text("{}")
    record.chmod(0o600)
    link.symlink_to(folder)

    def why(path: Path, uid: int | None = None) -> str | None:
        return files.not_yours_alone(path, os.lstat(path), uid=uid)

    assert why(folder) is None and why(record) is None
    assert why(link) == f"is a link (to {folder})"
    assert why(record, os.geteuid() + 1) == (f"is owned by uid {os.geteuid()}, not this user "
                                             f"({os.geteuid() + 1})")
    record.chmod(0o620)
    folder.chmod(0o707)
    assert why(record) == "is writable by its group or others (mode 620)"
    assert why(folder) == "is writable by its group or others (mode 707)"
