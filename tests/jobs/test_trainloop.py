"""Tests of the training fast path and of mixed precision per example, on this host's CPU.

The pieces (device-resident batches and their sharding, the DeepSpeed precision plan, the header
and summary) are imported from jobs/; the runs launch ``jobs/train.py`` under torchrun with two
gloo ranks, as ``test_train.py`` does, through the same helpers.  Every dtype path a GPU takes by
default (bf16: DeepSpeed's own mode for the ViT, DeepSpeed's torch_autocast for BatchNorm models,
autocast for DDP and for FSDP with BatchNorm, FSDP's policy otherwise) runs here on the CPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.jobs.scripts import JOBS, clean_env, script, sibling
from tests.fixtures.reports import train_report
from tests.jobs.test_train import SMALL, assert_trained, needs_deepspeed, torchrun

torch = pytest.importorskip("torch")
from torch.utils.data import DistributedSampler  # noqa: E402  (after the importorskip)

data_mod, dsconfig, models, trainloop, trainreport = (
    sibling(name) for name in ("data", "dsconfig", "models", "trainloop", "trainreport"))
train_job = script("train.py", "train_job")
HAVE_CC = bool(shutil.which("cc") or shutil.which("gcc"))


def tiny_model(name: str) -> torch.nn.Module:
    spec = data_mod.SPECS["cifar100"]
    return models.build_model(name, spec, "tiny")  # a DatasetSpec is an InputSpec


def indexed_set(size: int) -> "data_mod.ImageTensors":
    """Samples whose label is their index, so a batch's labels say which samples it holds."""
    return data_mod.ImageTensors(torch.arange(size, dtype=torch.float32).view(size, 1, 1, 1),
                                 torch.arange(size))


def epoch_labels(batches, epoch: int) -> list[int]:
    batches.set_epoch(epoch)
    return [int(label) for _inputs, labels in batches for label in labels]


# ----------------------------------------------------------------------------------------------
# Device-resident batches
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "world"), [(10, 1), (37, 2), (64, 3), (101, 4)])
def test_shard_order_is_distributed_samplers(size, world):
    for rank in range(world):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=True,
                                     seed=7, drop_last=True)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            assert data_mod.shard_order(size, rank, world, 7, epoch).tolist() == list(sampler)


def test_device_resident_shards_are_disjoint_and_reshuffled_each_epoch():
    dataset = indexed_set(101)
    common = {"world_size": 2, "seed": 3, "micro_batch": 8, "device": torch.device("cpu"),
              "num_workers": 0}
    ranks = [data_mod.train_batches(dataset, rank=rank, resident=True, **common)
             for rank in range(2)]
    assert all(batches.loader is None for batches in ranks)  # cut on the device
    for epoch in range(2):
        shards = [epoch_labels(batches, epoch) for batches in ranks]
        assert len(shards[0]) == len(shards[1]) == 48  # 50 per rank, whole batches of 8
        assert not set(shards[0]) & set(shards[1])
        # the same batches, in the same order, as the DataLoader path
        for rank, shard in enumerate(shards):
            loader = data_mod.train_batches(dataset, rank=rank, resident=False, **common)
            assert loader.loader is not None  # the DataLoader path
            assert epoch_labels(loader, epoch) == shard
    first, second = epoch_labels(ranks[0], 0), epoch_labels(ranks[0], 1)
    assert first != second and sorted(first) != sorted(second)  # new order and new members
    again = data_mod.train_batches(dataset, rank=0, resident=True, **common)
    assert epoch_labels(again, 1) == second  # a pure function of seed and epoch


def test_device_resident_validation_is_the_exact_shard():
    dataset = indexed_set(21)
    seen = []
    for rank in range(2):
        batches, weights = data_mod.val_batches(dataset, rank=rank, world_size=2, micro_batch=4,
                                                device=torch.device("cpu"), resident=True,
                                                num_workers=0)
        loader, _ = data_mod.val_batches(dataset, rank=rank, world_size=2, micro_batch=4,
                                         device=torch.device("cpu"), resident=False,
                                         num_workers=0)
        labels = epoch_labels(batches, 0)
        assert labels == epoch_labels(loader, 0) and len(batches) == 3  # 11 = 4 + 4 + 3
        assert weights.dtype == torch.float64
        seen += [label for label, weight in zip(labels, weights.tolist(), strict=True) if weight]
    assert sorted(seen) == list(range(21))


