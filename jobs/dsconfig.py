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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

ZERO_STAGES = (0, 1, 2, 3)


class ConfigError(Exception):
    """A DeepSpeed config that cannot be read or used; the message names the file."""


def strip_trailing_commas(text: str) -> str:
    """Remove commas that directly precede ``}`` or ``]`` (whitespace between), outside strings."""
    out: list[str] = []
    in_string = False
    escaped = False
    index = 0
    while index < len(text):
        char = text[index]
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif char == ",":
            ahead = index + 1
            while ahead < len(text) and text[ahead] in " \t\r\n":
                ahead += 1
            if ahead < len(text) and text[ahead] in "}]":
                # Keep the whitespace (and so every later line and column) where it was.
                out.append(" ")
            else:
                out.append(char)
        else:
            out.append(char)
        index += 1
    return "".join(out)


def parse_config_text(text: str, source: str) -> dict[str, Any]:
    """Parse a config's text; ConfigError (file, line, column, problem) when it cannot be read."""
    try:
        value = json.loads(strip_trailing_commas(text))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{source}: line {err.lineno} column {err.colno}: {err.msg} "
                          "(not valid JSON, even allowing trailing commas)") from err
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: expected a JSON object {{...}} at the top level, found "
                          f"{type(value).__name__}")
    return dict(value)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a DeepSpeed config file; ConfigError with a one-line message otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: no such DeepSpeed config file") from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read ({err})") from err
    config = parse_config_text(text, str(path))
    check_config(config, str(path))
    return config


def _section(config: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key!r} must be an object {{...}}, found "
                          f"{type(value).__name__}")
    return value


def check_config(config: dict[str, Any], source: str) -> None:
    """The checks that matter before DeepSpeed starts, with the key named in the message."""
    zero = _section(config, "zero_optimization", source)
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise ConfigError(f"{source}: zero_optimization.stage must be one of 0, 1, 2, 3, found "
                          f"{stage!r}")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"{source}: {key} must be a positive integer, found {value!r}")
    optimizer = _section(config, "optimizer", source)
    if optimizer and not isinstance(optimizer.get("type"), str):
        raise ConfigError(f"{source}: optimizer.type must be a string such as \"Adam\"")
    if "params" in optimizer and not isinstance(optimizer["params"], dict):
        raise ConfigError(f"{source}: optimizer.params must be an object {{...}}")
    for key in ("fp16", "bf16"):
        _section(config, key, source)


def zero_stage(config: dict[str, Any]) -> int:
    return int(config.get("zero_optimization", {}).get("stage", 0))


def fit_to_job(config: dict[str, Any], *, global_batch: int, world_size: int,
               on_cpu: bool, precision: Optional[str], lr: Optional[float],
               stage: Optional[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (config for this job, {key: (old, new)} of what changed).

    * Batch: ``train_batch_size = --batch-size``; the file's gradient accumulation is kept and
      ``train_micro_batch_size_per_gpu = batch / (world_size x accumulation)``; it must divide.
    * ``stage`` (``--zero-stage``) overrides ``zero_optimization.stage`` when given.
    * ``lr`` (``--lr``) overrides ``optimizer.params.lr`` when given.
    * CPU: fp16 and bf16 off (DeepSpeed's CPU path trains in fp32 here) and Adam-type optimizers
      get ``torch_adam: true``: DeepSpeed's own Adam kernels are C++/CUDA ops that are
      JIT-compiled on first use, which needs a compiler the image may not have.
    * ``precision`` (an explicit ``--precision`` on GPU) sets fp16/bf16 enabled accordingly;
      None keeps the file's choice.
    """
    cfg = json.loads(json.dumps(config))  # deep copy, leaving the caller's dict alone
    changes: dict[str, Any] = {}

    def put(section: Optional[str], key: str, value: Any) -> None:
        target = cfg if section is None else cfg.setdefault(section, {})
        old = target.get(key)
        if old != value:
            changes[key if section is None else f"{section}.{key}"] = [old, value]
        target[key] = value

    accumulation = int(cfg.get("gradient_accumulation_steps", 1))
    if global_batch % (world_size * accumulation):
        raise ConfigError(
            f"--batch-size {global_batch} is not divisible by world size {world_size} x "
            f"gradient_accumulation_steps {accumulation}")
    put(None, "train_batch_size", global_batch)
    put(None, "train_micro_batch_size_per_gpu", global_batch // (world_size * accumulation))
    put(None, "gradient_accumulation_steps", accumulation)
    if stage is not None:
        put("zero_optimization", "stage", stage)
    optimizer = cfg.get("optimizer")
    if optimizer:
        if lr is not None:
            optimizer.setdefault("params", {})
            put_params = optimizer["params"]
            if put_params.get("lr") != lr:
                changes["optimizer.params.lr"] = [put_params.get("lr"), lr]
            put_params["lr"] = lr
        if on_cpu and "adam" in str(optimizer.get("type", "")).lower():
            params = optimizer.setdefault("params", {})
            if params.get("torch_adam") is not True:
                changes["optimizer.params.torch_adam"] = [params.get("torch_adam"), True]
            params["torch_adam"] = True
    if on_cpu:
        for key in ("fp16", "bf16"):
            if cfg.get(key, {}).get("enabled"):
                put(key, "enabled", False)
    elif precision is not None:
        put("fp16", "enabled", precision == "fp16")
        put("bf16", "enabled", precision == "bf16")
    return cfg, changes


def config_precision(config: dict[str, Any]) -> str:
    """The precision DeepSpeed will train in under this config: fp16, bf16 or fp32."""
    if config.get("bf16", {}).get("enabled"):
        return "bf16"
    if config.get("fp16", {}).get("enabled"):
        return "fp16"
    return "fp32"
