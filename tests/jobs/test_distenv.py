"""jobs/distenv.py: where a rank sits in the job under every launcher, and the atomic writer."""

from __future__ import annotations

import json

import pytest

from tests.jobs.scripts import sibling

torch = pytest.importorskip("torch")
distenv = sibling("distenv")


def test_write_json_is_atomic(tmp_path):
    target = tmp_path / "sub" / "x.json"
    distenv.write_json(target, {"a": 1})
    distenv.write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_resolve_dist_env():
    DistEnv = distenv.DistEnv
    assert distenv.resolve_dist_env({}) == DistEnv(0, 1, 0, "single")
    assert distenv.resolve_dist_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == \
        DistEnv(3, 8, 1, "torchrun")
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}
    assert distenv.resolve_dist_env(slurm) == DistEnv(5, 8, 1, "slurm")
    # srun starting torchrun: torchrun's view wins
    assert distenv.resolve_dist_env({**slurm, "RANK": "2", "WORLD_SIZE": "4",
                                     "LOCAL_RANK": "0"}) == DistEnv(2, 4, 0, "torchrun")


def test_auto_backend_on_cpu_host():
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert distenv.choose_backend("auto") == "gloo"
    with pytest.raises(RuntimeError):
        distenv.choose_backend("nccl")