def test_staged_uint8_images_are_normalised_as_on_the_host():
    spec = data_mod.SPECS["cifar100"]
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    host = data_mod.ImageTensors(images, torch.arange(6), spec.mean, spec.std)
    staged = host.to(torch.device("cpu"))
    x, y = staged.take(torch.tensor([4, 1]))
    expected_x, expected_y = host.__getitems__([4, 1])
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y)
    assert staged.nbytes == 6 * 3 * 32 * 32 + 6 * 8


def test_synthetic_size_is_known_before_generating():
    spec = data_mod.SPECS["mnist"]
    train, val = data_mod.synthetic(spec, 30, 10, seed=0, device=torch.device("cpu"))
    assert data_mod.synthetic_nbytes(spec, 30, 10) == train.nbytes + val.nbytes
    assert data_mod.fits_on_device(10**15, torch.device("cpu"))  # host memory: always resident


# ----------------------------------------------------------------------------------------------
# Mixed precision under DeepSpeed: the plan for every model and every precision auto picks
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", models.MODEL_NAMES)
@pytest.mark.parametrize("gpu_default", ["bf16", "fp16"])
def test_deepspeed_never_runs_a_batchnorm_model_in_its_half_mode(name, gpu_default):
    """What ``--precision auto`` does on a GPU, for every model: the effective config never
    enables DeepSpeed's bf16/fp16 mode around BatchNorm (its parameter-only cast leaves the
    running statistics fp32, and batch_norm refuses the mix), but computes in that dtype."""
    batchnorm = trainloop.has_batchnorm(tiny_model(name))
    assert batchnorm == (name != "vit")  # both sides of the rule are covered
    config = dsconfig.load_config(JOBS / "ds_config" / "zero1.json")
    plan = dsconfig.plan_precision(config, None, on_cpu=False, gpu_default=gpu_default,
                                   has_batchnorm=batchnorm)
    fitted, changes = dsconfig.fit_to_job(config, global_batch=64, world_size=2, on_cpu=False,
                                          precision=plan, lr=None, stage=None)
    assert plan.compute == gpu_default
    if batchnorm:
        assert dsconfig.config_precision(fitted) == "fp32"
        assert fitted["torch_autocast"] == {"enabled": True,
                                            "dtype": dsconfig.AUTOCAST_DTYPES[gpu_default]}
        assert changes[f"{gpu_default}.enabled"] == [None, False]  # the override, recorded
        assert plan.mixed_precision == f"autocast-{gpu_default}"
        assert "running statistics" in plan.reason
    else:
        assert dsconfig.config_precision(fitted) == gpu_default
        assert "torch_autocast" not in fitted
        assert plan.mixed_precision == f"deepspeed-{gpu_default}"


def test_deepspeed_precision_on_the_cpu_takes_the_gpu_paths():
    config = dsconfig.load_config(JOBS / "ds_config" / "zero1.json")

    def plan(requested, batchnorm):
        return dsconfig.plan_precision(config, requested, on_cpu=True, gpu_default="bf16",
                                       has_batchnorm=batchnorm)

    gpu = dsconfig.plan_precision(config, None, on_cpu=False, gpu_default="bf16",
                                  has_batchnorm=True)
    assert plan("bf16", True) == gpu  # --precision bf16 on the CPU: the GPU's default path
    assert plan("bf16", False).mixed_precision == "deepspeed-bf16"
    assert plan(None, True).mixed_precision == "none"  # auto on the CPU is fp32
    assert plan("fp16", True).mixed_precision == "autocast-fp16"  # DeepSpeed's GradScaler
    cpu_fp16 = plan("fp16", False)  # DeepSpeed's own fp16 mode: fp32 on the CPU, and why
    assert (cpu_fp16.engine, cpu_fp16.compute) == ("fp32", "fp32")
    assert "oneDNN" in cpu_fp16.reason


def test_deepspeed_precision_auto_keeps_the_configs_choice():
    lumi = {"fp16": {"enabled": False}}  # LUMI's file: fp32 on purpose
    assert dsconfig.plan_precision(lumi, None, on_cpu=False, gpu_default="bf16",
                                   has_batchnorm=False).mixed_precision == "none"
    own = {"torch_autocast": {"enabled": True, "dtype": "float16"}}
    kept = dsconfig.plan_precision(own, None, on_cpu=False, gpu_default="bf16",
                                   has_batchnorm=False)
    assert (kept.engine, kept.autocast) == ("fp32", "fp16")
    with pytest.raises(dsconfig.DsConfigError, match="torch_autocast.dtype must be"):
        dsconfig.check_config({"torch_autocast": {"enabled": True, "dtype": "int8"}}, "c.json")


