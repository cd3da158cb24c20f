"""Whether a training example can run on a target's image: its torch against the example's needs.
Judged before the build (the env spec's pin, the manifest's ``torch:``), not in a queued job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping

from containers.errors import ConfigError
from containers.inputs.envspec import EnvSpec, load_env_spec
from containers.inputs.recipes import Target
from containers.inputs.versions import major_minor

#: (major, minor): a pre-release counts as its release (NGC's ``2.6.0a0`` has 2.6's APIs).
Version = tuple[int, int]


@dataclass(frozen=True)
class Need:
    """The oldest torch an example runs on, why, and the package besides torch it imports."""

    torch: Version
    why: str
    package: str | None = None


#: FSDP2's ``fully_shard`` and ``MixedPrecisionPolicy`` are public in ``torch.distributed.fsdp``
#: from torch 2.6 (its release notes; before, ``_composable``); DeepSpeed 0.16-0.19 declare
#: ``torch>=2.0.0`` (``Requires-Dist``); DDP is in every torch 2.
NEEDS: dict[str, Need] = {
    "ddp": Need((2, 0), "DistributedDataParallel as train.py uses it needs torch 2"),
    "fsdp": Need((2, 6), "FSDP2 (fully_shard, MixedPrecisionPolicy) is public in "
                         "torch.distributed.fsdp from torch 2.6"),
    "deepspeed": Need((2, 0), "DeepSpeed's own pin is torch>=2.0.0", package="deepspeed"),
}


def _show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def image_torch(target: Target, env: EnvSpec | None
                ) -> tuple[Version, Path, int | None] | None:
    """The lowest torch the image can have and where that is said, or None."""
    pin = env.torch_pin() if env is not None else None
    if pin is not None and env is not None:
        return pin[0], env.path, pin[1]
    if target.torch is None or target.torch_unknown:  # none, or unknown for this build (as_built)
        return None
    version = major_minor(target.torch)  # the base image's torch (its manifest says X.Y...)
    return None if version is None else (version, target.manifest, target.line("torch"))


def check_example(target: Target, example: str, env: EnvSpec | None = None) -> str | None:
    """Refuse ``example`` on ``target``'s image, or a note when its torch is unknown."""
    need = NEEDS[example]
    if env is None and target.env is not None:
        env = load_env_spec(target.env)
    if need.package and env is not None and not env.installs(need.package):
        raise ConfigError(f"example '{example}' needs the {need.package} package, which "
                          f"{env.path} does not install (target {target.name})", path=env.path,
                          key="dependencies")
    found = image_torch(target, env)
    if found is None:
        return (f"target {target.name}: torch version unknown ({_unknown(target, env)}); "
                f"example '{example}' needs torch >= {_show(need.torch)}")
    version, path, line = found
    if version < need.torch:
        raise ConfigError(f"target {target.name} gets torch {_show(version)}, but example "
                          f"'{example}' needs torch >= {_show(need.torch)} ({need.why})",
                          path=path, line=line, key="torch")
    return None


@dataclass(frozen=True)
class ExamplePlan:
    """The examples a target's image is meant for, as check and build judge them."""

    examples: tuple[str, ...]
    errors: list[ConfigError]
    notes: list[str]
    info: str | None = None


def has_torch(target: Target, env: EnvSpec | None) -> bool:
    return target.torch is not None or (env is not None and (env.installs("torch")
                                                             or env.installs("pytorch")))


def example_plan(target: Target, env: EnvSpec | None = None,
                 known: Iterable[str] = tuple(NEEDS)) -> ExamplePlan:
    """The one judgement of a target's examples: named ones must run, else the known."""
    if env is None and target.env is not None:
        env = load_env_spec(target.env)
    if target.examples is not None:
        errors, notes = example_problems(target, target.examples, env)
        if not has_torch(target, env) and env is not None:
            errors, notes = [ConfigError(f"example '{example}' needs torch, which {env.path} "
                                         f"does not install (target {target.name})",
                                         path=env.path, key="dependencies")
                             for example in target.examples], []
        return ExamplePlan(tuple(target.examples), errors, notes)
    if not has_torch(target, env):
        return ExamplePlan((), [], [], f"target {target.name}: no examples (its environment "
                                       "has no torch)")
    kept, left = [], []
    for example in known:
        errors, _ = example_problems(target, [example], env)
        if errors:
            left.append(f"{example}: {errors[0].detail}")
        else:
            kept.append(example)
    _, notes = example_problems(target, kept, env)
    info = (f"target {target.name}: examples {', '.join(kept) or 'none'}"
            + (f" (left out: {'; '.join(left)})" if left else ""))
    return ExamplePlan(tuple(kept), [], notes, info)


def example_problems(target: Target, examples: Iterable[str], env: EnvSpec | None
                     ) -> tuple[list[ConfigError], list[str]]:
    """The examples ``target`` (``env`` loaded) cannot run, and a note if its torch is unknown."""
    errors: list[ConfigError] = []
    unknown: list[str] = []
    for example in examples:
        try:
            note = check_example(target, example, env)
        except ConfigError as exc:
            errors.append(exc)
        else:
            if note:
                unknown.append(f"{example} >= {_show(NEEDS[example].torch)}")
    notes = [f"torch version unknown ({_unknown(target, env)}): cannot check the examples' "
             f"needs ({', '.join(unknown)})"] if unknown else []
    return errors, notes


def _unknown(target: Target, env: EnvSpec | None) -> str:
    """Why the image's torch version is unknown, as the notes say it."""
    return target.torch_unknown or (f"no torch pin in "
                                    f"{env.path.name if env is not None else 'an env spec'}, "
                                    f"no 'torch:' in {target.manifest.name}")


def as_built(target: Target, build_args: Mapping[str, str], *,
             context: Collection[str] = ()) -> Target:
    """``target`` as built with ``build_args``: one that changes the manifest's (NGC_TAG) makes
    ``torch:`` unknown rather than wrong; ``context``: arguments that only locate inputs."""
    if target.torch is None:
        return target
    changed = [f"{key}={value}" for key, value in sorted(build_args.items())
               if key not in context and target.build_args.get(key) != value]
    if not changed:
        return target
    return target.model_copy(update={"torch_unknown": (
        f"--build-arg {changed[0]} builds on another base than the one whose torch "
        f"{target.manifest.name} declares ('torch: {target.torch}')")})
