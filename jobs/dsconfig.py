"""Reading DeepSpeed configuration files the way DeepSpeed does, and fitting them to the job.

Published configs are not always strict JSON: LUMI's ``ds_config.json`` has trailing commas.
DeepSpeed itself reads configs with ``hjson`` (``deepspeed/runtime/config.py``), so such files
work under ``deepspeed`` but fail ``json.load``.  This reader accepts JSON with trailing commas
(removed outside strings, keeping every line and column where it was) and nothing looser.  It is
deliberately not hjson: hjson also takes a missing comma between members, unquoted strings and
comments, so a typo becomes a silently different config, and the reader would behave one way
where deepspeed (and with it hjson) is installed and another where it is not.  Standard library
only, so it is unit-tested without DeepSpeed.

A file it cannot read gives one line naming the file, the line and column, and the problem.
``fit_to_job`` then makes the batch settings consistent with ``--batch-size`` and the world
size, since DeepSpeed refuses to start when ``train_batch_size`` differs from ``micro_batch x
grad_accum x world_size``.

Mixed precision (``plan_precision``), decided here because the obvious choices fail:

* DeepSpeed's own ``bf16`` / ``fp16`` modes cast every PARAMETER to the half type but keep the
  buffers fp32 (``_cast_module_mixed_precision`` in 0.19.8), so a BatchNorm layer gets bf16
  weights and fp32 running statistics, and the first forward fails ("Expected running_mean to
  have type BFloat16 but got Float" on CUDA, "expected scalar type BFloat16 but found Float" on
  the CPU).  Models without BatchNorm (the ViT) keep DeepSpeed's own mode.
* Models with BatchNorm keep an fp32 engine (the bf16/fp16 section is written disabled, which
  shows in ``ds_config_overrides``) and compute under DeepSpeed's ``torch_autocast`` section:
  the engine enters ``torch.autocast`` itself around its forward, reduces the Linear/Conv
  gradients in the autocast dtype, and for fp16 adds a ``torch.amp.GradScaler`` (every ZeRO
  stage in 0.19.8), so fp16 keeps its loss scaling.  A ``torch.autocast`` opened by the caller
  around the engine does NOT work: the engine's forward (``autocast_if_enabled``) switches an
  enclosing CUDA autocast OFF when the config has no ``torch_autocast`` section, so the GPU would
  silently train in fp32 (on the CPU the check looks at CUDA autocast only, so a CPU test would
  pass while the GPU run was fp32).
* On the CPU, bf16 takes exactly these paths (DeepSpeed's bf16 mode and its autocast both run on
  the CPU accelerator), so ``--precision bf16`` is honoured there and the host tests exercise the
  GPU's dtype paths.  Only DeepSpeed's own fp16 MODE is turned into fp32 on the CPU: the CPU
  accelerator accepts fp16 only where oneDNN has fp16 kernels for the processor, so the same run
  would pass on one machine and be refused on the next.  ``auto`` means fp32 on the CPU, as for
  the other examples.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ZERO_STAGES = (0, 1, 2, 3)
HALF_SECTIONS = ("fp16", "bf16")
#: DeepSpeed's names of the autocast dtypes (``torch_autocast.dtype``), and the spellings of
#: them a config may use (DeepSpeed's DtypeEnum).
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
AUTOCAST_NAMES = {"bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16",
                  "float16": "fp16", "fp16": "fp16", "half": "fp16", "torch.float16": "fp16"}


class DsConfigError(Exception):
    """A DeepSpeed config that cannot be read or used; the message names the file."""


#: A JSON string (kept as it is; an unclosed one runs to the end), or a comma whose next
#: non-blank character closes an object or an array (the trailing comma to remove).
_STRING_OR_TRAILING_COMMA = re.compile(r'("(?:\\.|[^"\\])*"?)|,(?=[ \t\r\n]*[}\]])', re.DOTALL)


def strip_trailing_commas(text: str) -> str:
    """Remove commas that directly precede ``}`` or ``]`` (whitespace between), outside strings.

    Each comma becomes a space, so every later line and column stays where it was.
    """
    return _STRING_OR_TRAILING_COMMA.sub(lambda match: match.group(1) or " ", text)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a DeepSpeed config file; DsConfigError with a one-line message otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise DsConfigError(f"{path}: no such DeepSpeed config file") from err
    except (OSError, UnicodeDecodeError) as err:
        raise DsConfigError(f"{path}: cannot read ({err})") from err
    try:
        config = json.loads(strip_trailing_commas(text))
    except json.JSONDecodeError as err:
        raise DsConfigError(f"{path}: line {err.lineno} column {err.colno}: {err.msg} "
                            "(not valid JSON, even allowing trailing commas)") from err
    if not isinstance(config, dict):
        raise DsConfigError(f"{path}: expected a JSON object {{...}} at the top level, found "
                            f"{type(config).__name__}")
    check_config(config, str(path))
    return config


def _section(config: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise DsConfigError(f"{source}: {key!r} must be an object {{...}}, found "
                            f"{type(value).__name__}")
    return value


def check_config(config: dict[str, Any], source: str) -> None:
    """The checks that matter before DeepSpeed starts, with the key named in the message."""
    zero = _section(config, "zero_optimization", source)
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise DsConfigError(f"{source}: zero_optimization.stage must be one of 0, 1, 2, 3, found "
                            f"{stage!r}")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise DsConfigError(f"{source}: {key} must be a positive integer, found {value!r}")
    optimizer = _section(config, "optimizer", source)
    if optimizer and not isinstance(optimizer.get("type"), str):
        raise DsConfigError(f"{source}: optimizer.type must be a string such as \"Adam\"")
    if "params" in optimizer and not isinstance(optimizer["params"], dict):
        raise DsConfigError(f"{source}: optimizer.params must be an object {{...}}")
    for key in (*HALF_SECTIONS, "torch_autocast"):
        _section(config, key, source)
    autocast = config.get("torch_autocast", {})
    if autocast.get("enabled") and str(autocast.get("dtype", "float16")) not in AUTOCAST_NAMES:
        raise DsConfigError(f"{source}: torch_autocast.dtype must be bfloat16 or float16, found "
                            f"{autocast.get('dtype')!r}")


def zero_stage(config: dict[str, Any]) -> int:
    return int(config.get("zero_optimization", {}).get("stage", 0))


@dataclass(frozen=True)
class PrecisionPlan:
    """How a DeepSpeed job computes: what it asked for, what the engine does, and why.

    ``asked``: the precision the job wants (fp32, bf16, fp16); ``engine``: the precision of
    DeepSpeed's own mode (the fp16/bf16 section enabled, or fp32); ``autocast``: the dtype of the
    config's ``torch_autocast`` section, or None; ``reason``: why, for the header.
    """

    asked: str
    engine: str
    autocast: Optional[str]
    reason: str

    @property
    def compute(self) -> str:
        """The precision the forward computes in: what the report calls ``precision``."""
        return self.autocast or self.engine

    @property
    def mixed_precision(self) -> str:
        """``deepspeed-bf16``, ``autocast-bf16`` (or fp16), or ``none``."""
        if self.autocast:
            return f"autocast-{self.autocast}"
        return "none" if self.engine == "fp32" else f"deepspeed-{self.engine}"


def plan_precision(config: dict[str, Any], requested: Optional[str], *, on_cpu: bool,
                   gpu_default: str, has_batchnorm: bool) -> PrecisionPlan:
    """The precision plan for ``--precision`` (None for auto) on this model and device.

    auto: fp32 on the CPU; on a GPU the config's own choice when it makes one (an enabled
    ``torch_autocast`` section is kept as it is; LUMI's file disables fp16: that stays fp32),
    else ``gpu_default``.  Then the rules of the module docstring: BatchNorm models compute under
    ``torch_autocast`` with an fp32 engine, and DeepSpeed's fp16 mode becomes fp32 on the CPU.
    """
    own_autocast = config.get("torch_autocast", {})
    if requested is not None:
        asked = requested
    elif on_cpu:
        asked = "fp32"
    elif own_autocast.get("enabled"):
        # no dtype: DeepSpeed passes None to torch.autocast, which means float16 on CUDA
        dtype = AUTOCAST_NAMES[str(own_autocast.get("dtype", "float16"))]
        return PrecisionPlan(dtype, "fp32", dtype, "the config's torch_autocast section")
    elif any(key in config for key in HALF_SECTIONS):
        asked = config_precision(config)
    else:
        asked = gpu_default
    if asked == "fp32":
        return PrecisionPlan(asked, "fp32", None, "fp32")
    if has_batchnorm:
        return PrecisionPlan(
            asked, "fp32", asked,
            f"BatchNorm model: DeepSpeed's {asked} mode would cast BatchNorm's weights but not its "
            "running statistics, so the engine stays fp32 under DeepSpeed's torch_autocast")
    if on_cpu and asked == "fp16":
        return PrecisionPlan(
            asked, "fp32", None,
            "fp16 asked, fp32 used: DeepSpeed's fp16 mode on the CPU depends on oneDNN fp16 "
            "kernels for this processor; bf16 takes the GPU's paths on the CPU")
    return PrecisionPlan(asked, asked, None,
                         f"DeepSpeed's own {asked} mode: the model has no BatchNorm")


def fit_to_job(config: dict[str, Any], *, global_batch: int, world_size: int,
               on_cpu: bool, precision: PrecisionPlan, lr: Optional[float],
               stage: Optional[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (config for this job, {key: [old, new]} of what changed).

    * Batch: ``train_batch_size = --batch-size``; the file's gradient accumulation is kept and
      ``train_micro_batch_size_per_gpu = batch / (world_size x accumulation)``; it must divide.
    * ``stage`` (``--zero-stage``) overrides ``zero_optimization.stage`` when given.
    * ``lr`` (``--lr``) overrides ``optimizer.params.lr`` when given.
    * CPU: Adam-type optimizers get ``torch_adam: true``: DeepSpeed's own Adam kernels are
      C++/CUDA ops that are JIT-compiled on first use, which needs a compiler the image may not
      have.
    * ``precision``: the section of the precision asked for is written (enabled only when the
      engine runs in it, so a BatchNorm model's override shows as ``bf16.enabled: [.., false]``),
      any other enabled half section is disabled, and ``torch_autocast`` is set to the plan's.
    """
    cfg = json.loads(json.dumps(config))  # deep copy, leaving the caller's dict alone
    changes: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        """Set the dotted ``key`` (sections made as needed), recording a change."""
        *sections, name = key.split(".")
        target = cfg
        for section in sections:
            target = target.setdefault(section, {})
        if target.get(name) != value:
            changes[key] = [target.get(name), value]
        target[name] = value

    accumulation = int(cfg.get("gradient_accumulation_steps", 1))
    if global_batch % (world_size * accumulation):
        raise DsConfigError(
            f"--batch-size {global_batch} is not divisible by world size {world_size} x "
            f"gradient_accumulation_steps {accumulation}")
    put("train_batch_size", global_batch)
    put("train_micro_batch_size_per_gpu", global_batch // (world_size * accumulation))
    put("gradient_accumulation_steps", accumulation)
    if stage is not None:
        put("zero_optimization.stage", stage)
    optimizer = cfg.get("optimizer")
    if optimizer and lr is not None:
        put("optimizer.params.lr", lr)
    if optimizer and on_cpu and "adam" in str(optimizer.get("type", "")).lower():
        put("optimizer.params.torch_adam", True)
    for key in HALF_SECTIONS:
        if key == precision.asked:
            put(f"{key}.enabled", precision.engine == key)
        elif cfg.get(key, {}).get("enabled"):
            put(f"{key}.enabled", False)
    if precision.autocast is not None:
        put("torch_autocast.enabled", True)
        put("torch_autocast.dtype", AUTOCAST_DTYPES[precision.autocast])
    elif cfg.get("torch_autocast", {}).get("enabled"):
        put("torch_autocast.enabled", False)
    return cfg, changes


def config_precision(config: dict[str, Any]) -> str:
    """The precision of DeepSpeed's own mode under this config: fp16, bf16 or fp32."""
    enabled = [key for key in ("bf16", "fp16") if config.get(key, {}).get("enabled")]
    return enabled[0] if enabled else "fp32"