# One rank, in a fresh process (DeepSpeed keeps its autocast state in module globals): DeepSpeed's
# bf16 mode around the BatchNorm ConvNet fails at the first forward -- the bug this plan avoids,
# the same on the CPU as on the GPU -- and the plan's config of the same model trains a step in
# bf16.  Prints one JSON line.
DS_BATCHNORM_PROBE = """
import json, sys, torch, torch.distributed as dist
import dsconfig, models, trainloop
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
import deepspeed
trainloop.disable_shm_comm_op()
base = {"train_batch_size": 8, "zero_optimization": {"stage": 1},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
result = {}

def engine(config):
    torch.manual_seed(0)
    model = models.build_model("cnn", models.InputSpec(1, 28, 28, 10), "tiny")
    return deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                config=config)[0]

naive = engine({**base, "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True}})
try:
    naive(x.bfloat16())
    result["naive"] = "ran"
except RuntimeError as err:
    result["naive"] = str(err)
plan = dsconfig.plan_precision(base, "bf16", on_cpu=True, gpu_default="bf16",
                               has_batchnorm=True)
fitted, _ = dsconfig.fit_to_job(base, global_batch=8, world_size=1, on_cpu=True,
                                precision=plan, lr=None, stage=None)
planned = engine(fitted)
logits = planned(x)
planned.backward(torch.nn.functional.cross_entropy(logits.float(), y))
planned.step()
result["planned"] = str(logits.dtype)
result["bn_weight"] = str(planned.module.features[1].weight.dtype)
print(json.dumps(result))
dist.destroy_process_group()
"""


@needs_deepspeed
def test_deepspeed_bf16_mode_breaks_batchnorm_and_the_plan_does_not(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", DS_BATCHNORM_PROBE], cwd=JOBS, capture_output=True, text=True,
        timeout=120, env=clean_env(PYTHONPATH=str(JOBS), LOCAL_RANK="0",
                                   TORCH_EXTENSIONS_DIR=str(tmp_path / "ext")))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # CUDA says "Expected running_mean to have type BFloat16 but got Float"; the CPU kernel:
    assert "BFloat16" in result["naive"] and "Float" in result["naive"], result
    assert result["planned"] == "torch.bfloat16"  # DeepSpeed's torch_autocast took effect
    assert result["bn_weight"] == "torch.float32"  # the fp32 engine left BatchNorm alone
    assert not (tmp_path / "ext").exists(), "DeepSpeed JIT-built an op"


# ----------------------------------------------------------------------------------------------
# Header pieces
# ----------------------------------------------------------------------------------------------


def test_channels_last_auto_is_for_conv_nets_on_a_gpu():
    def choose(model, device, flag="auto"):
        args = train_job.build_parser().parse_args(["--model", model, "--channels-last", flag])
        return train_job.choose_channels_last(args, torch.device(device))

    gpu = "cuda:0"  # a device object only: nothing touches a GPU
    assert [choose(m, gpu)[0] for m in ("wideresnet", "cnn", "resnet", "vit")] == \
        [True, True, True, False]
    assert choose("cnn", "cpu") == (False, "auto: off on the CPU")
    assert choose("vit", "cpu", "on") == (True, "on as asked")
    assert choose("cnn", gpu, "off") == (False, "off as asked")


def test_summary_shows_per_device_throughput_and_published_figures():
    report = trainreport.TrainReport.from_dict(train_report(
        consistency={"params_consistent": True, "buffers_consistent": True,
                     "param_sha256": "ab" * 32, "param_checksum": 1.5, "method": "m"},
        final={"loss": 0.5, "accuracy": 0.9, "val_loss": 0.6, "val_accuracy": 0.8},
        total_time_s=10.0, throughput=8000.0, throughput_per_device=2000.0, epochs_run=3,
        epochs_requested=3, world_size=4, gpus=4, nodes=1, device="cuda",
        published_figures=["Olivia's guide: ~5,100 img/s FP32 on one GH200"]))
    summary = train_job.format_summary(report)
    assert "Throughput: 8000.0 samples/s (2000.0 per GPU)" in summary
    assert summary.splitlines()[-1] == ("Published for comparison (not a pass criterion): "
                                        "Olivia's guide: ~5,100 img/s FP32 on one GH200")
    report.update(gpus=0, device="cpu", published_figures=[])
    assert "(2000.0 per rank)" in train_job.format_summary(report)
    assert "Published" not in train_job.format_summary(report)


