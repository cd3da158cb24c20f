"""recipes/scripts/venv-snapshot.py, the install script's environment snapshots, run here on
folders that stand in for a venv and a wheelhouse: what is offered, what is refused, what is
kept. The real thing (inside %post, and the images it makes compared file by file) is
tests/image/test_cache_image.py and benchmarks/build_cache.py."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "scripts" / "venv-snapshot.py"


@pytest.fixture(scope="module")
def snap():
    spec = importlib.util.spec_from_file_location("venv_snapshot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheelhouse(folder: Path, *names: str, content: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f"{name}{content}")
    return folder


def venv(folder: Path, *packages: str) -> Path:
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to("/usr/bin/python3")
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for package in packages:
        (folder / "lib" / package).mkdir(parents=True)
        (folder / "lib" / package / "__init__.py").write_text(f"# {package}\n")
    (folder / "bin" / "tool").write_text("#!/opt/venv/bin/python\n")
    (folder / "bin" / "tool").chmod(0o755)
    return folder


def kept_in(store: Path) -> list[Path]:
    """The complete snapshots in a store (temporary folders and the lock start with '.')."""
    return sorted(p for p in store.iterdir() if not p.name.startswith("."))


def test_a_snapshot_of_a_subset_is_restored_exactly(snap, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    first = wheelhouse(tmp_path / "w1", "torch.whl", "numpy.whl")
    installed = venv(tmp_path / "venv1", "torch", "numpy")
    assert snap.save(str(store), str(first), str(installed)) == 0
    later = wheelhouse(tmp_path / "w2", "torch.whl", "numpy.whl", "six.whl")
    target = tmp_path / "venv2"
    venv(target)  # the fresh venv the script made for pip download: replaced
    assert snap.restore(str(store), str(later), str(target)) == 0
    assert snap.manifest(str(target)) == snap.manifest(str(installed))
    assert os.readlink(target / "bin" / "python") == "/usr/bin/python3"
    assert (target / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    out = capsys.readouterr().out
    assert "installed from 2 of this build's 3 files" in out and "pip installs the other 1" in out


def test_a_changed_or_missing_file_is_not_a_subset(snap, tmp_path) -> None:
    store = tmp_path / "store"
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl", "numpy.whl")),
              str(venv(tmp_path / "venv1", "torch", "numpy")))
    target = venv(tmp_path / "venv2")
    before = snap.manifest(str(target))
    # the same names, other bytes (a rebuilt wheel, another version under one name)
    other = wheelhouse(tmp_path / "w2", "torch.whl", "numpy.whl", "six.whl", content="v2")
    assert snap.restore(str(store), str(other), str(target)) == snap.NONE
    # one of the snapshot's files is not in this resolution (a removal)
    fewer = wheelhouse(tmp_path / "w3", "torch.whl", "six.whl")
    assert snap.restore(str(store), str(fewer), str(target)) == snap.NONE
    assert snap.manifest(str(target)) == before  # left as it was: pip installs everything


def test_a_snapshot_that_fails_its_manifest_is_thrown_away(snap, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    files = wheelhouse(tmp_path / "w1", "torch.whl")
    snap.save(str(store), str(files), str(venv(tmp_path / "venv1", "torch")))
    [kept] = kept_in(store)
    init = kept / "venv" / "lib" / "torch" / "__init__.py"
    init.write_text(init.read_text().upper())  # same size, other bytes
    target = venv(tmp_path / "venv2")
    assert snap.restore(str(store), str(files), str(target)) == 1
    assert not target.exists() and not kept.exists()
    assert "does not match its manifest (2 entries differ, first: lib/torch/__init__.py)" \
        in capsys.readouterr().out


@pytest.mark.parametrize("change", ["extra", "missing", "mode"])
def test_an_extra_missing_or_rechmodded_file_fails_the_manifest(snap, tmp_path, change) -> None:
    store = tmp_path / "store"
    files = wheelhouse(tmp_path / "w1", "torch.whl")
    snap.save(str(store), str(files), str(venv(tmp_path / "venv1", "torch")))
    [kept] = kept_in(store)
    tool = kept / "venv" / "bin" / "tool"
    if change == "extra":
        (kept / "venv" / "lib" / "torch" / "evil.py").write_text("import os\n")
    elif change == "missing":
        tool.unlink()
    else:
        tool.chmod(0o4755)
    assert snap.restore(str(store), str(files), str(tmp_path / "venv2")) == 1
    assert not (tmp_path / "venv2").exists() and not kept.exists()


def test_the_largest_subset_is_restored(snap, tmp_path) -> None:
    store = tmp_path / "store"
    small = venv(tmp_path / "small", "torch")
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")), str(small))
    big = venv(tmp_path / "big", "torch", "a", "b", "c", "d")
    snap.save(str(store), str(wheelhouse(tmp_path / "w2", "torch.whl", "a.whl", "b.whl",
                                         "c.whl", "d.whl")), str(big))
    every = wheelhouse(tmp_path / "w3", "torch.whl", "a.whl", "b.whl", "c.whl", "d.whl",
                       "e.whl")
    target = tmp_path / "venv"
    assert snap.restore(str(store), str(every), str(target)) == 0
    assert snap.manifest(str(target)) == snap.manifest(str(big))


def test_what_is_kept_and_what_is_pruned(snap, tmp_path, capsys, monkeypatch) -> None:
    store = tmp_path / "store"
    one = wheelhouse(tmp_path / "w1", "torch.whl")
    snap.save(str(store), str(one), str(venv(tmp_path / "v1", "torch")))
    # covered but for fewer than NEW_AT files: adding them again is cheaper than a copy
    plus_few = wheelhouse(tmp_path / "w2", "torch.whl", "six.whl")
    snap.save(str(store), str(plus_few), str(venv(tmp_path / "v2", "torch", "six")))
    assert "not kept again: one kept covers all but 1 of these 2 files" in capsys.readouterr().out
    assert len(kept_in(store)) == 1
    # the same set again: kept already
    snap.save(str(store), str(one), str(venv(tmp_path / "v3", "torch")))
    assert "kept already" in capsys.readouterr().out
    # sets no kept one covers: kept, the least recently used beyond KEEP pruned
    for number in range(snap.KEEP + 1):
        other = wheelhouse(tmp_path / f"o{number}", f"other{number}.whl")
        snap.save(str(store), str(other), str(venv(tmp_path / f"ov{number}", "other")))
    assert len(kept_in(store)) == snap.KEEP
    assert snap.restore(str(store), str(one), str(tmp_path / "again")) == snap.NONE  # pruned
    # a killed build's temporary folder is never offered, and goes once stale
    stale = store / ".tmp-dead-1"
    (stale / "venv").mkdir(parents=True)
    os.utime(stale, (0, 0))
    snap.save(str(store), str(wheelhouse(tmp_path / "w9", "x.whl", "y.whl")),
              str(venv(tmp_path / "v9", "x")))
    assert not stale.exists()


def test_a_snapshot_that_cannot_be_written_is_not_kept_and_the_build_goes_on(
        snap, tmp_path, capsys, monkeypatch) -> None:
    """A full disk under the package cache (measured: a 7 GB CUDA venv's copy ran out of space)
    is the cache's problem, not the image's: nothing half-copied stays, the build goes on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cp").write_text("#!/bin/sh\necho \"cp: error copying 'x': No space left on "
                                "device\" >&2\necho more >&2\nexit 1\n")
    (bin_dir / "cp").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    store = tmp_path / "store"
    assert snap.save(str(store), str(wheelhouse(tmp_path / "w", "torch.whl")),
                     str(venv(tmp_path / "v", "torch"))) == 0
    assert snap.keep_fresh(str(store), str(venv(tmp_path / "f"))) == 0
    out = capsys.readouterr().out
    assert "not kept (cp: error copying 'x': No space left on device): this build goes on" in out
    assert "the fresh venv not kept (cp: error copying" in out
    assert sorted(p.name for p in store.iterdir()) == []  # no temporary folder left


