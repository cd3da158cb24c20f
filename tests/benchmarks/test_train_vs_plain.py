"""benchmarks/train_vs_plain.py: train.py's DDP example against a minimal hand-written loop.

The pieces (steady state, which fast-path flags train.py gets) are imported from the benchmark;
the whole benchmark then runs as a user runs it, CI-sized on CPU (2 gloo ranks per side), and
its JSON and PNG are read back.  Its ratio is reported, never judged here: a 2-core machine
shared with other jobs times too noisily for a threshold.
"""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType

import pytest

from tests.fixtures import ROOT, procs
from tests.jobs.scripts import clean_env

BENCHMARKS = ROOT / "benchmarks"
RUN_TIMEOUT_S = 300


def benchmark() -> ModuleType:
    """The benchmark as a module; it imports its sibling ``common`` as the scripts do."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("train_vs_plain")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_steady_state_leaves_out_the_first_epoch():
    bench = benchmark()
    assert bench.steady_state([10.0, 100.0, 200.0]) == 150.0
    with pytest.raises(ValueError, match="at least 2 epochs"):
        bench.steady_state([100.0])


def test_fast_path_flags_go_to_train_py_only_where_it_offers_them():
    bench = benchmark()
    setup = bench.Setup(model="wideresnet", model_size="olivia", batch_size=256, samples=512,
                        epochs=2, ranks=1, device="cuda", precision="auto",
                        channels_last=True, compile=True)
    everything = {"--data-on-device", "--channels-last", "--compile"}
    assert bench.fast_path(setup, everything) == (
        ["--data-on-device", "on", "--channels-last", "on", "--compile"], [])
    assert bench.fast_path(setup, set()) == (
        [], ["--data-on-device on", "--channels-last on", "--compile"])
    plain_cpu = bench.Setup(model="cnn", model_size="tiny", batch_size=64, samples=512, epochs=2,
                            ranks=2, device="cpu", precision="auto", channels_last=False,
                            compile=False)
    # channels_last off is what a train.py without the flag does anyway: nothing is missing
    assert bench.fast_path(plain_cpu, {"--compile"}) == ([], ["--data-on-device on"])
    assert bench.fast_path(plain_cpu, everything) == (
        ["--data-on-device", "on", "--channels-last", "off"], [])


def test_one_epoch_is_refused():
    with pytest.raises(SystemExit):
        benchmark().parse_args(["--epochs", "1"])


@pytest.mark.distributed
def test_benchmark_runs_both_sides_on_cpu(tmp_path):
    out = tmp_path / "train_vs_plain.json"
    cmd = [sys.executable, str(BENCHMARKS / "train_vs_plain.py"), "--model", "cnn",
           "--model-size", "tiny", "--samples", "1024", "--batch-size", "64", "--epochs", "2",
           "--ranks", "2", "--device", "cpu", "--out", str(out)]
    code, stdout, stderr = procs.finish(procs.start(cmd, clean_env()), RUN_TIMEOUT_S)
    assert code == 0, f"exit {code}\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-4000:]}"
    result = json.loads(out.read_text())
    [row] = result["configurations"]
    assert (row["model"], row["model_size"], row["ranks"], row["device"]) == \
        ("cnn", "tiny", 2, "cpu")
    assert row["precision"] == "fp32" and row["parameters"] == 11_322
    example, plain = row["example"]["steady_throughput"], row["plain"]["steady_throughput"]
    assert example > 0 and plain > 0
    assert row["ratio"] == pytest.approx(example / plain)
    assert row["goal"] == 0.95
    for side in ("example", "plain"):
        [epochs] = row[side]["epoch_throughputs"]
        assert len(epochs) == 2 and min(epochs) > 0
    assert "example/plain" in stdout and f"json: {out}" in stdout
    assert out.with_suffix(".png").stat().st_size > 10_000