# ----------------------------------------------------------------------------------------------
# Real runs: 2 ranks on gloo
# ----------------------------------------------------------------------------------------------

FAST = ["--data-on-device", "on", "--channels-last", "on"]


@pytest.mark.distributed
@pytest.mark.parametrize("example", [
    "ddp", "fsdp", pytest.param("deepspeed", marks=needs_deepspeed)])
def test_fast_path_trains_with_every_example(tmp_path, example):
    code, out, err, report = torchrun(tmp_path, "--example", example, "--model", "cnn", *FAST,
                                      *SMALL)
    assert_trained(code, out, err, report, example)
    assert report["fast_path"] == {"channels_last": True, "autocast": None,
                                   "data_on_device": True, "compile": False,
                                   "compile_s": None, "host_sync": "per epoch"}
    assert report["fast_path_reasons"]["data_on_device"] == "on as asked; generated on cpu"
    assert "# fast path: channels_last on (on as asked), data on device on" in out
    assert [e["samples"] for e in report["epochs"]] == [512, 512]
    assert report["final"]["val_accuracy"] > 0.3  # 10 classes: chance is 0.1


@needs_deepspeed
@pytest.mark.distributed
@pytest.mark.parametrize(("stage", "model", "extra"), [
    (1, "wideresnet", []),
    (1, "cnn", FAST),
    (3, "cnn", []),
])
def test_deepspeed_batchnorm_models_train_in_bf16(tmp_path, stage, model, extra):
    """The GPU default for every BatchNorm model under DeepSpeed, on the CPU: the engine stays
    fp32 and DeepSpeed's torch_autocast computes in bf16 (the logits are bf16)."""
    code, out, err, report = torchrun(tmp_path, "--example", "deepspeed", "--zero-stage",
                                      str(stage), "--model", model, "--precision", "bf16",
                                      *SMALL, *extra)
    assert_trained(code, out, err, report, "deepspeed", precision="bf16")
    assert report["mixed_precision"] == "autocast-bf16"
    assert report["fast_path"]["autocast"] == "bf16"
    overrides = report["ds_config_overrides"]
    assert overrides["bf16.enabled"] == [None, False]
    assert overrides["torch_autocast.enabled"] == [None, True]
    assert overrides["torch_autocast.dtype"] == [None, "bfloat16"]
    assert "# mixed precision: autocast-bf16 (BatchNorm model: DeepSpeed's bf16 mode would " \
        "cast BatchNorm's weights but not its running statistics" in out
    assert not (tmp_path / "torch_extensions").exists(), "DeepSpeed JIT-built an op"


@needs_deepspeed
@pytest.mark.distributed
def test_deepspeed_vit_trains_in_deepspeeds_own_bf16(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "deepspeed", "--model", "vit",
                                      "--precision", "bf16", *SMALL)
    assert_trained(code, out, err, report, "deepspeed", precision="bf16")
    assert report["mixed_precision"] == "deepspeed-bf16"
    assert report["fast_path"]["autocast"] is None
    assert report["ds_config_overrides"]["bf16.enabled"] == [None, True]
    assert "torch_autocast.enabled" not in report["ds_config_overrides"]


@pytest.mark.distributed
@pytest.mark.skipif(not HAVE_CC, reason="torch.compile's inductor backend builds C++ kernels "
                    "on the CPU and this machine has no C compiler (cc/gcc)")
def test_compile_reports_its_time_apart_from_the_throughput(tmp_path):
    code, out, err, report = torchrun(tmp_path, "--example", "ddp", "--model", "cnn",
                                      "--compile", *SMALL)
    assert_trained(code, out, err, report, "ddp")
    fast = report["fast_path"]
    assert fast["compile"] is True and fast["compile_s"] > 0
    first, second = report["epochs"]
    assert first["compile_s"] == fast["compile_s"] and second["compile_s"] is None
    assert first["compile_s"] < first["time_s"]
    # the compiling step is left out: the rest of epoch 1 ran faster than the whole of it
    assert first["throughput"] > first["samples"] / first["time_s"]
    assert f"Time={first['time_s']:.2f}s (compile {first['compile_s']:.2f}s)" in out
