"""Tests of the training workloads in jobs/: their pieces, and real 2-rank gloo runs on this host.

The pieces (models, data readers, the tolerant DeepSpeed config reader) are imported straight
from jobs/ (a folder of scripts, not a package).  The runs launch ``jobs/train.py`` as a batch
script would, under ``python -m torch.distributed.run``, each in its own session so that a hung
run is killed as a whole process group, and read the ``train.json`` that rank 0 writes.

The DeepSpeed runs need deepspeed in this Python; where it is missing they are skipped (and run
inside the image instead), never faked.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import pickle
import socket
import struct
import sys
from pathlib import Path

import pytest

from containers.prove.train import TrainReport
from tests.fixtures import procs
from tests.jobs.scripts import JOBS, clean_env, script, sibling

torch = pytest.importorskip("torch")

TRAIN = JOBS / "train.py"
#: a bound on a hang, not a timing: torch.compile alone took 91 s on a loaded 2-core machine
RUN_TIMEOUT_S = 300
# Small enough for a few seconds per run on 2 CPU cores, big enough for the loss to fall.
SMALL = ["--model-size", "tiny", "--samples", "512", "--val-samples", "128",
         "--batch-size", "32", "--epochs", "2"]
HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(
    not HAVE_DEEPSPEED,
    reason=f"deepspeed is not importable in {sys.executable}; the DeepSpeed runs are exercised "
    "inside the image")

# LUMI's published ds_config.json (LUMI-AI-example), trailing commas and all.
LUMI_DS_CONFIG = """{
  "train_batch_size": 32,
  "steps_per_print": 100,
  "zero_optimization": {
    "stage": 1,
  },
  "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 0.001,
    },
  },
  "fp16": {
    "enabled": false,
  },
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "wall_clock_breakdown": false,
}
"""


data_mod, distenv, dsconfig, models, trainloop = (
    sibling(name) for name in ("data", "distenv", "dsconfig", "models", "trainloop"))


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # Any JIT-compiled op would land here, where a test can see it.
    return clean_env(TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"), **extra)


def run_cmd(cmd: list[str], env: dict[str, str],
            timeout: float = RUN_TIMEOUT_S) -> tuple[int, str, str]:
    return procs.finish(procs.start(cmd, env), timeout)


def torchrun(tmp_path: Path, *args: str, nproc: int = 2) -> tuple[int, str, str, dict]:
    out_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), str(TRAIN), "--out", str(out_dir), *args]
    code, out, err = run_cmd(cmd, job_env(tmp_path))
    path = out_dir / "train.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    return code, out, err, report


def single(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """train.py as one plain process (for errors raised before the process group exists)."""
    cmd = [sys.executable, str(TRAIN), "--out", str(tmp_path / "out"), *args]
    return run_cmd(cmd, job_env(tmp_path, **env), timeout=60)


LOGITS_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def assert_trained(code: int, out: str, err: str, report: dict, example: str,
                   precision: str = "fp32") -> None:
    assert code == 0, f"exit {code}\nstdout:\n{out}\nstderr:\n{err[-4000:]}"
    TrainReport.from_dict(report)  # the judge's typed shape, every key of it
    assert report["ok"] is True and report["error"] is None
    assert report["example"] == example
    assert report["world_size"] == 2 and report["nodes"] == 1
    assert report["backend"] == "gloo" and report["device"] == "cpu"
    assert report["precision"] == precision
    # what the forward really computed in: a mixed-precision path that silently fell back to
    # fp32 (or a cast that never happened) shows here
    assert report["logits_dtype"] == LOGITS_DTYPE[precision]
    assert (report["mixed_precision"] == "none") == (precision == "fp32")
    assert report["fast_path"]["host_sync"] == "per epoch"
    assert report["loss_last"] < report["loss_first"], report["epochs"]
    assert report["params_consistent"] is True
    assert report["consistency"]["buffers_consistent"] is True
    assert len(set(report["consistency"]["param_sha256_per_rank"])) == 1
    assert report["throughput"] > 0 and report["total_time_s"] > 0
    assert report["throughput_per_device"] == pytest.approx(report["throughput"] / 2)
    assert [e["epoch"] for e in report["epochs"]] == list(range(1, report["epochs_run"] + 1))
    for epoch in report["epochs"]:
        assert epoch["samples"] > 0 and epoch["throughput"] > 0 and epoch["time_s"] > 0
        assert epoch["throughput_per_device"] == pytest.approx(epoch["throughput"] / 2, rel=1e-5)
        assert 0.0 <= epoch["accuracy"] <= 1.0 and 0.0 <= epoch["val_accuracy"] <= 1.0
        assert epoch["peak_rss_mb"] > 50  # a Python process with torch loaded
        assert epoch["max_memory_allocated_mb"] is None  # no GPU here
        assert epoch["max_memory_reserved_mb"] is None
    assert report["finished"] is not None
    # every rank's device probe, gathered (train.json) and as each rank wrote it
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["hostnames"] == [r["hostname"] for r in report["ranks"]]
    for info in report["ranks"]:
        assert (info["device"], info["build"], info["device_text"]) == ("cpu", "cpu", "cpu")
        assert f"[cpu] cores {info['cores']}" in out
    # rank 0 alone prints
    assert out.count("Epoch 1/") == 1
    assert "Training complete." in out and "Parameters consistent across ranks: yes" in out
    assert f"# mixed precision: {report['mixed_precision']} (" in out
    assert "# fast path: channels_last " in out
    assert f"({report['throughput_per_device']:.1f} per rank)" in out
    assert "Peak RSS=" in out


# ----------------------------------------------------------------------------------------------
# DeepSpeed config reader
# ----------------------------------------------------------------------------------------------


def test_strip_trailing_commas_only_outside_strings():
    text = '{"a": [1, 2,], "b": "x,}", "c": "q\\",]",\n}'
    assert json.loads(dsconfig.strip_trailing_commas(text)) == {"a": [1, 2], "b": "x,}",
                                                                 "c": 'q",]'}
    # positions are kept, so later errors still point at the right line and column
    assert len(dsconfig.strip_trailing_commas(text)) == len(text)


def test_lumi_config_with_trailing_commas_is_read(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(LUMI_DS_CONFIG)
    with pytest.raises(json.JSONDecodeError):
        json.loads(LUMI_DS_CONFIG)  # what plain json.load makes of LUMI's file
    config = dsconfig.load_config(path)
    assert config["train_batch_size"] == 32
    assert config["zero_optimization"] == {"stage": 1}
    assert config["optimizer"] == {"type": "Adam", "params": {"lr": 0.001}}
    assert dsconfig.zero_stage(config) == 1


def test_bad_config_gives_one_line_naming_file_and_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "train_batch_size": 32\n  "zero_optimization": {"stage": 2}\n}\n')
    with pytest.raises(dsconfig.DsConfigError) as caught:
        dsconfig.load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: line 3 column 3: Expecting ',' delimiter")


@pytest.mark.parametrize(("text", "expected"), [
    ('[1, 2]', "expected a JSON object"),
    ('{"zero_optimization": {"stage": 4}}', "zero_optimization.stage must be one of 0, 1, 2, 3"),
    ('{"zero_optimization": 3}', "'zero_optimization' must be an object"),
    ('{"train_batch_size": "32"}', "train_batch_size must be a positive integer"),
    ('{"optimizer": {"params": {}}}', "optimizer.type must be a string"),
])
def test_config_semantic_errors_name_the_key(tmp_path, text, expected):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(dsconfig.DsConfigError, match=expected) as caught:
        dsconfig.load_config(path)
    assert str(caught.value).startswith(str(path))


def test_missing_config_file(tmp_path):
    with pytest.raises(dsconfig.DsConfigError, match="no such DeepSpeed config file"):
        dsconfig.load_config(tmp_path / "nope.json")


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_shipped_configs_are_strict_json_with_their_stage(stage):
    path = JOBS / "ds_config" / f"zero{stage}.json"
    config = json.loads(path.read_text())  # strict: no trailing commas in our own files
    assert dsconfig.zero_stage(dsconfig.load_config(path)) == stage
    assert config["optimizer"]["params"]["torch_adam"] is True  # no JIT-built Adam anywhere


def test_fit_to_job_makes_batch_consistent_and_cpu_safe():
    config = json.loads(dsconfig.strip_trailing_commas(LUMI_DS_CONFIG))
    config["fp16"]["enabled"] = True
    plan = dsconfig.plan_precision(config, None, on_cpu=True, gpu_default="bf16",
                                   has_batchnorm=False)
    assert (plan.asked, plan.engine, plan.autocast) == ("fp32", "fp32", None)  # auto on CPU
    fitted, changes = dsconfig.fit_to_job(config, global_batch=64, world_size=2, on_cpu=True,
                                          precision=plan, lr=None, stage=3)
    assert fitted["train_batch_size"] == 64
    assert fitted["train_micro_batch_size_per_gpu"] == 32
    assert fitted["gradient_accumulation_steps"] == 1
    assert fitted["zero_optimization"]["stage"] == 3
    assert fitted["optimizer"]["params"]["torch_adam"] is True
    assert fitted["fp16"]["enabled"] is False and "bf16" not in fitted
    assert "torch_autocast" not in fitted
    assert changes["train_batch_size"] == [32, 64]
    assert config["train_batch_size"] == 32  # the caller's dict is untouched
    assert dsconfig.config_precision(fitted) == "fp32"


def test_fit_to_job_keeps_accumulation_and_sets_gpu_precision():
    config = {"gradient_accumulation_steps": 2, "optimizer": {"type": "Adam", "params": {"lr": 1}}}
    plan = dsconfig.plan_precision(config, None, on_cpu=False, gpu_default="bf16",
                                   has_batchnorm=False)
    assert plan.mixed_precision == "deepspeed-bf16"
    fitted, changes = dsconfig.fit_to_job(config, global_batch=64, world_size=4, on_cpu=False,
                                          precision=plan, lr=0.01, stage=None)
    assert fitted["train_micro_batch_size_per_gpu"] == 8
    assert fitted["optimizer"]["params"] == {"lr": 0.01}  # no torch_adam forced on GPU
    assert dsconfig.config_precision(fitted) == "bf16"
    assert changes["optimizer.params.lr"] == [1, 0.01]
    with pytest.raises(dsconfig.DsConfigError, match="not divisible by world size 4 x "
                       "gradient_accumulation_steps 2"):
        dsconfig.fit_to_job({"gradient_accumulation_steps": 2}, global_batch=12, world_size=4,
                            on_cpu=True, precision=plan, lr=None, stage=None)


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def test_synthetic_data_shapes_and_determinism():
    spec = data_mod.SPECS["cifar100"]
    train, val = data_mod.synthetic(spec, 300, 50, seed=3)
    again, _ = data_mod.synthetic(spec, 300, 50, seed=3)
    other, _ = data_mod.synthetic(spec, 300, 50, seed=4)
    assert train.images.shape == (300, 3, 32, 32) and val.images.shape == (50, 3, 32, 32)
    assert train.labels.dtype == torch.int64
    assert 0 <= int(train.labels.min()) and int(train.labels.max()) < 100
    assert torch.equal(train.images, again.images) and torch.equal(train.labels, again.labels)
    assert not torch.equal(train.images, other.images)
    assert abs(float(train.images.std()) - 1.0) < 0.1  # roughly normalised inputs
    x, y = train.__getitems__([0, 5, 7])
    assert x.shape == (3, 3, 32, 32) and torch.equal(y, train.labels[[0, 5, 7]])


def test_synthetic_data_are_learnable():
    """A linear classifier trained briefly on the synthetic set beats chance on held-out data."""
    spec = data_mod.SPECS["mnist"]
    train, val = data_mod.synthetic(spec, 1000, 500, seed=0)
    torch.manual_seed(0)
    model = torch.nn.Linear(28 * 28, 10)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = train.images.flatten(1)
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(inputs), train.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(val.images.flatten(1)).argmax(1) == val.labels).float().mean().item()
    assert losses[-1] < 0.5 * losses[0]
    assert accuracy > 0.5  # chance is 0.1


def test_validation_shards_cover_every_sample_once():
    size, world = 10, 4
    dataset = data_mod.ImageTensors(torch.zeros(size, 1, 1, 1), torch.arange(size))  # label: index
    seen = []
    for rank in range(world):
        batches, weights = data_mod.val_batches(dataset, rank=rank, world_size=world,
                                                micro_batch=1, device=torch.device("cpu"),
                                                resident=False, num_workers=0)
        indices = [int(label) for _inputs, labels in batches for label in labels]
        assert len(indices) == len(batches) == 3  # same number of batches on every rank
        seen += [i for i, w in zip(indices, weights.tolist(), strict=True) if w == 1.0]
    assert sorted(seen) == list(range(size))


def write_cifar_pickle(path: Path, images, labels, protocol: int) -> None:
    with open(path, "wb") as handle:
        pickle.dump({b"filenames": [b"x.png"] * len(labels), b"batch_label": b"training batch",
                     b"fine_labels": labels, b"coarse_labels": [0] * len(labels),
                     b"data": images}, handle, protocol=protocol)


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar100_reader_on_standard_pickles(tmp_path, protocol):
    np = pytest.importorskip("numpy")  # only to WRITE the files the way the dataset ships them
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    train = np.arange(4 * 3072, dtype=np.uint8).reshape(4, 3072)
    write_cifar_pickle(folder / "train", train, [0, 99, 5, 7], protocol)
    write_cifar_pickle(folder / "test", train[:2].copy(), [3, 4], protocol)
    train_set, val_set, source = data_mod.load_dataset("cifar100", str(tmp_path), 0, 0, 0)
    assert source == str(folder)
    assert train_set.images.shape == (4, 3, 32, 32) and train_set.images.dtype == torch.uint8
    assert train_set.labels.tolist() == [0, 99, 5, 7] and val_set.labels.tolist() == [3, 4]
    # channel-major rows: element 1024 of a row is green at (0, 0)
    assert int(train_set.images[1, 1, 0, 0]) == int(train[1, 1024])
    x, _ = train_set.__getitems__([1])
    mean, std = data_mod.SPECS["cifar100"].mean[1], data_mod.SPECS["cifar100"].std[1]
    assert float(x[0, 1, 0, 0]) == pytest.approx((int(train[1, 1024]) / 255 - mean) / std)


def test_cifar100_reader_refuses_foreign_globals(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name in ("train", "test"):
        with open(folder / name, "wb") as handle:
            pickle.dump({b"data": Evil(), b"fine_labels": [1]}, handle, protocol=2)
    with pytest.raises(data_mod.DataError, match="refusing to load .*system"):
        data_mod.load_dataset("cifar100", str(tmp_path), 0, 0, 0)


def test_cifar100_missing_files_error_is_clear(tmp_path):
    with pytest.raises(data_mod.DataError) as caught:
        data_mod.load_dataset("cifar100", str(tmp_path), 0, 0, 0)
    message = str(caught.value)
    assert "cifar-100-python" in message and "nothing is downloaded" in message
    assert "\n" not in message


def idx_bytes(array_bytes: bytes, dims: tuple[int, ...]) -> bytes:
    return bytes([0, 0, 0x08, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + array_bytes


def write_mnist(folder: Path, gz: bool, train_n: int = 3, test_n: int = 2) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "train-images-idx3-ubyte": idx_bytes(bytes(i % 256 for i in range(train_n * 784)),
                                             (train_n, 28, 28)),
        "train-labels-idx1-ubyte": idx_bytes(bytes(range(train_n)), (train_n,)),
        "t10k-images-idx3-ubyte": idx_bytes(bytes(test_n * 784), (test_n, 28, 28)),
        "t10k-labels-idx1-ubyte": idx_bytes(bytes([9] * test_n), (test_n,)),
    }
    for name, content in files.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(content))
        else:
            (folder / name).write_bytes(content)


@pytest.mark.parametrize(("layout", "gz"), [("", False), ("MNIST/raw", True), ("mnist", False)])
def test_mnist_reader_on_idx_files(tmp_path, layout, gz):
    write_mnist(tmp_path / layout if layout else tmp_path, gz)
    train, val, _source = data_mod.load_dataset("mnist", str(tmp_path), 0, 0, 0)
    assert train.images.shape == (3, 1, 28, 28) and val.images.shape == (2, 1, 28, 28)
    assert train.labels.tolist() == [0, 1, 2] and val.labels.tolist() == [9, 9]
    assert int(train.images[0, 0, 0, 5]) == 5
    x, _y = train.__getitems__([0, 2])
    assert x.dtype == torch.float32 and x.shape == (2, 1, 28, 28)


def test_mnist_reader_rejects_bad_files(tmp_path):
    write_mnist(tmp_path, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05ab")
    with pytest.raises(data_mod.DataError, match="header says 5 bytes of data, file has 2"):
        data_mod.load_dataset("mnist", str(tmp_path), 0, 0, 0)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"PK\x03\x04")
    with pytest.raises(data_mod.DataError, match="bad magic number"):
        data_mod.load_dataset("mnist", str(tmp_path), 0, 0, 0)


def test_mnist_missing_files_error_is_clear(tmp_path):
    with pytest.raises(data_mod.DataError, match="no MNIST files.*nothing is downloaded"):
        data_mod.load_dataset("mnist", str(tmp_path), 0, 0, 0)


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", models.MODEL_NAMES)
@pytest.mark.parametrize("dataset", data_mod.DATASET_NAMES)
def test_model_output_shapes(name, dataset):
    spec = data_mod.SPECS[dataset]
    model = models.build_model(name, spec, "tiny")  # a DatasetSpec is an InputSpec
    logits = model(torch.randn(2, spec.channels, spec.height, spec.width))
    assert logits.shape == (2, spec.classes)
    assert isinstance(model.fsdp_units, list)


def test_resnet18_has_the_usual_parameter_count():
    spec = models.InputSpec(3, 32, 32, 100)
    model = models.build_model("resnet", spec, "small")
    assert models.count_parameters(model) == 11_220_132  # ResNet-18, 3x3 stem, 100 classes
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 100)


@pytest.mark.parametrize(("name", "size", "message"), [
    ("wideresnet", "15-4", "depth must be 6n\\+4"),
    ("cnn", "huge", "unknown size 'huge'"),
    ("mlp", "tiny", "unknown model 'mlp'"),
])
def test_bad_model_choices(name, size, message):
    with pytest.raises(ValueError, match=message):
        models.build_model(name, models.InputSpec(3, 32, 32, 100), size)


def test_fingerprint_detects_a_single_changed_element():
    tensors = [("a", torch.arange(6.0)), ("b", torch.ones(2, 2))]
    first = distenv.fingerprint(tensors)
    second = distenv.fingerprint([(n, t.clone()) for n, t in tensors])
    assert first["sha256"] == second["sha256"] and first["checksum"] == 19.0
    changed = tensors[1][1].clone()
    changed[1, 1] = 1.0000001
    assert distenv.fingerprint([tensors[0], ("b", changed)])["sha256"] != first["sha256"]


def test_precision_resolution_on_cpu():
    cpu = torch.device("cpu")
    assert trainloop.resolve_precision("auto", cpu) == "fp32"
    assert trainloop.resolve_precision("bf16", cpu) == "bf16"


# ----------------------------------------------------------------------------------------------
# Command-line errors (before any process group exists)
# ----------------------------------------------------------------------------------------------


def test_global_batch_must_divide_by_world_size(tmp_path):
    code, _out, err = single(tmp_path, "--batch-size", "33", RANK="0", WORLD_SIZE="2")
    assert code == 2
    assert err.strip() == "train.py: error: --batch-size 33 (global) is not divisible by the " \
        "world size 2"


def test_bad_ds_config_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"zero_optimization": {"stage": 3},, }')
    code, _out, err = single(tmp_path, "--example", "deepspeed", "--ds-config", str(bad))
    assert code == 2
    assert err.strip().splitlines() == [(
        f"train.py: error: {bad}: line 1 column 38: Expecting property name enclosed in double "
        "quotes (not valid JSON, even allowing trailing commas)")]


def test_expect_gpu_without_one_exits_4_before_training(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    code, out, err = single(tmp_path, "--expect-gpu", "rocm", RANK="0", WORLD_SIZE="1")
    assert code == 4 and out == ""
    assert err.splitlines() == [
        f"train.py: rank 0 on {socket.gethostname()}: expected a rocm GPU, but torch is not a "
        f"rocm build (torch {torch.__version__}: cpu build, 0 GPUs visible, no visible-devices "
        "variable set)"]
    device = json.loads((tmp_path / "out" / "device-0.json").read_text())
    assert (device["device"], device["build"]) == ("cpu", "cpu")
    assert not (tmp_path / "out" / "train.json").exists()


def test_missing_data_exits_2(tmp_path):
    code, _out, err = single(tmp_path, "--model", "cnn", "--data", str(tmp_path))
    assert code == 2
    assert err.startswith(f"train.py: error: --data {tmp_path}: no MNIST files")


def test_every_flag_has_help():
    train = script("train.py", "train_job")
    for action in train.build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help"


# ----------------------------------------------------------------------------------------------
# Real runs: 2 ranks on gloo
# ----------------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_ddp_cnn_trains_and_ranks_agree(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "ddp", "--model", "cnn", *SMALL)
    assert_trained(code, out, err, report, "ddp")
    assert report["dataset"] == "mnist" and report["model_name"] == "ConvNet 8/16"
    assert report["global_batch_size"] == 32 and report["micro_batch_size"] == 16
    assert report["epochs_run"] == 2 and report["early_stopped"] is False
    # 512 samples, global batch 32: 16 steps of 32 per epoch
    assert [e["samples"] for e in report["epochs"]] == [512, 512]
    assert report["final"]["val_accuracy"] > 0.3  # 10 classes: chance is 0.1
    # on the CPU, auto leaves the fast path off: the DataLoader path, NCHW, eager
    assert report["fast_path"] == {"channels_last": False, "autocast": None,
                                   "data_on_device": False, "compile": False,
                                   "compile_s": None, "host_sync": "per epoch"}
    assert report["published_figures"] == []  # none published for the tiny ConvNet


@pytest.mark.distributed
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_ddp_ranks_pin_themselves(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "ddp", "--model", "cnn", *SMALL,
                                      "--epochs", "1", "--rank-cores", "1:0")
    assert code == 0, err[-3000:]
    assert [(r["cores"], r["cpus_allowed_list"], r["pinned"]) for r in report["ranks"]] == \
        [("1", "1", True), ("0", "0", True)]
    for info in report["ranks"]:
        device = json.loads((tmp_path / "out" / f"device-{info['rank']}.json").read_text())
        assert device["cores"] == info["cores"]


@pytest.mark.distributed
def test_ddp_stops_early_at_target_accuracy(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "ddp", "--model", "cnn", *SMALL,
                                      "--epochs", "5", "--target-accuracy", "0.05")
    assert code == 0, err[-3000:]
    assert report["epochs_run"] == 1 and report["early_stopped"] is True
    assert report["reached_target"] is True
    assert "stopping early" in out


@pytest.mark.distributed
def test_fsdp_vit_trains_and_full_parameters_agree(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "fsdp", "--model", "vit", *SMALL)
    assert_trained(code, out, err, report, "fsdp")
    assert report["fsdp_api"] == "fully_shard (FSDP2)"
    assert report["fsdp_units"] == 3  # two encoder layers and the root
    assert report["mixed_precision"] == "none"
    assert report["consistency"]["method"].startswith("DTensor.full_tensor()")
    assert report["consistency"]["param_elements"] == report["parameters"]


@pytest.mark.distributed
@pytest.mark.parametrize(("example", "model", "mode"), [
    ("ddp", "cnn", "autocast-bf16"),
    ("fsdp", "vit", "fsdp-policy-bf16"),  # no BatchNorm: bf16 all-gathers
    ("fsdp", "wideresnet", "autocast-bf16"),  # BatchNorm: fp32 shards, autocast
])
def test_bf16_mixed_precision_paths_on_cpu(tmp_path, example, model, mode):
    """The GPU default (bf16) exercised on the CPU, where autocast and FSDP's policy work too."""
    code, out, err, report = torchrun(tmp_path, "--example", example, "--model", model,
                                      "--precision", "bf16", *SMALL)
    assert_trained(code, out, err, report, example, precision="bf16")
    assert report["mixed_precision"] == mode
    assert report["fast_path"]["autocast"] == ("bf16" if mode.startswith("autocast") else None)


