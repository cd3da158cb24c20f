"""A real Slurm smoke job of several collectives (``invoke job --workload smoke --op``): the ops
reach the script and ``job.json``, and the job's own ``invoke verdict`` judges each of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.prove.registry import kind_of
from containers.prove.smoke import SmokeOptions
from tests.batch.test_slurm_jobs import _submit, slurm_project  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.apptainer, pytest.mark.distributed]


def test_smoke_job_of_several_ops_is_judged_per_op(slurm_project, slurm_cluster) -> None:
    ops = ["all_gather", "sendrecv"]
    submitted, output = _submit(slurm_project, slurm_cluster, kind=kind_of("smoke"), nodes=1,
                                gpus_per_node=2,
                                options=SmokeOptions(gpus=2, sizes="4K,16K", iters=2, warmup=1,
                                                     timeout=120.0, op=",".join(ops)))
    assert "--op all_gather,sendrecv" in submitted.job.text
    results = Path(submitted.job.results_of(submitted.job_id))
    assert json.loads((results / "job.json").read_text())["options"]["op"] == ",".join(ops)
    report = json.loads((results / "allreduce.json").read_text())
    assert report["ops"] == ops and report["ok"] is True
    assert [r["op"] for r in report["results"]] == ["all_gather"] * 2 + ["sendrecv"] * 2
    verdict = json.loads((results / "verdict.json").read_text())
    assert verdict["passed"] and verdict["ops"] == ops, output[-3000:]
    assert [entry["passed"] for entry in verdict["collectives"].values()] == [True, True]
    assert "  all_gather:      PASS (0 wrong, busbw factor (n-1)/n" in output
    logged = [json.loads(line) for path in slurm_project.settings.perflog_dir.rglob("*.jsonl")
              for line in path.read_text().splitlines() if line.strip()]
    assert [line["op"] for line in logged if line["out_dir"] == str(results)] == ops
