"""One training loop for the DDP, FSDP and DeepSpeed examples, with a small strategy for each.

The loop (epochs, reshuffling, timing, metrics averaged over ranks, validation, early stop, the
JSON record, the consistency check) is written once in ``Trainer``.  What differs between the
three is small and lives in a ``Strategy``:

* how the model is wrapped, compiled and the optimizer made (``setup``),
* how a forward runs (autocast, or the wrapper's own casting) and a step is taken (``step``),
* whether the ranks' buffers stay equal by themselves (``syncs_buffers``),
* how to see the FULL parameters on every rank for the consistency check (``full_parameters``):
  DDP holds them already; FSDP all-gathers each sharded DTensor; ZeRO-3 gathers each partitioned
  parameter with ``deepspeed.zero.GatheredParameters``.

FSDP here is FSDP2 (``torch.distributed.fsdp.fully_shard``): it runs on CPU with gloo in torch
2.13 (checked by the host tests), shards per parameter as DTensors, and is the API PyTorch
develops; FSDP1 (``FullyShardedDataParallel``) is deprecated.  See ``FSDPStrategy`` for how it
does mixed precision, and ``dsconfig`` for DeepSpeed's.

The fast path (``train.py`` decides what is on; every piece also runs on the CPU, so the host
tests cover it):

* channels_last: every input batch in ``torch.channels_last`` (NHWC), the layout tensor cores'
  convolutions want, and for DDP the model's 4-d weights too.  FSDP2 and DeepSpeed refuse
  non-contiguous parameters (torch 2.13: "FSDP does not support non-contiguous parameters yet";
  DeepSpeed 0.19.8's initial broadcast views each parameter as bytes, which needs a contiguous
  last dimension), so their weights stay NCHW and cuDNN takes the layout from the input.
* device-resident data (``data.DeviceBatches``): no DataLoader, no copy per step.
* no host synchronisation per step: the loss and the correct count are summed on the device
  and read once per epoch (the non-finite-loss check too).  What remains per step is the
  wrappers' own: an fp16 GradScaler reads its inf check, DeepSpeed may read its overflow flag.
* ``--compile``: ``torch.compile`` as each wrapper's documentation asks: DDP compiles the DDP
  module (dynamo's DDPOptimizer splits the graph at the gradient buckets, so the all-reduce still
  overlaps backward); FSDP2 compiles each unit BEFORE ``fully_shard`` (torchtitan's recipe: the
  FSDP hooks stay outside the compiled code; compiling the root after ``fully_shard`` breaks the
  graph at every hook inside the loop over the blocks and dynamo then skips the whole forward);
  DeepSpeed calls ``engine.compile()``.  Static shapes (``dynamic=False``): the batch never
  changes in training, and the blocks of one class but different widths would otherwise turn
  on dynamic shapes, where inductor 2.13 fails on FSDP's ResNet ("ValueRangeError").
  Compilation happens in the first training step; epoch 1 reports that step's time as
  ``compile_s`` and its throughput leaves that step out.  Validation runs eager
  (``torch.compiler.set_stance("force_eager")``): no eval-mode graphs, no recompile for the
  shorter last batch, nothing compiled outside the first step.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn

import data as data_mod
import distenv
import dsconfig
from distenv import DistEnv
from trainreport import Final, TrainReport

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MIB = 2**20

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


def per_device_label(device_type: str) -> str:
    """What ``throughput_per_device`` is per: every rank drives one GPU, or is one CPU rank."""
    return "per GPU" if device_type == "cuda" else "per rank"


def has_batchnorm(model: nn.Module) -> bool:
    """Whether any layer keeps running statistics, which the half-precision wrappers' casts (of
    parameters, not buffers) would leave in fp32 beside half-precision weights."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@dataclass
