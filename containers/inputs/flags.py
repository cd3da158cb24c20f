"""The option types of the command line and each flag's one declaration (:class:`Option`). Values
arrive as text (invoke is told no types), each turned into the request's or refused in one line."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection

from containers import walltime
from containers.errors import UsageError
from containers.inputs import names
from containers.inputs.directives import scheduler_option


@dataclass(frozen=True)
class FlagType:
    """A kind of flag value: its ``label`` (help, errors) and its ``parse``."""

    label: str
    parse: Callable[[Any], Any]

    def __call__(self, flag: str, value: Any) -> Any:
        """``value`` of ``flag`` converted; None (a flag left out) stays None."""
        if value is None:
            return None
        try:
            return self.parse(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise UsageError(f"{flag} {exc} (got {_got(value)})", flag=flag) from None


def _got(value: Any) -> str:
    """A value as the error shows it: text quoted (one line, whatever it holds), numbers bare."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(str(value))
    return format(value, "g") if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------------- numbers
def integer(low: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        text = str(value).strip()
        if isinstance(value, (bool, float)) or not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"takes a whole number >= {low}")
        number = int(text)
        if number < low:
            raise ValueError(f"must be at least {low}")
        return number
    return parse


def _number(*, high: float | None = None, what: str = "number") -> Callable[[Any], float]:
    """A finite float above 0 (and at most ``high``): nan and inf are never a setting."""
    span = "> 0" if high is None else f"in (0, {high:g}]"
    allowed = "more than 0" if high is None else f"a {what} {span}"

    def parse(value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"takes a {what} {span}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite {what}, {allowed}")
        if not number > 0 or (high is not None and number > high):
            raise ValueError(f"must be {allowed}")
        return number
    return parse


POSITIVE_INT = FlagType("integer >= 1", integer(1))
NON_NEGATIVE_INT = FlagType("integer >= 0", integer(0))
POSITIVE_FLOAT = FlagType("number > 0", _number())
SECONDS = FlagType("seconds > 0", _number(what="number of seconds"))
FRACTION = FlagType("fraction > 0 and <= 1", _number(high=1.0, what="fraction"))


def _rank_list(value: Any) -> list[int]:
    """``1,2,4``: distinct rank counts, sorted."""
    try:
        ranks = sorted({integer(1)(part) for part in str(value).split(",") if part.strip()})
    except ValueError:
        ranks = []
    if not ranks:
        raise ValueError("takes a comma list of rank counts >= 1, e.g. 1,2,4")
    return ranks


RANK_LIST = FlagType("comma list of integers >= 1", _rank_list)


# ---------------------------------------------------------------------------------- choices
def choice(allowed: Collection[Any]) -> FlagType:
    """One of ``allowed`` (compared as text, returned as the allowed value itself)."""
    listed = ", ".join(map(str, allowed))

    def parse(value: Any) -> Any:
        for option in allowed:
            if value == option or str(value) == str(option):
                return option
        raise ValueError(f"must be one of {listed}")
    return FlagType(f"one of {listed}", parse)


DTYPE = choice(names.DTYPES)
MODEL = choice(names.MODELS)
EXAMPLE = choice(names.EXAMPLES)
ZERO_STAGE = choice(names.ZERO_STAGES)


#: ``--op``: the collectives the benchmark measures, as one comma list in nccl-tests' order.
OPS = FlagType(f"comma list of {', '.join(names.COLLECTIVES)}, or all",
               lambda value: ",".join(names.parse_ops(str(value))))


#: What ``--sizes`` takes (checked with the dtype by :func:`sizes`).
SIZES_LABEL = "byte sizes MIN:MAX or A,B,C (K/M/G suffixes)"
SIZES = FlagType(SIZES_LABEL, str)


def sizes(flag: str, value: str, dtype: str) -> str:
    """``--sizes`` checked for its form and against one element of ``dtype``."""
    try:
        names.check_sizes(str(value), dtype)
    except ValueError as exc:
        shown = value if str(value).isprintable() else repr(value)
        raise UsageError(f"{flag} {shown}: {exc}; it takes {SIZES_LABEL}", flag=flag) from None
    return str(value)


def model_size(flag: str, value: str | None, model: str | None) -> str | None:
    """A size ``model`` takes (its presets, its seed sizes, DEPTH-WIDTH for wideresnet)."""
    if value is None:
        return None
    try:
        return names.check_model_size(model or "cnn", str(value))
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}", flag=flag) from None


#: What ``--model-size`` takes (checked with the model by :func:`model_size`).
MODEL_SIZE = FlagType("tiny, small, base, or a seed's size (wideresnet: olivia or DEPTH-WIDTH)",
                      str)


# ------------------------------------------------------------------------------ words, time
TIME_FORMS = "HH:MM:SS, D-HH:MM:SS, MM:SS or minutes"


