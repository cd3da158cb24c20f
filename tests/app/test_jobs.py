"""``invoke job``: print, write or submit a site's batch job; what each workload kind needs
before a script is written (its image, of the nodes' architecture) and who judges it."""

from __future__ import annotations

import pytest

from containers.app.jobs import job
from containers.batch.request import JobRequest
from containers.errors import ImageMissing, UsageError, WriteRefused, describe
from containers.prove.registry import kind_of
from tests.fixtures.disks import PLANTED, Ways


def test_the_script_is_printed_and_its_output_folder_made(data_project) -> None:
    lines: list[str] = []
    done = job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
               say=lines.append)
    assert done.script is None and done.job_id is None
    assert lines[0].startswith("#!/bin/bash") and "#SBATCH" in lines[0]
    assert done.job.output_folder.is_dir()


def test_out_writes_an_executable_script_and_refuses_a_folder(data_project, tmp_path) -> None:
    with pytest.raises(UsageError, match="is a folder; name the script file to write"):
        job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu",
            site="local-slurm", out=tmp_path)
    lines: list[str] = []
    done = job(data_project, JobRequest(kind=kind_of("ddp")), target="cpu", site="local-slurm",
               out=tmp_path / "job.sh", say=lines.append)
    assert done.script == tmp_path / "job.sh" and done.script.stat().st_mode & 0o111
    assert "train.py --example ddp" in done.script.read_text()
    assert lines[-1].startswith("wrote ") and lines[-1].endswith("(sbatch it to run)")


def test_out_never_writes_through_a_link_nor_into_a_device(data_project, tmp_path,
                                                          factory_planted) -> None:
    """``ln -s /etc/passwd j.sh; invoke job --out j.sh`` replaced the system file, and ``--out``
    a FIFO or ``/dev/null`` made the device a 0755 file: each is refused in one line."""
    planted = factory_planted(tmp_path)
    for kind, path in planted.paths.items():
        with pytest.raises(WriteRefused, match=f"^{path} {PLANTED[kind]}") as caught:
            job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu",
                site="local-slurm", out=path)
        assert describe(caught.value)[0].count("\n") == 0
    planted.untouched()


def test_out_never_goes_through_a_folder_someone_else_controls(data_project, tmp_path) -> None:
    """``--out DIR/lnk/j.sh``, where ``lnk`` is another user's link in a sticky world-writable
    folder, or ``--out DIR/j.sh`` in a folder anyone may write: refused in one line naming the
    link or folder, before anything is made; a site's own link is followed."""
    ways = Ways(tmp_path)
    for folder, refusal in ways.refusals.items():
        with pytest.raises(WriteRefused, match=f"^{folder / 'j.sh'}: {refusal}") as caught:
            job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
                out=folder / "j.sh")
        assert describe(caught.value)[0].count("\n") == 0
    ways.untouched()
    done = job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
               out=ways.site / "j.sh", say=lambda line: None)
    assert (ways.elsewhere / "j.sh").is_file() and done.script == ways.site / "j.sh"


def test_a_submission_needs_the_image_unless_it_builds_it(data_project) -> None:
    """Refused before any script exists; a build job makes the image, so it is not asked."""
    with pytest.raises(ImageMissing, match="--workload build --submit"):
        job(data_project, JobRequest(kind=kind_of("smoke")), target="cpu",
            site="local-slurm", submit=True)
    assert not list((data_project.settings.results_dir / "jobs").glob("*.sh"))
