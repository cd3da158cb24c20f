"""The names the host and the workload scripts agree on, and the rules for the names inputs give.
Shared with the images' scripts (``jobs/choices.py``); no pydantic: ``invoke --list`` loads it."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from containers.jobsfiles import choices, cudadriver


class Gpu(StrEnum):
    """A GPU vendor stack and what depends on it (Apptainer's flag, visible devices, arches)."""

    flag: str | None
    visible_devices: str | None
    arch: re.Pattern | None
    vendor: str

    NONE = "none", None, None, None, "no"
    CUDA = "cuda", "--nv", "CUDA_VISIBLE_DEVICES", r"sm_\d{2,3}\Z", "NVIDIA (CUDA)"
    ROCM = "rocm", "--rocm", "ROCR_VISIBLE_DEVICES", r"gfx[0-9a-f]{3,4}\Z", "AMD (ROCm)"

    def __new__(cls, value: str, *facts: Any) -> "Gpu":
        member = str.__new__(cls, value)
        member._value_ = value
        member.flag, member.visible_devices, arch, member.vendor = facts
        member.arch = re.compile(arch) if arch else None
        return member

    def __repr__(self) -> str:  # a refusal lists the kinds as inputs spell them
        return repr(self.value)


EXAMPLES: tuple[str, ...] = choices.EXAMPLES
MODELS: tuple[str, ...] = choices.MODELS
MODEL_SIZES: tuple[str, ...] = choices.MODEL_SIZES
ZERO_STAGES: tuple[int, ...] = choices.ZERO_STAGES
DTYPES: tuple[str, ...] = tuple(choices.DTYPES)
check_sizes = choices.check_sizes
COLLECTIVES: tuple[str, ...] = choices.COLLECTIVES
parse_ops = choices.parse_ops
suggest = choices.suggest
check_model_size = choices.check_model_size
parse_cpulist = choices.parse_cpulist
format_cpulist = choices.format_cpulist
preset_defaults = choices.preset_defaults

#: Which NVIDIA driver runs which CUDA runtime (``jobs/cudadriver.py``, the device gate's too).
driver_needed = cudadriver.driver_needed


# ---------------------------------------------------------------------- names inputs give
_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,63}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Names the publish layout gives its own files and folders (``DEST/modules``, ``DEST/keys``,
#: ``DEST/<t>/bin``, ``latest``, ``default``, the catalogue): no target or version may take one.
RESERVED_NAMES = ("bin", "catalogue.json", "default", "keys", "latest", "modules")
#: Endings of temp files (``.partial``, ``.tmp``), which publish and build sweep away.
TEMP_ENDINGS = (".partial", ".tmp")
NAME_RULE = ("1-64 letters, digits and . _ + -, not starting with - or ., not ending in "
             + " or ".join(TEMP_ENDINGS) + ", and not " + ", ".join(RESERVED_NAMES))


def is_env_name(name: str) -> bool:
    """Whether ``name`` is a shell variable name (letters, digits, ``_``; no leading digit)."""
    return bool(_ENV_NAME.match(name))


def name_problem(kind: str, name: object) -> str | None:
    """Why ``name`` cannot be a ``kind`` name, else None: a newline, ``/`` or ``..`` in a path or
    generated file would run code from a module file or write outside the publish folder."""
    if not isinstance(name, str):
        return f"{kind} name must be a string, got {type_name(name)}"
    if (not _NAME.match(name) or name.lower() in RESERVED_NAMES
            or name.endswith(TEMP_ENDINGS)):
        return f"{name!r} is not a usable {kind} name: {NAME_RULE}"
    return None


def type_name(value: Any) -> str:
    """How a refusal names a value's type: a mapping, a list, int, ..."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__