def _time(value: Any) -> int:
    """Seconds: given (a number), or read from a time as the schedulers take it."""
    try:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return walltime.parse(str(value))
    except ValueError:
        raise ValueError(f"must be a time above zero: {TIME_FORMS}") from None


#: ``--time``: a wall time in seconds, or as the schedulers read it.
TIME = FlagType(TIME_FORMS, _time)


def word_rule(label: str, pattern: str | Callable[[str], object], refusal: str) -> FlagType:
    """A flag taking one word of ``pattern`` (or passing a test), refused with ``refusal``."""
    passes = re.compile(pattern + r"\Z").match if isinstance(pattern, str) else pattern

    def parse(value: Any) -> str:
        text = str(value)
        if not passes(text):
            raise ValueError(refusal)
        return text
    return FlagType(label, parse)


ACCOUNT = word_rule("account name (letters, digits, _ . -)", r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}",
                    "takes an account name: 1-64 letters, digits and _ . - (not starting with . "
                    "or -)")
#: ``--group`` and the group settings: a Unix group's name.
GROUP = word_rule("group name", r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}",
                  "is not a group name: 1-32 letters, digits and _ . - (not starting with . or -)")
#: ``--qos``, ``--reservation``: a scheduler's name for something, never an option (``--x``).
SCHEDULER_NAME = word_rule("name (letters, digits, _ . + -)", r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}",
                           "takes a name: 1-64 letters, digits and _ . + - (not starting with . "
                           "or -)")


# ------------------------------------------------------------------------------ directives
def directive(scheduler: str) -> FlagType:
    """By the one directive grammar, which a profile's ``job.directives`` meet too."""
    return FlagType("one scheduler option, e.g. --constraint=gpu",
                    lambda text: scheduler_option(text, scheduler))


#: A job id as sbatch or qsub prints it (``1234``, ``1234[].server``): an argv word and a file name.
_JOB_ID = re.compile(r"[0-9]{1,20}(\[[0-9]*\])?(\.[A-Za-z0-9][A-Za-z0-9_-]*){0,8}\Z")


def _job_id(value: Any) -> str:
    text = str(value).strip() if isinstance(value, (str, int)) and \
        not isinstance(value, bool) else ""
    if not _JOB_ID.match(text):
        raise ValueError("is not a job id as sbatch or qsub prints it (digits, then an "
                         "optional .server)")
    return text


JOB_ID = FlagType("job id", _job_id)


def named(kind: str) -> FlagType:
    """A target, site, partition or version name: the one name rule of the inputs."""
    return word_rule(f"{kind} name", lambda text: not names.name_problem(kind, text),
                     f"is not a usable {kind} name: {names.NAME_RULE}")


TARGET = named("target")
SITE = named("site")
PARTITION = named("partition")
VERSION = named("version")


# ------------------------------------------------------------------------------------ paths
def _path(kind: str, *, exists: bool = False) -> Callable[[Any], Path]:
    """A ``kind`` path: one that exists, or one to write (not blank, not the other kind)."""
    other = {"file": "a folder; it takes the file to write", "folder": "a file; it takes a folder"}

    def parse(value: Any) -> Path:
        path = Path(str(value)).expanduser()
        if exists and (path.is_file() if kind == "file" else path.is_dir()):
            return path
        if exists:
            raise ValueError(f"takes an existing {kind}")
        if not str(value).strip():
            raise ValueError(f"takes a {kind} path")
        wrong = path.is_dir() if kind == "file" else path.exists() and not path.is_dir()
        if wrong:
            raise ValueError(f"names {other[kind]}")
        return path
    return parse


DEST_FOLDER = FlagType("folder (made if missing; not a file)", _path("folder"))
#: ``verify --dest``: the same folder, read only (verify makes nothing).
PUBLISHED_FOLDER = FlagType("folder images were published to (not a file)", _path("folder"))
EXISTING_FILE = FlagType("existing file", _path("file", exists=True))
EXISTING_FOLDER = FlagType("existing folder", _path("folder", exists=True))


@dataclass(frozen=True)
class Option:
    """One flag, declared once on the field it fills: its help and type (None: a switch)."""

    help: str
    type: FlagType | None = None
    in_job: bool = True  # False: ``invoke job`` sets it by a flag of its own (``--workload``)

    def field(self, default: Any = None) -> Any:
        return dataclasses.field(default=default, metadata={"option": self})


def option(help: str, type: FlagType | None = None, default: Any = None) -> Any:
    return Option(help, type).field(default)


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def declared(cls: type) -> dict[str, tuple[Option, Any]]:
    """The options a request dataclass declares: name -> (option, default), in field order."""
    return {f.name: (f.metadata["option"], f.default) for f in dataclasses.fields(cls)
            if "option" in f.metadata}


def check(request: object) -> None:
    """For ``__post_init__``: each declared value through its type, in field order."""
    for name, (declaration, _) in declared(type(request)).items():
        if declaration.type is not None:
            object.__setattr__(request, name,
                               declaration.type(flag_of(name), getattr(request, name)))
