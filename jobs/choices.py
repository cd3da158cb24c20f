"""The names, the size syntax and the cpulist syntax that the host and the workload scripts must
agree on.

``invoke smoke`` / ``invoke train`` check their flags on the host before anything starts, and the
scripts check them again in the container; both read them from here, so a name added to one side
cannot be missing on the other. Standard library only, and no torch: the host loads this file by
path (``containers.inputs.names``), the scripts import it as a sibling (``import choices``).
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

#: The training examples (``train.py --example``): how the model is distributed.
EXAMPLES = ("ddp", "deepspeed", "fsdp")
#: The sites' seed models (``train.py --model``).
MODELS = ("vit", "wideresnet", "cnn", "resnet")
#: Model size presets (``train.py --model-size``) every model takes; wideresnet also takes
#: DEPTH-WIDTH.
MODEL_SIZES = ("tiny", "small", "base")
WIDERESNET_SIZE = r"^(\d+)-(\d+)$"
#: Sizes one model alone takes: a site's published network exactly, where no preset is that
#: network (Olivia's WideResNet is not a WRN-DEPTH-WIDTH; LUMI trains torchvision's ViT-B/16).
#: CSC's ConvNet and NCAR's ResNet-18 are the ``small`` presets of cnn and resnet.
SEED_SIZES: dict[str, tuple[str, ...]] = {"wideresnet": ("olivia",), "vit": ("lumi",)}
#: The training settings a seed's guide uses with its network, by (model, size): train.py uses
#: them for the flags a user leaves out, since a seed run is comparable with the site's published
#: throughput only at the site's batch and optimizer. Keys are train.py's option names
#: (``batch_size`` is the global batch). Olivia's guide trains its single-GPU run at batch 256
#: with SGD, lr 0.01 (``PyTorchSingleGpu.md``; its multi-GPU runs scale to 1024 and 2048 with lr
#: 0.04); train.py's SGD adds momentum 0.9 as the guide's ``train_ddp.py`` does. LUMI's ViT is
#: left out: its batch is 32 per GCD, a per-rank size that a global default cannot express.
PRESET_DEFAULTS: dict[tuple[str, str], dict[str, object]] = {
    ("wideresnet", "olivia"): {"batch_size": 256, "lr": 0.01, "optimizer": "sgd"},
}
#: train.py's own defaults for what a preset may set (lr: by optimizer, in train.py).
TRAIN_DEFAULTS: dict[str, object] = {"batch_size": 256, "optimizer": "adamw"}
#: DeepSpeed ZeRO stages ``train.py --zero-stage`` accepts.
ZERO_STAGES = (1, 2, 3)
#: all_reduce element types (``allreduce.py --dtype``) and their size in bytes.
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}
#: The collectives ``allreduce.py --op`` measures, in nccl-tests' order (its ``*_perf``
#: binaries); ``--op all`` is every one.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
               "sendrecv")
#: Process group backends (``--backend``); auto picks nccl when torch sees a GPU.
BACKENDS = ("auto", "gloo", "nccl")
#: What a rank must run on (``--expect-gpu``): the GPU kind of the site; ROCm torch names its
#: GPUs ``cuda`` too, so the kind is told apart by the torch build.
GPU_KINDS = ("none", "cuda", "rocm")



def parse_size(text: str) -> int:
    """Parse a byte size such as ``1024``, ``1K``, ``128M`` or ``1GiB`` (binary units)."""
    match = re.match(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a byte size: {text!r} (use e.g. 1024, 1K, 128M, 1G)")
    value = int(match.group(1)) * 1024 ** ("", "K", "M", "G").index(match.group(2).upper())
    if value <= 0:
        raise ValueError(f"byte size must be positive: {text!r}")
    return value


def parse_sizes(spec: str, step_factor: int = 2) -> list[int]:
    """Expand ``A:B`` (A, A*f, A*f^2, ... up to B) or a comma list ``A,B,C`` into byte sizes.

    The range form mirrors nccl-tests ``-b A -e B -f factor``; the list form lets a job probe
    just the sizes a site publishes a reference for (for example 128M).
    """
    if step_factor < 2:
        raise ValueError(f"step factor must be >= 2, got {step_factor}")
    spec = spec.strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 2:
            raise ValueError(f"size range must be A:B, got {spec!r}")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        if low > high:
            raise ValueError(f"size range start {low} is above its end {high}")
        sizes = [low]
        while sizes[-1] * step_factor <= high:
            sizes.append(sizes[-1] * step_factor)
        return sizes
    items = [item for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError("no sizes given")
    return [parse_size(item) for item in items]


def check_sizes(spec: str, dtype: str, step_factor: int = 2) -> list[int]:
    """The sizes of ``spec``, refusing any smaller than one element of ``dtype``."""
    sizes = parse_sizes(spec, step_factor)
    element = DTYPES[dtype]
    if min(sizes) < element:
        raise ValueError(f"{min(sizes)} B is less than one {dtype} ({element} B)")
    return sizes


def suggest(word: str, candidates: Sequence[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix for a likely typo, or an empty string: the one
    did-you-mean of the tool (flag values, input keys, task and flag names, op names)."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _op_key(name: str) -> str:
    """An op name without case, ``_`` or ``-``: nccl-tests' binaries (``all_reduce_perf``),
    this tool's own files (``allreduce.py``) and prose (``all-reduce``) name one collective."""
    return re.sub(r"[-_]", "", name.lower())