@needs_deepspeed
@pytest.mark.distributed
def test_deepspeed_zero1_trains_without_building_ops(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "deepspeed", "--zero-stage", "1",
                                      "--model", "cnn", *SMALL)
    assert_trained(code, out, err, report, "deepspeed")
    assert report["zero_stage"] == 1
    assert report["ds_config"].endswith("ds_config/zero1.json")
    assert report["ds_config_overrides"]["train_batch_size"] == [256, 32]
    assert report["ds_config_overrides"]["train_micro_batch_size_per_gpu"] == [None, 16]
    assert report["ds_shm_comm_op"] is False
    assert not (tmp_path / "torch_extensions").exists(), "DeepSpeed JIT-built an op"


@needs_deepspeed
@pytest.mark.distributed
def test_deepspeed_zero3_lumi_style_config_partitions_and_agrees(tmp_path):
    config = tmp_path / "lumi_zero3.json"
    config.write_text(LUMI_DS_CONFIG.replace(
        '"stage": 1,', '"stage": 3,\n    "stage3_param_persistence_threshold": 0,'))
    code, out, err, report = torchrun(tmp_path, "--example", "deepspeed", "--ds-config",
                                      str(config), "--model", "cnn", *SMALL)
    assert_trained(code, out, err, report, "deepspeed")
    assert report["zero_stage"] == 3
    assert report["zero3_persistent_params"] == 0 and report["zero3_partitioned_params"] == 10
    assert report["ds_config_overrides"]["optimizer.params.torch_adam"] == [None, True]
    assert report["consistency"]["method"] == "deepspeed.zero.GatheredParameters per parameter"
    assert report["consistency"]["param_elements"] == report["parameters"]
    assert not (tmp_path / "torch_extensions").exists(), "DeepSpeed JIT-built an op"


def test_a_seed_preset_fills_only_the_flags_left_out():
    train = script("train.py", "train_job")
    parse = train.build_parser().parse_args
    olivia = parse(["--model", "wideresnet", "--model-size", "olivia"])
    notes = train.apply_presets(olivia)
    assert (olivia.batch_size, olivia.optimizer, olivia.lr) == (256, "sgd", 0.01)
    assert len(notes) == 3 and notes[0] == ("--batch-size 256 from the olivia preset (its "
                                            "guide's setting)")
    mine = parse(["--model", "wideresnet", "--model-size", "olivia", "--optimizer", "adamw",
                  "--batch-size", "64"])
    assert train.apply_presets(mine) == ["--lr 0.01 from the olivia preset (its guide's "
                                         "setting)"]
    assert (mine.batch_size, mine.optimizer) == (64, "adamw")
    generic = parse(["--model", "cnn"])
    assert train.apply_presets(generic) == []
    assert (generic.batch_size, generic.optimizer, generic.lr) == (256, "adamw", None)