def test_restore_without_a_store_says_so(snap, tmp_path, capsys) -> None:
    target = venv(tmp_path / "venv")
    files = wheelhouse(tmp_path / "w", "torch.whl")
    assert snap.restore(str(tmp_path / "none"), str(files), str(target)) == snap.NONE
    assert target.is_dir()
    assert "none yet for this base and definition" in capsys.readouterr().out


def restored_like(snap, installed: Path, store: Path, ahead: Path, wheels: Path) -> Path:
    """Restore, with the prefetch at ``ahead``, for a later resolution (torch and six) whose
    torch is ``installed``'s: the new venv holds what ``installed`` holds and the prefetch is
    gone, however it was used."""
    target = wheels.parent / f"venv-{wheels.name}"
    later = wheelhouse(wheels, "torch.whl", "six.whl")
    assert snap.restore(str(store), str(later), str(target), str(ahead)) == 0
    assert snap.manifest(str(target)) == snap.manifest(str(installed))
    assert not ahead.exists()
    return target


def test_a_prefetched_copy_is_renamed_into_place_when_the_resolution_picks_it(
        snap, tmp_path, capsys) -> None:
    store, ahead = tmp_path / "store", tmp_path / "ctx" / "prefetch"
    installed = venv(tmp_path / "venv1", "torch")
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")), str(installed))
    assert snap.prefetch(str(store), str(ahead)) == 0  # while pip downloads
    copy = ahead / "venv"
    inode = (copy / "pyvenv.cfg").stat().st_ino
    target = restored_like(snap, installed, store, ahead, tmp_path / "w2")
    assert (target / "pyvenv.cfg").stat().st_ino == inode  # renamed, not copied again
    assert "(copied and checked while pip downloaded)" in capsys.readouterr().out