#: Every spelling :func:`parse_ops` takes, by :func:`_op_key`, and the canonical name it means.
OP_SPELLINGS = {_op_key(name): name for name in COLLECTIVES}


def parse_ops(text: str) -> list[str]:
    """``--op``: a comma list of :data:`COLLECTIVES` (each once, kept in nccl-tests' order),
    or ``all``. ``allreduce``, ``All-Gather``, ``reducescatter`` are their canonical names
    (what the results are named by); an unknown name is refused with the likely one."""
    names = [item.strip() for item in str(text).split(",") if item.strip()]
    if [name.lower() for name in names] == ["all"]:
        return list(COLLECTIVES)
    found = [OP_SPELLINGS.get(_op_key(name)) for name in names]
    unknown = [name for name, op in zip(names, found) if op is None]
    if not names or unknown:
        named = [f"{name!r}{suggest(name, [*COLLECTIVES, 'all'])}" for name in unknown]
        raise ValueError(f"unknown collective {', '.join(named) or repr(text)}: use a comma "
                         f"list of {', '.join(COLLECTIVES)}, or all")
    return [name for name in COLLECTIVES if name in found]


def preset_defaults(model: str | None, size: str | None) -> dict[str, object]:
    """The seed guide's settings for ``model`` at ``size`` ({} when it is no seed's preset)."""
    return dict(PRESET_DEFAULTS.get((model or "", size or ""), {}))


def model_sizes(model: str) -> tuple[str, ...]:
    """The size names ``model`` takes: the shared presets, then its seed sizes."""
    return MODEL_SIZES + SEED_SIZES.get(model, ())


def check_model_size(model: str, size: str) -> str:
    """``size`` when ``model`` takes it: a preset or seed name, or DEPTH-WIDTH for wideresnet."""
    if size in model_sizes(model) or (model == "wideresnet" and re.match(WIDERESNET_SIZE, size)):
        return size
    extra = " or DEPTH-WIDTH such as 16-4" if model == "wideresnet" else ""
    raise ValueError(f"unknown size {size!r} for model {model}: use one of "
                     f"{', '.join(model_sizes(model))}{extra}")


def parse_cpulist(text: str) -> frozenset[int]:
    """The cores of a Linux cpulist such as ``0-3,8`` (``taskset -c``, ``Cpus_allowed_list``).

    The stride form ``0-7:2`` is not accepted: ``:`` separates local ranks in ``--rank-cores``.
    """
    cores: set[int] = set()
    for item in text.split(","):
        match = re.match(r"^(\d+)(?:-(\d+))?$", item.strip())
        if not match:
            raise ValueError(f"not a cpulist: {text!r} (use e.g. 0-3,8)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if low > high:
            raise ValueError(f"cpulist range {item.strip()!r} runs backwards in {text!r}")
        cores.update(range(low, high + 1))
    return frozenset(cores)


def format_cpulist(cores: Iterable[int]) -> str:
    """The shortest Linux cpulist of ``cores``: ``{0, 1, 2, 3, 8}`` is ``0-3,8``."""
    ranges: list[list[int]] = []
    for core in sorted(set(cores)):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def parse_rank_cores(text: str) -> list[frozenset[int]]:
    """``--rank-cores``: the cores of each local rank, ``:`` between ranks, each a cpulist
    (``49-55:57-63``); the host formats its CPU map with :func:`format_cpulist` to match."""
    return [parse_cpulist(part) for part in text.split(":")]
