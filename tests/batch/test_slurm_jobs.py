"""Batch jobs run for real: the ``local-slurm`` scripts submitted to a two-node Slurm cluster.

Both Slurm "nodes" are this machine (``tests/fixtures/slurm.py``), so the runs cannot tell the
nodes apart by host name; what proves that both nodes' torchruns joined is the world size (2
nodes x N ranks with ``--nproc-per-node=N``) and each local rank appearing once per node. The
results folder is shared by construction here, as the project folder is on a cluster's shared
file system.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from containers.app.jobs import JobSubmission, job
from containers.app.project import Project
from containers.batch.request import JobRequest
from containers.prove.registry import kind_of
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from tests.fixtures import ROOT
from tests.fixtures.slurm import wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.apptainer, pytest.mark.distributed]
SMALL_SMOKE = dict(sizes="1K:64K", iters=5, warmup=2, timeout=120.0)


@pytest.fixture
def slurm_project(slurm_cluster, cpu_image, tmp_path, monkeypatch) -> Project:
    """The real project (its image), results in a temp folder, Slurm clients aimed at the test
    cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return Project.load(ROOT, {"results_dir": str(tmp_path / "results"),
                               "perflog_dir": str(tmp_path / "results" / "perflog")})


def _submit(project: Project, slurm_cluster, **kwargs) -> tuple[JobSubmission, str]:
    lines: list[str] = []
    submitted = job(project, JobRequest(**kwargs), target="cpu", site="local-slurm",
                    submit=True, say=lines.append)
    assert submitted.job_id and any(f"submitted job {submitted.job_id}: output" in line
                                    for line in lines), lines
    info = wait_job(slurm_cluster, submitted.job_id)
    output = Path(submitted.job.output_of(submitted.job_id))
    text = output.read_text() if output.is_file() else "(no output file)"
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", text[-4000:]
    return submitted, text


def _ranks(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("rank-*.json"))]


def test_two_node_smoke_job(slurm_project, slurm_cluster) -> None:
    submitted, output = _submit(slurm_project, slurm_cluster, kind=kind_of("smoke"), nodes=2,
                                gpus_per_node=2, options=SmokeOptions(gpus=2, **SMALL_SMOKE))
    assert f"rendezvous: {slurm_cluster.node_addr}:" in output  # the first node's NodeAddr
    results = Path(submitted.job.results_of(submitted.job_id))
    report = json.loads((results / "allreduce.json").read_text())
    assert report["world_size"] == 4 and report["finished"]
    assert sum(r["oop"]["wrong"] + r["ip"]["wrong"] for r in report["results"]) == 0
    ranks = _ranks(results)
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3] and all(r["finished"] for r in ranks)
    # Two torchrun agents (one per node), each with local ranks 0 and 1.
    assert Counter(r["local_rank"] for r in ranks) == {0: 2, 1: 2}
    # The job judged itself on the node (invoke verdict), as an interactive run does, in the
    # folders the script was written for: its verdict and the perflog line are this project's.
    verdict = json.loads((results / "verdict.json").read_text())
    assert verdict["passed"] and verdict["ranks"] == 4 and verdict["nodes"] == 2, output[-3000:]
    assert "verdict: PASS" in output
    logged = [json.loads(line) for path in slurm_project.settings.perflog_dir.rglob("*.jsonl")
              for line in path.read_text().splitlines() if line.strip()]
    assert any(str(results) in json.dumps(record) for record in logged), logged


def test_two_node_smoke_job_one_task_per_rank(slurm_project, slurm_cluster) -> None:
    """The srun-per-gpu pattern: no torchrun; rank and local rank from Slurm inside."""
    submitted, output = _submit(slurm_project, slurm_cluster, kind=kind_of("smoke"), nodes=2,
                                gpus_per_node=2, launcher="srun-per-gpu",
                                options=SmokeOptions(gpus=2, **SMALL_SMOKE))
    report = json.loads((Path(submitted.job.results_of(submitted.job_id))
                         / "allreduce.json").read_text())
    assert report["world_size"] == 4 and report["finished"]
    ranks = _ranks(Path(submitted.job.results_of(submitted.job_id)))
    assert Counter(r["local_rank"] for r in ranks) == {0: 2, 1: 2}


