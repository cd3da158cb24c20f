"""Two runs started in the same second never share a results folder or a job script."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from containers.app.project import Project
from containers.app.workloads import prove
from containers.app import workloads
from containers.inputs.settings import load_settings
from containers.prove.smoke import SmokeOptions
from containers.errors import WriteRefused
from containers.unique import claim_file, claim_folder
from tests.fixtures.disks import Ways


def test_claim_folder_gives_each_caller_its_own(tmp_path: Path) -> None:
    names: list[str] = []
    threads = [threading.Thread(target=lambda: names.append(claim_folder(tmp_path / "smoke",
                                                                         "cpu-20261125-020000")))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(names) == sorted(["cpu-20261125-020000",
                                    *(f"cpu-20261125-020000-{n}" for n in range(2, 9))])
    assert all((tmp_path / "smoke" / name).is_dir() for name in names)


def test_claim_file_never_hands_out_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "job-1.sh").write_text("someone else's script")
    first = claim_file(tmp_path, "job-1", ".sh")
    second = claim_file(tmp_path, "job-1", ".sh")
    assert (first.name, second.name) == ("job-1-2.sh", "job-1-3.sh")
    assert (tmp_path / "job-1.sh").read_text() == "someone else's script"


def test_nothing_is_claimed_on_a_way_someone_else_controls(tmp_path: Path) -> None:
    """A results folder reached through another user's link in a sticky world-writable folder,
    or in a folder anyone may write: refused in one line, nothing made; a site's link is
    followed."""
    ways = Ways(tmp_path)
    for folder, refusal in ways.refusals.items():
        for claim in (lambda: claim_folder(folder / "smoke", "cpu-1"),
                      lambda: claim_file(folder / "jobs", "job-1", ".sh")):
            with pytest.raises(WriteRefused, match=f": {refusal}"):
                claim()
    ways.untouched()
    assert claim_folder(ways.site / "smoke", "cpu-1") == "cpu-1"
    assert (ways.elsewhere / "smoke" / "cpu-1").is_dir()


def test_two_smoke_runs_in_the_same_second_get_two_folders(tmp_path, monkeypatch) -> None:
    """The stamp is the same second for both runs; their folders (and so rank files, run.log
    and verdict.json) must still differ, and each must exist before its run starts."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cpu.sif").write_bytes(b"")  # the run is stopped before it is read
    settings = load_settings(root, {"results_dir": str(tmp_path / "results"),
                                    "images_dir": str(tmp_path / "images"),
                                    "perflog_dir": str(tmp_path / "perflog")})
    project = Project(root=root, settings=settings)
    seen: list[Path] = []

    def ran(kind, workload, *, say, partition):
        assert workload.out_dir.is_dir()  # claimed before the run starts
        assert str(workload.out_dir) in " ".join(workload.argv)  # and bound in under that name
        seen.append(workload.out_dir)
        raise _Stop

    monkeypatch.setattr(workloads, "run_stamp", lambda: "20261125-020000")
    monkeypatch.setattr(workloads.verdict, "run", ran)
    monkeypatch.setattr(workloads, "guard_run", lambda *a, **k: None)
    for _ in range(2):
        with pytest.raises(_Stop):
            prove(project, target="cpu", say=lambda line: None,
                  options=SmokeOptions(gpus=1, sizes="1K:2K", iters=1, timeout=60))
    assert [p.name for p in seen] == ["cpu-20261125-020000", "cpu-20261125-020000-2"]


class _Stop(Exception):
    """Ends the run where the real one would start the image."""