def test_a_prefetch_of_another_snapshot_is_dropped(snap, tmp_path, capsys) -> None:
    store, ahead = tmp_path / "store", tmp_path / "prefetch"
    torch_only = venv(tmp_path / "t", "torch")
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")), str(torch_only))
    snap.save(str(store), str(wheelhouse(tmp_path / "w2", *(f"{p}.whl" for p in "abcde"))),
              str(venv(tmp_path / "abcde", *"abcde")))
    snap.prefetch(str(store), str(ahead))  # the most recently kept: abcde
    assert (ahead / "source").read_text() != ""
    restored_like(snap, torch_only, store, ahead, tmp_path / "w3")
    assert "(every file checked against its manifest)" in capsys.readouterr().out


def test_a_prefetch_that_finds_a_bad_snapshot_throws_it_away(snap, tmp_path, capsys) -> None:
    store, ahead = tmp_path / "store", tmp_path / "prefetch"
    files = wheelhouse(tmp_path / "w1", "torch.whl")
    snap.save(str(store), str(files), str(venv(tmp_path / "v1", "torch")))
    [kept] = kept_in(store)
    (kept / "venv" / "pyvenv.cfg").write_text("home = /elsewhere\n")
    snap.prefetch(str(store), str(ahead))
    assert not (ahead / "venv").exists() and "manifest" in (ahead / "problem").read_text()
    target = tmp_path / "venv"
    assert snap.restore(str(store), str(files), str(target), str(ahead)) == 1
    assert not target.exists() and not kept.exists() and not ahead.exists()
    assert "does not match its manifest (2 entries differ, first: pyvenv.cfg): thrown away" \
        in capsys.readouterr().out


def test_prefetch_without_snapshots_leaves_nothing(snap, tmp_path) -> None:
    assert snap.prefetch(str(tmp_path / "none"), str(tmp_path / "prefetch")) == 0
    assert not (tmp_path / "prefetch").exists()
    assert snap.main(["venv-snapshot.py", "prefetch", str(tmp_path / "none"),
                      str(tmp_path / "p")]) == 0
    with pytest.raises(SystemExit, match="usage"):
        snap.main(["venv-snapshot.py", "restore", "x"])


def test_a_prefetch_no_snapshot_fits_is_removed_too(snap, tmp_path) -> None:
    store, ahead = tmp_path / "store", tmp_path / "prefetch"
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")),
              str(venv(tmp_path / "v1", "torch")))
    snap.prefetch(str(store), str(ahead))
    assert (ahead / "venv").is_dir()
    other = wheelhouse(tmp_path / "w2", "numpy.whl")  # torch removed: no snapshot fits
    assert snap.restore(str(store), str(other), str(tmp_path / "venv"), str(ahead)) == snap.NONE
    assert not ahead.exists()


def test_a_linked_prefetch_shares_the_cache_files_and_is_renamed_into_place(
        snap, tmp_path, capsys) -> None:
    """%setup's prefetch (on the host, where the root and the cache are plain folders) links
    instead of copying: no byte is written, and the restored venv's files are the cache's."""
    store, ahead = tmp_path / "store", tmp_path / "root" / "opt" / "venv.prefetch"
    installed = venv(tmp_path / "venv1", "torch")
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")), str(installed))
    [kept] = kept_in(store)
    assert snap.prefetch(str(store), str(ahead), "link") == 0
    target = tmp_path / "root" / "opt" / "venv"
    later = wheelhouse(tmp_path / "w2", "torch.whl", "six.whl")
    assert snap.restore(str(store), str(later), str(target), str(ahead)) == 0
    cached = kept / "venv" / "lib" / "torch" / "__init__.py"
    assert (target / "lib" / "torch" / "__init__.py").stat().st_ino == cached.stat().st_ino
    assert snap.manifest(str(target)) == snap.manifest(str(installed))
    assert "(linked ahead of %post and checked)" in capsys.readouterr().out


def test_where_links_cannot_go_nothing_is_prefetched(snap, tmp_path, capsys,
                                                     monkeypatch) -> None:
    store, ahead = tmp_path / "store", tmp_path / "root" / "venv.prefetch"
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")),
              str(venv(tmp_path / "v1", "torch")))
    capsys.readouterr()

    def cross_device(source, dest):
        raise OSError(18, "Invalid cross-device link")
    monkeypatch.setattr(snap.os, "link", cross_device)
    assert snap.prefetch(str(store), str(ahead), "link") == 0
    assert not ahead.exists()  # %post copies it while pip downloads instead
    assert "not linked ahead (Invalid cross-device link): copied in %post instead" \
        in capsys.readouterr().out