def test_two_node_ddp_training_job(slurm_project, slurm_cluster) -> None:
    submitted, output = _submit(
        slurm_project, slurm_cluster, kind=kind_of("ddp"), nodes=2, gpus_per_node=1,
        options=TrainOptions(example="ddp", gpus=1, model="cnn", model_size="tiny", epochs=2,
                             samples=1024, batch_size=32))
    report = json.loads((Path(submitted.job.results_of(submitted.job_id))
                         / "train.json").read_text())
    assert report["world_size"] == 2 and report["finished"], output[-3000:]
    assert report["loss_last"] < report["loss_first"]
    assert report["params_consistent"] is True
    verdict = json.loads((Path(submitted.job.results_of(submitted.job_id))
                          / "verdict.json").read_text())
    assert verdict["passed"] and verdict["ranks"] == 2, output[-3000:]


def test_build_job_runs_invoke_build_on_a_compute_node(slurm_project, slurm_cluster) -> None:
    # cpu_image made the image current, so the job's build is the no-op it must be here.
    _, output = _submit(slurm_project, slurm_cluster, kind=kind_of("build"))
    assert "building cpu on " in output
    assert "cpu is up to date: nothing to build" in output


def test_smoke_across_the_nodes_of_an_allocation(slurm_project, slurm_cluster, tmp_path) -> None:
    """``invoke smoke --nodes 2`` inside ``salloc``: srun, one torchrun per node, verdict."""
    results = tmp_path / "results"
    env = {"INVOKE_CONTAINERS_RESULTS_DIR": str(results),
           "INVOKE_CONTAINERS_PERFLOG_DIR": str(results / "perflog")}
    run = slurm_cluster.run(
        ["salloc", "--nodes=2", "--ntasks-per-node=1", str(ROOT / ".venv/bin/invoke"),
         "smoke", "--target", "cpu", "--nodes", "2", "--gpus", "2", "--sizes", "1K:64K",
         "--iters", "5", "--warmup", "2", "--timeout", "120"],
        timeout=180, check=False, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "run  srun --nodes=2 --ntasks-per-node=1" in run.stdout
    assert f"--rdzv-endpoint={slurm_cluster.node_addr}:" in run.stdout
    verdict = json.loads(next(results.glob("smoke/cpu-*/verdict.json")).read_text())
    assert verdict["passed"] and verdict["ranks"] == 4 and verdict["nodes"] == 2
    # More nodes than the allocation holds: one clear line, nothing launched.
    refused = slurm_cluster.run(
        ["salloc", "--nodes=1", str(ROOT / ".venv/bin/invoke"), "smoke", "--target", "cpu",
         "--nodes", "2"], timeout=60, check=False, env=env)
    assert refused.returncode == 1
    assert "error: --nodes 2 is more than this allocation has" in refused.stderr


def test_training_across_the_nodes_of_an_allocation(slurm_project, slurm_cluster,
                                                    tmp_path) -> None:
    results = tmp_path / "results"
    run = slurm_cluster.run(
        ["salloc", "--nodes=2", "--ntasks-per-node=1", str(ROOT / ".venv/bin/invoke"),
         "train", "--target", "cpu", "--nodes", "2", "--gpus", "1", "--model", "cnn",
         "--model-size", "tiny", "--epochs", "2", "--samples", "1024", "--batch-size", "32",
         "--timeout", "150"],
        timeout=200, check=False, env={"INVOKE_CONTAINERS_RESULTS_DIR": str(results)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "verdict: PASS" in run.stdout
    report = json.loads(next(results.glob("train-ddp/cpu-*/train.json")).read_text())
    assert report["world_size"] == 2 and report["loss_last"] < report["loss_first"]

