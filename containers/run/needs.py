"""What a run needs from its image (Python, torch), judged before anything starts. Else it fails
rank by rank with an exec error; missing evidence is no refusal."""

from __future__ import annotations

import os
import re
from pathlib import Path

from containers.errors import UsageError
from containers.image import provenance
from containers.inputs.compat import has_torch
from containers.inputs.envspec import load_env_spec
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.records import BuildRecord
from containers.run.launchers import Torchrun
from containers.run.workload import Workload

PYTHON = "python"
TORCH = "torch"
#: The distribution names a pip freeze gives torch (``torch==2.7.1``, ``torch @ file:///…``).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ImageLacks(UsageError):
    """The image lacks what was asked of it: one line naming image, evidence and need."""

    @classmethod
    def of(cls, lacks: str, *, need: str, doing: str, hint: str = "") -> ImageLacks:
        return cls(f"{lacks}: {doing} needs {need}" + (f"; {hint}" if hint else ""))


def _freeze_names(freeze: list[str] | None) -> set[str] | None:
    """The distributions a record's pip freeze names (None: it made none)."""
    if not freeze:
        return None
    return {m.group(0).lower().replace("_", "-") for word in freeze if (m := _NAME.match(word))}


def lacking(record: BuildRecord | dict, need: str, target: Target | None = None) -> str | None:
    """Why the image lacks ``need`` as evidence says it, or None."""
    record = BuildRecord.of(record)
    if "python" in record.model_fields_set and record.python is None:
        return "has no Python 3 (its build record says so)"
    if need != TORCH:
        return None
    names = _freeze_names(record.pip_freeze)
    if names is not None:
        return None if TORCH in names else "has no torch (its build record's pip freeze lists none)"
    if target is not None and target.env is not None:
        env = load_env_spec(target.env)
        if not has_torch(target, env):
            return f"has no torch ({os.path.relpath(env.path)} does not install it)"
    return None


def refuse_lacking(record: BuildRecord | dict, *, image: Path | str, need: str, doing: str) -> None:
    """Raise :class:`ImageLacks` when ``image``'s record says it lacks ``need``."""
    reason = lacking(record, need)
    if reason:
        raise ImageLacks.of(f"{os.path.relpath(image)} {reason}", need=need, doing=doing)


def image_lacking(target: Target, settings: Settings, need: str) -> str | None:
    """``images/x.sif has no Python (...)`` when its record says it lacks ``need``."""
    image = settings.image_path(target.name)
    if not image.is_file():
        return None
    reason = lacking(provenance.read(settings.provenance_path(target.name)), need, target)
    return f"{os.path.relpath(image)} {reason}" if reason else None


def check_image(target: Target, settings: Settings, *, need: str, doing: str,
                hint: str = "") -> None:
    lacks = image_lacking(target, settings, need)
    if lacks:
        raise ImageLacks.of(lacks, need=need, doing=doing, hint=hint)


def command_need(workload: Workload) -> str | None:
    """What the launcher of a user's command needs in the image (torch, Python), or None."""
    if isinstance(workload.launcher, Torchrun):
        return TORCH
    return PYTHON if workload.launch.script == "python3" else None