def _linked_ahead(snap, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, ahead, the kept snapshot) after %setup's prefetch linked the one snapshot."""
    store, ahead = tmp_path / "store", tmp_path / "root" / "opt" / "venv.prefetch"
    snap.save(str(store), str(wheelhouse(tmp_path / "w1", "torch.whl")),
              str(venv(tmp_path / "v1", "torch")))
    [kept] = kept_in(store)
    assert snap.prefetch(str(store), str(ahead), "link") == 0
    return store, ahead, kept


def test_links_are_checked_in_post_not_while_linking(snap, tmp_path, capsys) -> None:
    """%setup only links (the venv and its manifest); %post's check, run while the venv is made
    and pip downloads, says whether it may be used."""
    store, ahead, kept = _linked_ahead(snap, tmp_path)
    assert not (ahead / "problem").exists()  # not checked yet
    assert (ahead / snap.MANIFEST).stat().st_ino == (kept / snap.MANIFEST).stat().st_ino
    assert snap.main(["venv-snapshot.py", "check", str(ahead)]) == 0
    assert (ahead / "problem").read_text() == ""
    target = tmp_path / "root" / "opt" / "venv"
    later = wheelhouse(tmp_path / "w2", "torch.whl", "six.whl")
    assert snap.restore(str(store), str(later), str(target), str(ahead)) == 0
    assert "(linked ahead of %post and checked)" in capsys.readouterr().out


@pytest.mark.parametrize("checked_in_post", [True, False])
def test_a_linked_snapshot_changed_in_the_cache_is_refused(snap, tmp_path, capsys,
                                                           checked_in_post) -> None:
    """A snapshot file changed in place (the links share it) fails the check, whether %post's
    check ran or the restore has to run it itself."""
    store, ahead, kept = _linked_ahead(snap, tmp_path)
    with open(kept / "venv" / "lib" / "torch" / "__init__.py", "a") as handle:
        handle.write("# changed\n")
    if checked_in_post:
        snap.check(str(ahead))
        assert "manifest" in (ahead / "problem").read_text()
        assert not (ahead / "venv").exists()
    target = tmp_path / "root" / "opt" / "venv"
    later = wheelhouse(tmp_path / "w2", "torch.whl", "six.whl")
    assert snap.restore(str(store), str(later), str(target), str(ahead)) == 1
    assert not target.exists() and not kept.exists() and not ahead.exists()
    assert "does not match its manifest (2 entries differ, first: lib/torch/__init__.py): " \
           "thrown away" in capsys.readouterr().out


def test_the_fresh_venv_is_kept_once_linked_ahead_and_never_offered_as_a_snapshot(
        snap, tmp_path, capsys) -> None:
    """What ``python3 -m venv`` made is kept once per store; %setup links it beside the venv
    (its files are the cache's) and %post checks it before pip starts from it."""
    store, ahead = tmp_path / "store", tmp_path / "root" / "opt" / "venv.prefetch"
    made = venv(tmp_path / "made")
    assert snap.main(["venv-snapshot.py", "keep-fresh", str(store), str(made)]) == 0
    assert "the fresh venv kept for later builds" in capsys.readouterr().out
    other = venv(tmp_path / "other", "torch")
    assert snap.keep_fresh(str(store), str(other)) == 0  # one is kept: not replaced
    assert snap.manifest(str(store / "fresh" / "venv")) == snap.manifest(str(made))
    assert snap.snapshots(str(store)) == []  # no wheels.txt: nothing to restore
    assert snap.prefetch(str(store), str(ahead), "link") == 0
    fresh = ahead / "fresh"
    assert not (ahead / "source").exists()  # no snapshot to bring
    pyvenv = fresh / "venv" / "pyvenv.cfg"
    assert pyvenv.stat().st_ino == (store / "fresh" / "venv" / "pyvenv.cfg").stat().st_ino
    snap.check(str(fresh))
    assert (fresh / "problem").read_text() == ""


def test_a_fresh_venv_changed_in_the_cache_fails_its_check_and_is_replaced(
        snap, tmp_path) -> None:
    store, ahead = tmp_path / "store", tmp_path / "root" / "opt" / "venv.prefetch"
    snap.keep_fresh(str(store), str(venv(tmp_path / "made")))
    (store / "fresh" / "venv" / "bin" / "tool").write_text("#!/bin/sh\necho changed\n")
    snap.prefetch(str(store), str(ahead), "link")
    snap.check(str(ahead / "fresh"))
    assert "does not match its manifest" in (ahead / "fresh" / "problem").read_text()
    assert not (ahead / "fresh" / "venv").exists()
    again = venv(tmp_path / "again")
    assert snap.main(["venv-snapshot.py", "keep-fresh", str(store), str(again),
                      "replace"]) == 0
    assert snap.manifest(str(store / "fresh" / "venv")) == snap.manifest(str(again))
