"""One training loop for the DDP, FSDP and DeepSpeed examples, with a small strategy for each.

The loop (epochs, DistributedSampler.set_epoch, timing, metrics averaged over ranks, validation,
early stop, the JSON record, the consistency check) is written once in ``Trainer``.  What differs
between the three is small and lives in a ``Strategy``:

* how the model is wrapped and the optimizer made (``setup``),
* how a forward runs (autocast, or the wrapper's own casting) and a step is taken (``step``),
* whether the ranks' buffers stay equal by themselves (``syncs_buffers``),
* how to see the FULL parameters on every rank for the consistency check (``full_parameters``):
  DDP holds them already; FSDP all-gathers each sharded DTensor; ZeRO-3 gathers each partitioned
  parameter with ``deepspeed.zero.GatheredParameters``.

FSDP here is FSDP2 (``torch.distributed.fsdp.fully_shard``): it runs on CPU with gloo in torch
2.13 (checked by the host tests), shards per parameter as DTensors, and is the API PyTorch
develops; FSDP1 (``FullyShardedDataParallel``) is deprecated.  See ``FSDPStrategy`` for how it
does mixed precision.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

import data as data_mod
import distenv
from distenv import DistEnv

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

OptimizerFactory = Callable[[Any], torch.optim.Optimizer]


class RunFailed(Exception):
    """Training ran but did not hold up (non-finite loss, ranks disagree): exit status 1."""


def resolve_precision(requested: str, device: torch.device) -> str:
    """auto: bf16 on a GPU that has it (A100, H100, GH200, MI250X), else fp16 (V100); fp32 on
    CPU."""
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


@dataclass
class RunContext:
    env: DistEnv
    device: torch.device
    backend: str
    precision: str

    @property
    def leader(self) -> bool:
        return self.env.rank == 0


# ----------------------------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------------------------


class Strategy:
    """The parts of training that depend on how the model is distributed."""

    name = "base"
    syncs_buffers = True
    uses_autocast = True

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.module: nn.Module = nn.Identity()
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scaler: Any = None
        self.accumulation = 1

    # -- set up -----------------------------------------------------------------------------
    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        raise NotImplementedError

    def core_module(self) -> nn.Module:
        """The user's model inside the wrapper (for its buffers and parameter names)."""
        return self.module

    # -- one step ---------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager:
        precision = self.ctx.precision
        if not self.uses_autocast or precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=DTYPES[precision])

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.module(inputs)

    def step(self, loss: torch.Tensor) -> None:
        assert self.optimizer is not None
        if self.scaler is not None:  # fp16: scale the loss so small gradients do not underflow
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def train(self, mode: bool) -> None:
        self.module.train(mode)

    # -- after training ---------------------------------------------------------------------
    def full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of every parameter, on every rank; collective for sharded ones."""
        yield from self.core_module().named_parameters()

    def describe(self) -> dict[str, Any]:
        return {}


class DDPStrategy(Strategy):
    """DistributedDataParallel: replicated model, gradients all-reduced in buckets during
    backward."""

    name = "ddp"

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        from torch.nn.parallel import DistributedDataParallel

        device = self.ctx.device
        model.to(device)
        ids = [device.index] if device.type == "cuda" else None
        self.module = DistributedDataParallel(model, device_ids=ids)
        self.optimizer = make_optimizer(self.module.parameters())
        if self.ctx.precision == "fp16":
            self.scaler = torch.amp.GradScaler(device.type)

    def core_module(self) -> nn.Module:
        return self.module.module


class FSDPStrategy(Strategy):
    """FSDP2 ``fully_shard``: each block, then the root, sharded over all ranks (FULL_SHARD).

    Mixed precision: FSDP's own ``MixedPrecisionPolicy`` (parameters all-gathered in bf16/fp16,
    gradients reduced in fp32: half the all-gather traffic) for models without BatchNorm.  That
    policy casts every parameter, BatchNorm's included, while BatchNorm's running statistics
    stay fp32, which ``batch_norm`` rejects; FSDP1's MixedPrecision kept BatchNorm in fp32 for
    that reason.  Models with BatchNorm therefore keep fp32 shards and compute under autocast,
    as DDP does.
    """

    name = "fsdp"
    syncs_buffers = False

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        device = self.ctx.device
        model.to(device)
        mesh = init_device_mesh(device.type, (self.ctx.env.world_size,))
        precision = self.ctx.precision
        has_batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                            for m in model.modules())
        self.uses_autocast = precision != "fp32" and has_batchnorm
        if precision == "fp32" or has_batchnorm:
            policy = MixedPrecisionPolicy()
            self.mixed_precision = "autocast" if self.uses_autocast else "none"
        else:
            policy = MixedPrecisionPolicy(param_dtype=DTYPES[precision],
                                          reduce_dtype=torch.float32)
            self.mixed_precision = "MixedPrecisionPolicy"
        units = list(getattr(model, "fsdp_units", []))
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        self.units = len(units) + 1
        self.module = model
        self.optimizer = make_optimizer(model.parameters())
        if precision == "fp16":
            # ShardedGradScaler all-reduces "found inf" so every rank skips the same steps.
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            self.scaler = ShardedGradScaler(device.type)

    def full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self.module.named_parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            yield name, full

    def describe(self) -> dict[str, Any]:
        return {"fsdp_api": "fully_shard (FSDP2)", "fsdp_units": self.units,
                "sharding": "FULL_SHARD", "fsdp_mixed_precision": self.mixed_precision}


class DeepSpeedStrategy(Strategy):
    """``deepspeed.initialize`` from a config dict; ZeRO stage and batch come from the config."""

    name = "deepspeed"
    syncs_buffers = False
    uses_autocast = False  # DeepSpeed casts the model itself (fp16/bf16 sections of the config)

    def __init__(self, ctx: RunContext, config: dict[str, Any], config_path: str,
                 changes: dict[str, Any], shm_comm: bool) -> None:
        super().__init__(ctx)
        self.config = config
        self.config_path = config_path
        self.changes = changes
        self.shm_comm = shm_comm
        self.accumulation = int(config.get("gradient_accumulation_steps", 1))
        self.stage = int(config.get("zero_optimization", {}).get("stage", 0))
        self.input_dtype = DTYPES.get(ctx.precision)

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        import deepspeed

        if not self.shm_comm:
            disable_shm_comm_op()
        client_optimizer = None if self.config.get("optimizer") else \
            make_optimizer(model.parameters())
        engine, optimizer, _loader, _scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), optimizer=client_optimizer,
            config=self.config)
        self.module = engine
        self.optimizer = optimizer
        self.deepspeed_version = deepspeed.__version__

    def core_module(self) -> nn.Module:
        return self.module.module

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.input_dtype is not None:
            inputs = inputs.to(self.input_dtype)
        return self.module(inputs)

    def step(self, loss: torch.Tensor) -> None:
        self.module.backward(loss)
        self.module.step()  # steps the optimizer at the accumulation boundary, zeroes gradients

    def full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.stage < 3:
            yield from self.core_module().named_parameters()
            return
        import deepspeed

        for name, param in self.core_module().named_parameters():
            # One parameter at a time: never more than one full tensor in memory.
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                yield name, param.data

    def partitioned(self) -> tuple[int, int]:
        """ZeRO-3: (parameter tensors kept only as shards between uses, "persistent" ones).

        Parameters at or below ``stage3_param_persistence_threshold`` elements stay whole on
        every rank during training (fewer tiny all-gathers) and are sharded only for the
        optimizer; the rest are all-gathered for each forward and backward and freed after.
        """
        params = list(self.core_module().parameters())
        persistent = sum(1 for p in params if getattr(p, "ds_persist", False))
        return len(params) - persistent, persistent

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "zero_stage": self.stage, "ds_config": self.config_path,
            "ds_config_overrides": self.changes,
            "gradient_accumulation_steps": self.accumulation,
            "deepspeed_version": getattr(self, "deepspeed_version", None),
            "ds_shm_comm_op": self.shm_comm,
        }
        if self.stage == 3:
            sharded, persistent = self.partitioned()
            info["zero3_partitioned_params"] = sharded
            info["zero3_persistent_params"] = persistent
        return info


def disable_shm_comm_op() -> None:
    """Stop DeepSpeed's CPU accelerator from JIT-compiling its ``deepspeed_shm_comm`` op.

    DeepSpeed (0.19.8, ``deepspeed/comm/torch.py``) builds that op whenever it wraps a process
    group on the CPU accelerator, unless the op was compiled at install time
    (``DS_BUILD_SHM_COMM=1``): g++ and ninja, about 50 s, and a crash ("Error building extension
    'deepspeed_shm_comm'") where there is no compiler, as in the CPU image.  The op only serves
    ``inference_all_reduce`` (tensor-parallel inference); training never calls it.  DeepSpeed
    skips the build when the op is marked incompatible in ``deepspeed.ops.__compatible_ops__``
    (probed once, then cached in the module, so the mark holds for the run).
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


@dataclass
class TrainSettings:
    epochs: int
    global_batch: int
    target_accuracy: Optional[float]
    seed: int
    num_workers: int
    out: Path


@dataclass
class EpochResult:
    epoch: int
    time_s: float
    samples: int
    throughput: float
    loss: float
    accuracy: float
    val_loss: float
    val_accuracy: float
    val_time_s: float

    def as_dict(self) -> dict[str, Any]:
        return {key: (round(value, 6) if isinstance(value, float) else value)
                for key, value in self.__dict__.items()}


@dataclass
class Trainer:
    """Runs the epochs with any Strategy and keeps the report that rank 0 writes."""

    ctx: RunContext
    strategy: Strategy
    settings: TrainSettings
    train_set: data_mod.ImageTensors
    val_set: data_mod.ImageTensors
    report: dict[str, Any]
    say: Callable[[str], None]
    epochs: list[EpochResult] = field(default_factory=list)

    @property
    def micro_batch(self) -> int:
        return self.settings.global_batch // (self.ctx.env.world_size * self.strategy.accumulation)

    def loaders(self) -> tuple[DataLoader, DistributedSampler, DataLoader, torch.Tensor]:
        env = self.ctx.env
        common: dict[str, Any] = {
            "batch_size": self.micro_batch, "collate_fn": data_mod.collate_batch,
            "num_workers": self.settings.num_workers,
            "pin_memory": self.ctx.device.type == "cuda",
            "persistent_workers": self.settings.num_workers > 0}
        sampler = DistributedSampler(self.train_set, num_replicas=env.world_size, rank=env.rank,
                                     shuffle=True, seed=self.settings.seed, drop_last=True)
        train = DataLoader(self.train_set, sampler=sampler, drop_last=True, **common)
        shard = data_mod.ShardSampler(len(self.val_set), env.rank, env.world_size)
        val = DataLoader(self.val_set, sampler=shard, drop_last=False, **common)
        return train, sampler, val, shard.weights()

    def steps_per_epoch(self, loader: DataLoader) -> int:
        """Micro-steps per rank: whole optimizer steps only (accumulation boundaries)."""
        return (len(loader) // self.strategy.accumulation) * self.strategy.accumulation

    def train_epoch(self, loader: DataLoader, steps: int) -> tuple[torch.Tensor, float]:
        device = self.ctx.device
        self.strategy.train(True)
        stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
        distenv.sync(device)
        start = time.perf_counter()
        for index, (inputs, labels) in enumerate(loader):
            if index >= steps:
                break
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            logits = self.strategy.forward(inputs)
            loss = nn.functional.cross_entropy(logits.float(), labels)
            self.strategy.step(loss)
            with torch.no_grad():
                count = labels.shape[0]
                stats[0] += loss.detach().double() * count
                stats[1] += (logits.argmax(dim=1) == labels).sum()
                stats[2] += count
        distenv.sync(device)
        return distenv.all_reduce_sum(stats), time.perf_counter() - start

    def evaluate(self, loader: DataLoader, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        device = self.ctx.device
        self.strategy.train(False)
        stats = torch.zeros(3, dtype=torch.float64, device=device)
        start = time.perf_counter()
        with torch.no_grad():
            for (inputs, labels), weight in zip(loader, weights.split(self.micro_batch),
                                                 strict=True):
                inputs = inputs.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                weight = weight.to(device=device, dtype=torch.float64)
                logits = self.strategy.forward(inputs)
                losses = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
                stats[0] += (losses.double() * weight).sum()
                stats[1] += ((logits.argmax(dim=1) == labels).double() * weight).sum()
                stats[2] += weight.sum()
        distenv.sync(device)
        return distenv.all_reduce_sum(stats), time.perf_counter() - start

    def run(self) -> None:
        settings = self.settings
        train_loader, sampler, val_loader, weights = self.loaders()
        steps = self.steps_per_epoch(train_loader)
        if steps < 1:
            raise ValueError(f"{len(self.train_set)} training samples make no full step of "
                             f"global batch {settings.global_batch}")
        started = time.perf_counter()
        for epoch in range(settings.epochs):
            sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
            train_stats, train_s = self.train_epoch(train_loader, steps)
            if not self.strategy.syncs_buffers:
                distenv.average_buffers(self.strategy.core_module())
            val_stats, val_s = self.evaluate(val_loader, weights)
            loss_sum, correct, count = (float(v) for v in train_stats)
            v_loss, v_correct, v_count = (float(v) for v in val_stats)
            result = EpochResult(
                epoch=epoch + 1, time_s=train_s, samples=int(count),
                throughput=count / train_s if train_s > 0 else 0.0,
                loss=loss_sum / count, accuracy=correct / count,
                val_loss=v_loss / v_count, val_accuracy=v_correct / v_count, val_time_s=val_s)
            self.epochs.append(result)
            self.say(f"Epoch {result.epoch}/{settings.epochs}: Time={train_s:.2f}s, "
                     f"Loss={result.loss:.4f}, Accuracy={result.accuracy:.4f}, "
                     f"Val Loss={result.val_loss:.4f}, Val Accuracy={result.val_accuracy:.4f}, "
                     f"Throughput={result.throughput:.1f} samples/s")
            self.report["epochs"].append(result.as_dict())
            if self.ctx.leader:
                distenv.write_json(settings.out / "train.json", self.report)
            dist.barrier()
            if not math.isfinite(result.loss):
                raise RunFailed(f"training loss is {result.loss} at epoch {result.epoch}")
            if settings.target_accuracy is not None and \
                    result.val_accuracy >= settings.target_accuracy:
                self.say(f"Target validation accuracy {settings.target_accuracy} reached at "
                         f"epoch {result.epoch}: stopping early")
                break
        total_s = time.perf_counter() - started
        self.summarize(total_s)

    def summarize(self, total_s: float) -> None:
        first, last = self.epochs[0], self.epochs[-1]
        samples = sum(e.samples for e in self.epochs)
        train_s = sum(e.time_s for e in self.epochs)
        target = self.settings.target_accuracy
        self.report.update({
            "epochs_run": len(self.epochs),
            "final": {"loss": last.loss, "accuracy": last.accuracy, "val_loss": last.val_loss,
                      "val_accuracy": last.val_accuracy},
            "loss_first": first.loss, "loss_last": last.loss,
            "samples_trained": samples, "train_time_s": round(train_s, 6),
            "total_time_s": round(total_s, 6),
            "throughput": samples / train_s if train_s > 0 else 0.0,
            "reached_target": None if target is None else last.val_accuracy >= target,
            "early_stopped": len(self.epochs) < self.settings.epochs,
        })

    def check_consistency(self) -> dict[str, Any]:
        """Fingerprint the full parameters (and buffers) on every rank and compare them."""
        strategy = self.strategy
        params = distenv.Fingerprint().add_all(strategy.full_parameters())
        buffers = distenv.Fingerprint().add_all(strategy.core_module().named_buffers())
        same_params, digests = distenv.compare_across_ranks(params.hexdigest())
        same_buffers, _ = distenv.compare_across_ranks(buffers.hexdigest())
        method = {"ddp": "module parameters on each rank",
                  "fsdp": "DTensor.full_tensor() of every sharded parameter",
                  "deepspeed": "deepspeed.zero.GatheredParameters per parameter"
                  if getattr(strategy, "stage", 0) == 3 else "module parameters on each rank"}
        return {
            "params_consistent": same_params, "buffers_consistent": same_buffers,
            "param_sha256": digests[0], "param_sha256_per_rank": digests,
            "param_checksum": params.checksum, "param_tensors": params.tensors,
            "param_elements": params.elements, "method": method.get(strategy.name, "")}
