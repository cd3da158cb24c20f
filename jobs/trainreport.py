"""The training report, ``train.json``: one typed shape that ``train.py`` writes and the host's
judge (``containers/prove/train.py``) reads back.

Standard library only: it runs inside the images beside ``train.py`` and is loaded by the host
from this very file (as ``jobs/choices.py`` is), so the writer and the judge cannot drift apart.
Rank 0 writes the whole shape from the start (values not known yet are null) and rewrites it
after every epoch; :func:`TrainReport.from_dict` refuses a document that is not this shape,
naming the keys that are missing or of the wrong type, so a judge never guesses.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union


class ReportError(ValueError):
    """A ``train.json`` that is not a :class:`TrainReport` (its message says why)."""


@dataclass
class FastPath:
    """The fast-path choices the run made (``fast_path_reasons`` says why)."""

    channels_last: bool
    autocast: Optional[str]
    data_on_device: bool
    compile: bool
    compile_s: Optional[float] = None
    host_sync: str = "per epoch"


@dataclass
class Final:
    """The last epoch's figures."""

    loss: float
    accuracy: float
    val_loss: float
    val_accuracy: float


@dataclass
class TrainReport:
    """What one training run did and how it ended; ``ok`` and ``finished`` are set last."""

    # what was trained, on what data
    example: str
    model: str
    model_size: Optional[str]
    model_name: str
    parameters: int
    dataset: str
    data: str
    train_samples: int
    val_samples: int
    # where it ran
    world_size: int
    nodes: int
    gpus: int
    hostnames: list
    ranks: list
    launcher: str
    backend: Optional[str]
    device: str
    expect_gpu: Optional[str]
    device_name: str
    # how
    precision: str
    global_batch_size: int
    optimizer: str
    lr: Optional[float]
    seed: int
    epochs_requested: int
    target_accuracy: Optional[float]
    torch_version: str
    runtime: dict
    fast_path: FastPath
    fast_path_reasons: dict
    mixed_precision: str
    mixed_precision_reason: str
    started: str
    published_figures: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    micro_batch_size: Optional[int] = None
    logits_dtype: Optional[str] = None
    # the strategy's own (FSDP; DeepSpeed)
    fsdp_api: Optional[str] = None
    fsdp_units: Optional[int] = None
    sharding: Optional[str] = None
    zero_stage: Optional[int] = None
    ds_config: Optional[str] = None
    ds_config_overrides: Optional[dict] = None
    gradient_accumulation_steps: Optional[int] = None
    deepspeed_version: Optional[str] = None
    ds_shm_comm_op: Optional[bool] = None
    zero3_partitioned_params: Optional[int] = None
    zero3_persistent_params: Optional[int] = None
    # the results, filled in as the run goes
    epochs: list = field(default_factory=list)
    epochs_run: Optional[int] = None
    final: Optional[Final] = None
    loss_first: Optional[float] = None
    loss_last: Optional[float] = None
    samples_trained: Optional[int] = None
    train_time_s: Optional[float] = None
    total_time_s: Optional[float] = None
    throughput: Optional[float] = None
    throughput_per_device: Optional[float] = None
    reached_target: Optional[bool] = None
    early_stopped: Optional[bool] = None
    params_consistent: Optional[bool] = None
    consistency: Optional[dict] = None
    ok: bool = False
    error: Optional[str] = None
    finished: Optional[str] = None

    def update(self, **values: Any) -> None:
        """Set fields by name; an unknown name is a bug here."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"not fields of the training report: {', '.join(unknown)}")
        for name, value in values.items():
            setattr(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "TrainReport":
        """The report a ``train.json`` holds; :class:`ReportError` naming what is off."""
        return _build(cls, data, "train.json")


def _build(cls: type, data: Any, where: str) -> Any:
    """``cls`` from the plain ``data``: every field of it present and of its declared type."""
    if not isinstance(data, dict):
        raise ReportError(f"{where} is not an object")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    missing = [name for name in fields if name not in data]
    if missing:
        raise ReportError(f"{where} lacks {', '.join(missing)}")
    values = {name: _value(hints[name], data[name], f"{where}: {name}") for name in fields}
    return cls(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` checked against the field's type (a nested shape is built, so checked too)."""
    options = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ReportError(f"{where} is null")
    for option in options:
        if dataclasses.is_dataclass(option):
            return _build(option, value, where)
        allowed = (int, float) if option is float else (option,)  # JSON 3 reads as int
        if isinstance(value, allowed) and not (isinstance(value, bool) and option is not bool):
            return value
    names = ["null" if option is type(None) else option.__name__ for option in options]
    raise ReportError(f"{where} is {type(value).__name__}, not {' or '.join(names)}")
