"""``invoke smoke`` / ``invoke train``: the dry run shows each kind's exact command and runs
nothing, a run this machine cannot hold is refused (``--force`` warns), a missing image is
refused before a results folder is claimed, and the perflog history answers when empty."""

from __future__ import annotations


import pytest

from containers.app import workloads
from containers.errors import ImageMissing, UsageError
from containers.host.facts import Machine
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions


def test_a_dry_run_shows_each_kinds_command(data_project) -> None:
    lines: list[str] = []
    planned = workloads.prove(data_project, target="cpu", options=SmokeOptions(gpus=2),
                              dry_run=True, say=lines.append)
    assert lines[0].startswith("# smoke: cpu on site local, 2 ranks, results in ")
    assert "/opt/containers/jobs/allreduce.py" in lines[-1] and planned.ranks == 2
    runs = workloads.train(data_project, target="cpu", scaling=[1, 2], dry_run=True,
                           options=TrainOptions(example="fsdp", gpus=2), say=lines.append)
    assert [run.ranks for run in runs] == [1, 2]
    (one,) = workloads.train(data_project, target="cpu", dry_run=True, say=lines.append,
                             options=TrainOptions(example="ddp", gpus=2))
    assert one.ranks == 2
    assert not data_project.settings.results_dir.exists()


def test_a_run_this_machine_cannot_hold_is_refused(data_project) -> None:
    workload = workloads.prove(data_project, target="cpu", options=SmokeOptions(gpus=8),
                               dry_run=True, say=lambda _: None)
    site = data_project.sites["local"]
    small = lambda with_gpu_memory: Machine(cores=1, memory=1 << 40, gpus=0)  # noqa: E731
    with pytest.raises(UsageError, match=r"^--gpus 8: 8 CPU ranks on 1 core .*--force runs"):
        workloads.check_fits(workload, SmokeOptions(gpus=8), site, machine=small, force=False,
                             say=print)
    lines: list[str] = []
    workloads.check_fits(workload, SmokeOptions(gpus=8), site, machine=small, force=True,
                         say=lines.append)
    assert lines[0].startswith("  warning: --gpus 8: ")
    assert lines[0].endswith("(running anyway: --force)")


def test_a_missing_image_is_refused_before_a_folder_is_claimed(data_project) -> None:
    with pytest.raises(ImageMissing):
        workloads.prove(data_project, target="cpu", options=SmokeOptions(gpus=1),
                        say=lambda _: None)
    assert not (data_project.settings.results_dir / "smoke").exists()


def test_an_empty_history_is_an_answer(data_project) -> None:
    lines: list[str] = []
    assert workloads.smoke_history(data_project, target="cpu", say=lines.append) == []
    assert lines == [f"no smoke runs recorded yet in "
                     f"{workloads.os.path.relpath(data_project.settings.perflog_dir)} for "
                     "target cpu; each invoke smoke adds one"]
