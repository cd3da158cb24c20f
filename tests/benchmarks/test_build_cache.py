"""benchmarks/build_cache.py, CI-sized: the ``cpu`` recipe with a one-package env spec (+1) on the
session's debian-base (linked, not rebuilt), one repetition, run as a user runs the benchmark
(the session's run, ``build_cache_run`` in tests/fixtures/images.py, whose builds the rebuild's
tests read too).

It proves the mechanism end to end with the real Apptainer: the cold build fills the cache and
keeps its root, the rebuild after a one-package change is made from that root (its record says
so), the floor is measured on the rebuilt root, the --no-cache rebuild uses no cache, and the
two changed images hold the same files (the benchmark fails otherwise). The ratios are reported,
not judged: the full-size figures (``cpu`` with torch) are docs/building.md's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import ROOT
from tests.jobs.scripts import clean_env

pytestmark = pytest.mark.apptainer


def test_benchmark_rebuilds_with_the_cache_and_the_same_content(build_cache_run: dict) -> None:
    done, out, tmp = build_cache_run["done"], build_cache_run["out"], build_cache_run["tmp"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    run = result["runs"][0]
    assert run["bases_linked"] == ["debian-base"]
    assert run["cache_bytes"] > 0  # the cold build filled pip's cache
    assert run["warm_cache_use"]["use"].startswith("pip (")  # the rebuild used the cache
    # the rebuild was made from the root the cold build kept
    assert any(line.startswith("rebuilding from the image ") for line in run["warm_kept_root"])
    assert len(run["warm_made_from"]) == 64 and run["seconds"]["floor"] > 0
    assert any(line.startswith("six==") for line in run["pip_freeze"])
    assert any(line.startswith("idna==") for line in run["pip_freeze"])
    assert run["files_compared"] > 100
    # each phase started settled (no window asked for here: CI judges no ratio)
    assert [entry["phase"] for entry in run["settled"]] == ["cold 1/1", "warm 1/1",
                                                            "floor 1/1", "no cache 1/1"]
    assert all(entry["create_us_after"] > 0 for entry in run["settled"])
    medians = result["medians"]
    assert result["ratio"] == pytest.approx(medians["warm"] / medians["cold"])
    assert result["floor_ratio"] == pytest.approx(medians["warm"] / medians["floor"])
    assert "rebuild/floor" in done.stdout and "identical" in done.stdout
    assert out.with_suffix(".png").stat().st_size > 0
    # every repetition's folder (images, cache, work) is gone; what --keep asked for is kept
    assert not list(tmp.glob("bench-build-cache-*"))
    assert sorted(path.name for path in build_cache_run["keep"].iterdir()) == [
        "cache-1", "cold-1.sif", "cold-1.sif.json", "no_cache-1.sif", "no_cache-1.sif.json",
        "warm-1.sif", "warm-1.sif.json"]


@pytest.mark.cuda_images
def test_benchmark_of_a_cuda_image(tmp_path: Path, debian_base_image: Path) -> None:
    """The long tier: mahti-cuda-pip (torch's 3 GB CUDA build from the index), the project's
    own env spec; its rebuild is made from the kept root, its floor measured beside it."""
    out = tmp_path / "bench" / "build_cache.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "build_cache.py"), "--target",
         "mahti-cuda-pip", "--bases", str(debian_base_image.parent), "--package", "six",
         "--repeat", "1", "--skip-no-cache", "--tmp", str(tmp_path), "--out", str(out),
         "--settle-s", "0"],
        capture_output=True, text=True, timeout=3600, env=clean_env(), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = json.loads(out.read_text())["runs"][0]
    assert len(run["warm_made_from"]) == 64 and run["seconds"]["floor"] > 0
    assert any(line.startswith("torch==2.14.1") for line in run["pip_freeze"])
    assert any(line.startswith("six==") for line in run["pip_freeze"])
