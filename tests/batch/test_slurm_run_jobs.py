"""``invoke job --workload run -- CMD --submit --wait`` on the real two-node Slurm cluster: a
user's own torch.distributed script through the site's launch path, followed to its verdict,
judged by the image's own Python with no package index reachable from the job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from containers.app.following import jobs_report
from containers.app.jobs import job
from containers.app.project import Project
from containers.batch import follow
from containers.batch.request import JobRequest
from containers.prove.registry import kind_of
from containers.prove.train import TrainOptions
from tests.fixtures import ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.apptainer, pytest.mark.distributed]

OWN = """\
import json, sys, torch, torch.distributed as dist
dist.init_process_group()
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
if dist.get_rank() == 0:
    print("own-args " + json.dumps(sys.argv[1:]), flush=True)
print(f"own: rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
"""
HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `id`\nsecond line; exit 9"


@pytest.fixture
def run_project(slurm_cluster, cpu_image, tmp_path, monkeypatch) -> Project:
    """The real project and image, results in a temp folder, Slurm clients aimed at the test
    cluster, and every package index setting pointed at nothing (the job inherits them)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setattr(follow, "POLL_SECONDS", 0.5)
    for name, value in (("PIP_INDEX_URL", "http://127.0.0.1:9/nothing"),
                        ("PIP_EXTRA_INDEX_URL", ""), ("PIP_FIND_LINKS", str(tmp_path / "none")),
                        ("PIP_NO_INDEX", "1"), ("PIP_CONFIG_FILE", "/dev/null")):
        monkeypatch.setenv(name, value)
    work = tmp_path / "work"
    work.mkdir()
    (work / "own.py").write_text(OWN)
    monkeypatch.chdir(work)
    return Project.load(ROOT, {"results_dir": str(tmp_path / "results"),
                               "perflog_dir": str(tmp_path / "results" / "perflog")})


def test_own_script_on_two_nodes_followed_to_its_verdict(run_project) -> None:
    lines: list[str] = []
    request = JobRequest(kind=kind_of("run"), nodes=2, gpus_per_node=2,
                         command=("python", "own.py", HOSTILE), workdir=str(Path.cwd()))
    submitted = job(run_project, request, target="cpu", site="local-slurm", submit=True,
                    wait=True, say=lines.append)
    assert any(line.startswith(f"job {submitted.job_id}: COMPLETED") for line in lines), lines
    assert "verdict: PASS (exit 0)" in lines
    results = Path(submitted.job.results_of(submitted.job_id))
    verdict = json.loads((results / "verdict.json").read_text())
    assert verdict["passed"] and verdict["exit_status"] == 0 and verdict["ranks"] == 4
    assert verdict["stack"]["torch"] == "2.13.0+cpu"  # judged by the image's own Python
    log = (results / "run.log").read_text()
    # ranks on one host print at once: their lines may run together, so read them as a pattern
    assert sorted(re.findall(r"own: rank (\d) of 4 sum 10", log)) == ["0", "1", "2", "3"]
    (args,) = [json.loads(found) for found in re.findall(r'own-args (\[".*?"\])', log)]
    assert args == [HOSTILE]  # quotes, $(), backticks and the newline arrived intact
    assert not Path("/tmp/pwned").exists()
    (entry,) = follow.read_index(run_project.settings.results_dir / "jobs")
    assert entry["job_id"] == submitted.job_id and entry["workload"] == "run"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", entry["scheduler_submitted"])
    listed = jobs_report(run_project, as_json=True, say=lambda text: None)
    assert [(r["job_id"], r["verdict"]) for r in listed] == [(submitted.job_id, "PASS")]


def test_a_deepspeed_job_runs_the_zero_stage_it_was_given(run_project) -> None:
    lines: list[str] = []
    request = JobRequest(kind=kind_of("deepspeed"), nodes=1, gpus_per_node=2,
                         options=TrainOptions(example="deepspeed", gpus=2, zero_stage=2,
                                              model="cnn", model_size="tiny", epochs=1,
                                              samples=256))
    submitted = job(run_project, request, target="cpu", site="local-slurm", submit=True,
                    wait=True, say=lines.append)
    results = Path(submitted.job.results_of(submitted.job_id))
    record = json.loads((results / "job.json").read_text())
    assert record["options"]["zero_stage"] == 2
    report = json.loads((results / "train.json").read_text())
    assert report["zero_stage"] == 2, report
    assert "verdict: PASS (exit 0)" in lines


def test_own_script_across_the_nodes_of_an_allocation(run_project, slurm_cluster,
                                                      tmp_path) -> None:
    """``invoke run --nodes 2`` inside ``salloc``: srun starts one torchrun per node (the
    launcher registry smoke uses), and the user's own script sees every rank of both nodes."""
    results = tmp_path / "alloc-results"
    run = slurm_cluster.run(
        ["salloc", "--nodes=2", "--ntasks-per-node=1", str(ROOT / ".venv/bin/invoke"),
         "--search-root", str(ROOT), "run", "--target", "cpu", "--nodes", "2", "--gpus", "1",
         "--timeout", "120", "--", "python", "own.py"],
        timeout=180, check=False, env={"INVOKE_CONTAINERS_RESULTS_DIR": str(results)})
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "srun --nodes=2 --ntasks-per-node=1" in out, out[-3000:]
    assert "own: rank 0 of 2 sum 3" in out and "own: rank 1 of 2 sum 3" in out, out[-3000:]
    assert len(list(results.glob("run/cpu-*/run.log"))) == 1