class RunContext:
    """One run's settings, which the strategy and the trainer share."""

    env: DistEnv
    device: torch.device
    precision: str  # what the forward computes in: fp32, bf16 or fp16
    channels_last: bool
    compile: bool
    epochs: int
    global_batch: int
    target_accuracy: Optional[float]
    seed: int
    num_workers: int
    out: Path
    data_on_device: bool


# ----------------------------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------------------------


class Strategy:
    """The parts of training that depend on how the model is distributed."""

    syncs_buffers = True
    #: How ``full_parameters`` sees the full model, for the consistency record.
    consistency_method = "module parameters on each rank"
    channels_last_weights = True  # whether the wrapper takes channels_last parameters

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.module: nn.Module = nn.Identity()
        self.runner: Callable[[torch.Tensor], torch.Tensor] = self.module  # module or compiled
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scaler: Any = None
        self.accumulation = 1
        # What the report says about mixed precision (one vocabulary for all three examples):
        # "none", "autocast-<dtype>", "fsdp-policy-<dtype>" or "deepspeed-<dtype>".
        self.mixed_precision = "none"
        self.mixed_precision_reason = "fp32"
        self.autocast_dtype: Optional[str] = None  # the dtype of torch.autocast, whoever opens it
        self.compile_note: Optional[str] = None

    # -- set up -----------------------------------------------------------------------------
    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        raise NotImplementedError

    def place(self, model: nn.Module) -> None:
        wanted = self.ctx.channels_last and self.channels_last_weights
        layout = torch.channels_last if wanted else torch.preserve_format
        model.to(self.ctx.device, memory_format=layout)

    def use_autocast(self, reason: str) -> None:
        precision = self.ctx.precision
        if precision == "fp32":
            return
        self.autocast_dtype = precision
        self.mixed_precision = f"autocast-{precision}"
        self.mixed_precision_reason = reason

    def core_module(self) -> nn.Module:
        """The user's model inside the wrapper (for its buffers and parameter names)."""
        return self.module

    # -- one step ---------------------------------------------------------------------------
    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.autocast_dtype is None:
            return self.runner(inputs)
        with torch.autocast(device_type=self.ctx.device.type, dtype=DTYPES[self.autocast_dtype]):
            return self.runner(inputs)

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

    # -- after training ---------------------------------------------------------------------
    def full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of every parameter, on every rank; collective for sharded ones."""
        yield from self.core_module().named_parameters()

    def describe(self) -> dict[str, Any]:
        return {"mixed_precision": self.mixed_precision,
                "mixed_precision_reason": self.mixed_precision_reason}


class DDPStrategy(Strategy):
    """DistributedDataParallel: replicated model, gradients all-reduced in buckets during
    backward."""

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        from torch.nn.parallel import DistributedDataParallel

        device = self.ctx.device
        self.place(model)
        ids = [device.index] if device.type == "cuda" else None
        self.module = self.runner = DistributedDataParallel(model, device_ids=ids)
        if self.ctx.compile:
            self.runner = compile_module(self.module)
        self.optimizer = make_optimizer(self.module.parameters())
        self.use_autocast("torch.autocast around the DDP forward")
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

    syncs_buffers = False
    consistency_method = "DTensor.full_tensor() of every sharded parameter"
    channels_last_weights = False

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        device = self.ctx.device
        self.place(model)
        mesh = init_device_mesh(device.type, (self.ctx.env.world_size,))
        precision = self.ctx.precision
        policy = MixedPrecisionPolicy()
        if has_batchnorm(model):
            self.use_autocast("BatchNorm model: FSDP's MixedPrecisionPolicy would cast "
                              "BatchNorm's weights but not its running statistics")
        elif precision != "fp32":
            policy = MixedPrecisionPolicy(param_dtype=DTYPES[precision],
                                          reduce_dtype=torch.float32)
            self.mixed_precision = f"fsdp-policy-{precision}"
            self.mixed_precision_reason = (f"parameters all-gathered in {precision}, gradients "
                                           "reduced in fp32")
        units = list(getattr(model, "fsdp_units", []))
        if self.ctx.compile:  # each unit before fully_shard; the root too when it is the only one
            units = compile_units(model, units)
            if not units:
                model = compile_module(model)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        self.units = len(units) + 1
        self.module = self.runner = model
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
        return {**super().describe(), "fsdp_api": "fully_shard (FSDP2)",
                "fsdp_units": self.units, "sharding": "FULL_SHARD"}


class DeepSpeedStrategy(Strategy):
    """``deepspeed.initialize`` from a config dict; ZeRO stage, batch and precision come from the
    config, which ``dsconfig.fit_to_job`` wrote from the ``dsconfig.PrecisionPlan``."""

    syncs_buffers = False
    channels_last_weights = False

    def __init__(self, ctx: RunContext, config: dict[str, Any], config_path: str,
                 changes: dict[str, Any], plan: dsconfig.PrecisionPlan, shm_comm: bool) -> None:
        super().__init__(ctx)
        self.config = config
        self.config_path = config_path
        self.changes = changes
        self.shm_comm = shm_comm
        self.accumulation = int(config.get("gradient_accumulation_steps", 1))
        self.stage = dsconfig.zero_stage(config)
        if self.stage == 3:
            self.consistency_method = "deepspeed.zero.GatheredParameters per parameter"
        # DeepSpeed's own fp16/bf16 mode casts the parameters, and the inputs must match them;
        # under its torch_autocast section the engine opens the autocast itself (``forward``).
        self.input_dtype = DTYPES.get(plan.engine)
        self.autocast_dtype = plan.autocast
        self.mixed_precision = plan.mixed_precision
        self.mixed_precision_reason = plan.reason

    def setup(self, model: nn.Module, make_optimizer: OptimizerFactory) -> None:
        import deepspeed

        if not self.shm_comm:
            disable_shm_comm_op()
        # DeepSpeed's sanity check insists on LOCAL_RANK, which a lone process does not have.
        os.environ.setdefault("LOCAL_RANK", str(self.ctx.env.local_rank))
        self.place(model)
        client_optimizer = None if self.config.get("optimizer") else \
            make_optimizer(model.parameters())
        engine, optimizer, _loader, _scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), optimizer=client_optimizer,
            config=self.config)
        self.module = self.runner = engine
        self.optimizer = optimizer
        self.deepspeed_version = deepspeed.__version__
        if self.ctx.compile:
            self.compile_engine()

    def compile_engine(self) -> None:
        """``engine.compile()``, DeepSpeed's way (it compiles the inner module in place, its ZeRO
        hooks kept working); a DeepSpeed without it trains uncompiled, with a note.

        Under ZeRO-3 dynamo also traces DeepSpeed's per-submodule parameter hooks and recompiles
        them per submodule type until its recompile limit (8), then runs them eagerly (a warning
        on stderr; the run trains).  DeepSpeed's own answer, DeepCompile, is not used here.
        """
        compile_engine = getattr(self.module, "compile", None)
        if compile_engine is None:
            self.compile_note = (f"--compile skipped: DeepSpeed {self.deepspeed_version} has no "
                                 "engine.compile()")
            return
        compile_engine(compile_kwargs={"dynamic": False})

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

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            **super().describe(),
            "zero_stage": self.stage, "ds_config": self.config_path,
            "ds_config_overrides": self.changes,
            "gradient_accumulation_steps": self.accumulation,
            "deepspeed_version": getattr(self, "deepspeed_version", None),
            "ds_shm_comm_op": self.shm_comm,
        }
        if self.stage == 3:
            # Parameters at or below ``stage3_param_persistence_threshold`` elements stay whole
            # on every rank during training (fewer tiny all-gathers) and are sharded only for
            # the optimizer; the rest are all-gathered for each forward and backward.
            params = list(self.core_module().parameters())
            persistent = sum(1 for p in params if getattr(p, "ds_persist", False))
            info["zero3_partitioned_params"] = len(params) - persistent
            info["zero3_persistent_params"] = persistent
        return info


def compile_module(module: nn.Module) -> nn.Module:
    """``torch.compile`` with static shapes (see the module docstring for why)."""
    return torch.compile(module, dynamic=False)


def compile_units(model: nn.Module, units: list[nn.Module]) -> list[nn.Module]:
    """Put ``compile_module(unit)`` in each unit's place inside ``model``; the compiled units.

    FSDP2 then shards the compiled wrappers, so its hooks run around the compiled code rather
    than inside it.  Parameter names gain ``_orig_mod.`` (the same on every rank).
    """
    compiled: dict[int, nn.Module] = {}
    wanted = {id(unit) for unit in units}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in wanted:
                compiled[id(child)] = compile_module(child)
                parent.register_module(name, compiled[id(child)])
    return [compiled[id(unit)] for unit in units]


def eager() -> contextlib.AbstractContextManager:
    """Run whatever was compiled eagerly in here (validation), where torch can."""
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    return set_stance("force_eager") if set_stance else contextlib.nullcontext()


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
class EpochResult:
    """One epoch as printed and recorded.  ``throughput`` (global samples/s) leaves out the first
    step when ``compile_s`` is set (that step compiled the model); ``throughput_per_device`` is it
    divided by the ranks, one GPU (or one CPU rank) each.  Memory peaks are the max over ranks
    since the epoch began, in MiB: the GPU allocator's (None on the CPU) and the process's peak
    resident set (``ru_maxrss``, which never resets: the peak since the process started)."""

    epoch: int
    time_s: float
    samples: int
    throughput: float
    throughput_per_device: float
    loss: float
    accuracy: float
    val_loss: float
    val_accuracy: float
    val_time_s: float
    compile_s: Optional[float]
    max_memory_allocated_mb: Optional[float]
    max_memory_reserved_mb: Optional[float]
    peak_rss_mb: float

    def as_dict(self) -> dict[str, Any]:
        return {key: (round(value, 6) if isinstance(value, float) else value)
                for key, value in self.__dict__.items()}


def peak_memory(device: torch.device) -> dict[str, Optional[float]]:
    """Peak memory of every rank, max over ranks, in MiB: one small all-reduce.

    On the GPU, ``max_memory_allocated`` (tensors) and ``max_memory_reserved`` (what the caching
    allocator holds, what ``nvidia-smi`` sees minus the context) since the last reset; on every
    device the process's peak RSS (Linux reports ``ru_maxrss`` in KiB).
    """
    values = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]
    if device.type == "cuda":
        values += [torch.cuda.max_memory_allocated(device) / MIB,
                   torch.cuda.max_memory_reserved(device) / MIB]
    peaks = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    found = peaks.tolist() + [None, None]  # the GPU's two are None on the CPU
    return dict(zip(("peak_rss_mb", "max_memory_allocated_mb", "max_memory_reserved_mb"), found))


@dataclass
class Trainer:
    """Runs the epochs with any Strategy and keeps the report that rank 0 writes."""

    ctx: RunContext
    strategy: Strategy
    train_set: data_mod.ImageTensors
    val_set: data_mod.ImageTensors
    report: TrainReport
    say: Callable[[str], None]
    epochs: list[EpochResult] = field(default_factory=list)
    logits_dtype: Optional[str] = None

    @property
    def micro_batch(self) -> int:
        return self.ctx.global_batch // (self.ctx.env.world_size * self.strategy.accumulation)

    def batches(self) -> tuple[data_mod.Batches, data_mod.Batches, torch.Tensor]:
        """(training batches, validation batches, validation weights), on the device."""
        ctx = self.ctx
        common: dict[str, Any] = {
            "rank": ctx.env.rank, "world_size": ctx.env.world_size, "micro_batch": self.micro_batch,
            "device": ctx.device, "resident": ctx.data_on_device, "num_workers": ctx.num_workers}
        train = data_mod.train_batches(self.train_set, seed=ctx.seed, **common)
        val, weights = data_mod.val_batches(self.val_set, **common)
        return train, val, weights

    def layout(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.ctx.channels_last:
            return inputs.contiguous(memory_format=torch.channels_last)
        return inputs

    def train_epoch(self, batches: data_mod.Batches, steps: int,
                    time_first_step: bool) -> tuple[torch.Tensor, float, Optional[float]]:
        """(summed loss, correct, count over ranks; seconds; first step's seconds if timed).

        Nothing here waits for the device per step: the sums stay on it until the epoch ends.
        ``time_first_step`` (epoch 1 under ``--compile``) syncs once after the first step, which
        is when compilation is over.
        """
        device = self.ctx.device
        strategy = self.strategy
        strategy.module.train(True)
        stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
        first_step_s: Optional[float] = None
        distenv.sync(device)
        start = time.perf_counter()
        for index, (inputs, labels) in enumerate(batches):
            if index >= steps:
                break
            logits = strategy.forward(self.layout(inputs))
            loss = nn.functional.cross_entropy(logits.float(), labels)
            strategy.step(loss)
            with torch.no_grad():
                count = labels.shape[0]
                stats[0] += loss.detach().double() * count
                stats[1] += (logits.argmax(dim=1) == labels).sum()
                stats[2] += count
            if index == 0:
                self.logits_dtype = str(logits.dtype).removeprefix("torch.")
                if time_first_step:
                    distenv.sync(device)
                    first_step_s = time.perf_counter() - start
        distenv.sync(device)
        return distenv.all_reduce_sum(stats), time.perf_counter() - start, first_step_s

    def evaluate(self, batches: data_mod.Batches,
                 weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        device = self.ctx.device
        self.strategy.module.train(False)
        stats = torch.zeros(3, dtype=torch.float64, device=device)
        start = time.perf_counter()
        with torch.no_grad(), eager():
            for (inputs, labels), weight in zip(batches, weights.split(self.micro_batch),
                                                 strict=True):
                logits = self.strategy.forward(self.layout(inputs))
                losses = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
                stats[0] += (losses.double() * weight).sum()
                stats[1] += ((logits.argmax(dim=1) == labels).double() * weight).sum()
                stats[2] += weight.sum()
        distenv.sync(device)
        return distenv.all_reduce_sum(stats), time.perf_counter() - start

    def throughput(self, samples: float, seconds: float, compile_s: list[float]) -> float:
        """Global samples/s, leaving out each compiling first micro-step (its time, and its
        samples over all ranks)."""
        timed_s = seconds - sum(compile_s)
        timed = samples - self.micro_batch * self.ctx.env.world_size * len(compile_s)
        return timed / timed_s if timed_s > 0 else 0.0

    def run(self) -> None:
        ctx = self.ctx
        world = ctx.env.world_size
        train_batches, val_batches, weights = self.batches()
        accumulation = self.strategy.accumulation
        steps = len(train_batches) // accumulation * accumulation  # whole optimizer steps only
        if steps < 1:
            raise ValueError(f"{len(self.train_set)} training samples make no full step of "
                             f"global batch {ctx.global_batch}")
        started = time.perf_counter()
        for epoch in range(ctx.epochs):
            train_batches.set_epoch(epoch)  # a different shuffle each epoch, the same on all ranks
            if ctx.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(ctx.device)
            train_stats, train_s, compile_s = self.train_epoch(
                train_batches, steps, time_first_step=ctx.compile and epoch == 0)
            if not self.strategy.syncs_buffers:
                distenv.average_buffers(self.strategy.core_module())
            val_stats, val_s = self.evaluate(val_batches, weights)
            memory = peak_memory(ctx.device)
            loss_sum, correct, count = train_stats.tolist()  # the epoch's one read of the sums
            v_loss, v_correct, v_count = val_stats.tolist()
            throughput = self.throughput(count, train_s, [] if compile_s is None else [compile_s])
            result = EpochResult(
                epoch=epoch + 1, time_s=train_s, samples=int(count), throughput=throughput,
                throughput_per_device=throughput / world,
                loss=loss_sum / count, accuracy=correct / count,
                val_loss=v_loss / v_count, val_accuracy=v_correct / v_count, val_time_s=val_s,
                compile_s=compile_s, **memory)
            self.epochs.append(result)
            if compile_s is not None:
                self.report.fast_path.compile_s = round(compile_s, 6)
            self.report.logits_dtype = self.logits_dtype
            self.say(self.format_epoch(result))
            self.report.epochs.append(result.as_dict())
            self.write_report()
            dist.barrier()
            if not math.isfinite(result.loss):
                raise RunFailed(f"training loss is {result.loss} at epoch {result.epoch}")
            if ctx.target_accuracy is not None and result.val_accuracy >= ctx.target_accuracy:
                self.say(f"Target validation accuracy {ctx.target_accuracy} reached at "
                         f"epoch {result.epoch}: stopping early")
                break
        self.summarize(time.perf_counter() - started)

    def format_epoch(self, result: EpochResult) -> str:
        compiled = "" if result.compile_s is None else f" (compile {result.compile_s:.2f}s)"
        if result.max_memory_allocated_mb is None:
            memory = f"Peak RSS={result.peak_rss_mb:.0f} MiB"
        else:
            memory = (f"Peak GPU memory={result.max_memory_allocated_mb:.0f} MiB allocated, "
                      f"{result.max_memory_reserved_mb:.0f} MiB reserved")
        return (f"Epoch {result.epoch}/{self.ctx.epochs}: Time={result.time_s:.2f}s"
                f"{compiled}, Loss={result.loss:.4f}, Accuracy={result.accuracy:.4f}, "
                f"Val Loss={result.val_loss:.4f}, Val Accuracy={result.val_accuracy:.4f}, "
                f"Throughput={result.throughput:.1f} samples/s "
                f"({result.throughput_per_device:.1f} "
                f"{per_device_label(self.ctx.device.type)}), {memory}")

    def summarize(self, total_s: float) -> None:
        first, last = self.epochs[0], self.epochs[-1]
        samples = sum(e.samples for e in self.epochs)
        train_s = sum(e.time_s for e in self.epochs)
        compiling = [e.compile_s for e in self.epochs if e.compile_s is not None]
        throughput = self.throughput(samples, train_s, compiling)
        target = self.ctx.target_accuracy
        self.report.update(
            epochs_run=len(self.epochs),
            final=Final(loss=last.loss, accuracy=last.accuracy, val_loss=last.val_loss,
                        val_accuracy=last.val_accuracy),
            loss_first=first.loss, loss_last=last.loss,
            samples_trained=samples, train_time_s=round(train_s, 6),
            total_time_s=round(total_s, 6), throughput=throughput,
            throughput_per_device=throughput / self.ctx.env.world_size,
            reached_target=None if target is None else last.val_accuracy >= target,
            early_stopped=len(self.epochs) < self.ctx.epochs)

    def write_report(self) -> None:
        """Rank 0 writes ``train.json`` (atomically), the whole typed shape every time."""
        if self.ctx.env.rank == 0:
            distenv.write_json(self.ctx.out / "train.json", self.report.as_dict())

    def check_consistency(self) -> dict[str, Any]:
        strategy = self.strategy
        params = distenv.Fingerprint().add_all(strategy.full_parameters())
        buffers = distenv.Fingerprint().add_all(strategy.core_module().named_buffers())
        same_params, digests = distenv.compare_across_ranks(params.hexdigest())
        same_buffers, _ = distenv.compare_across_ranks(buffers.hexdigest())
        return {
            "params_consistent": same_params, "buffers_consistent": same_buffers,
            "param_sha256": digests[0], "param_sha256_per_rank": digests,
            "param_checksum": params.checksum, "param_tensors": params.tensors,
            "param_elements": params.elements, "method": strategy.consistency_method}
