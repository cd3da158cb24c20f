"""The records that cross modules: frozen pydantic models, one reader and one writer each,
strictly typed; keys a newer version added are kept and written back; a newer version or a
wrong type is refused in one line naming file and key."""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional, TypeVar

from pydantic import (BaseModel, ConfigDict, Field, JsonValue, NonNegativeFloat, NonNegativeInt,
                      PositiveInt, ValidationError)

from containers.errors import StateError
from containers.files import atomic_write_text

SCHEMA_KEY = "schema"
R = TypeVar("R", bound="Record")
Count = Optional[NonNegativeInt]
Text = Optional[str]


class Malformed(StateError, ValueError):
    """A record file that is not the record it should be: ``{source}: {problem}``, one line."""

    def __init__(self, source: object, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.problem = problem


def _problem(exc: ValidationError) -> str:
    """Pydantic's first error as ``key 'a.b': <its words> (got <value>)``."""
    error = exc.errors()[0]
    tags = ("list", "dict", "str", "int", "float", "bool")
    where = ".".join(str(part) for part in error["loc"] if part not in tags)[:80]
    shown = "" if error["type"] == "missing" else f" (got {reprlib.repr(error.get('input'))})"
    return f"key {where!r}: {error['msg']}{shown}"


class Model(BaseModel):
    """Every record and its parts: frozen, strict, finite, unknown keys kept as JSON values."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True, allow_inf_nan=False,
                              populate_by_name=True)
    __pydantic_extra__: dict[str, JsonValue]


class Record(Model):
    """A file of its own, in version :attr:`SCHEMA` (a newer one refused), called :attr:`WHAT`."""

    SCHEMA: ClassVar[int] = 2
    WHAT: ClassVar[str] = "record"

    schema_: PositiveInt = Field(1, alias=SCHEMA_KEY)

    @classmethod
    def of(cls: type[R], data: object, *, source: str | Path = "a record") -> R:
        """``data`` (a file's parsed JSON, what a writer was given, or a record) as this one."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise Malformed(source, f"the {cls.WHAT} is not a JSON object")
        schema = data.get(SCHEMA_KEY, 1)
        if type(schema) is not int or not 1 <= schema <= cls.SCHEMA:
            raise Malformed(source, f"key {SCHEMA_KEY!r} is {reprlib.repr(schema)}; this "
                                    f"checkout reads {cls.WHAT} versions 1 to {cls.SCHEMA}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise Malformed(source, _problem(exc)) from None

    def as_dict(self) -> dict[str, Any]:
        """What the writer writes: ``schema`` first, then every key given, in order."""
        return {SCHEMA_KEY: self.SCHEMA, **self.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude={"schema_"})}

    def as_json(self) -> str:
        return json_text(self.as_dict())


def json_text(data: object) -> str:
    """JSON as the tool writes its files: indented, never a NaN or Infinity (ValueError)."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def write(path: Path, record: Record | Mapping[str, Any], kind: type[R], *,
          mode: int | None = None) -> R:
    """Write ``record`` (or the mapping that makes one) to ``path`` atomically; as written."""
    made = kind.of(record, source=path)
    atomic_write_text(path, made.as_json(), mode=mode)
    return kind.of(made.as_dict(), source=path)


# ------------------------------------------------------------------------------- the records
class BuildRecord(Record):
    """``images/<target>.sif.json``: containers/image/builder.py writes it, provenance reads it."""

    WHAT: ClassVar[str] = "image record"

    target: Text = None
    image: Text = None
    inputs_hash: Text = None
    sha256: Text = None
    build_date: Text = None
    arch: Text = None
    tested: Optional[bool] = None
    size_bytes: Count = None
    build_seconds: Optional[NonNegativeFloat] = None
    labels: Optional[dict[str, str]] = None
    stack: Optional[dict[str, Optional[str]]] = None
    squashfs: Text = None
    probe_errors: Optional[dict[str, str]] = None
    pip_freeze: Optional[list[str]] = None
    #: The image's Python (None: it has none; absent: not recorded).
    python: Text = None
    #: How the image was made: ``full``, or the sha256 of the image whose kept root it rebuilt.
    made_from: Text = None


class JobRecord(Record):
    """A batch job's ``job.json``; version 1 without ``schema`` (which would change scripts)."""

    SCHEMA: ClassVar[int] = 1
    WHAT: ClassVar[str] = "job record"

    target: str
    site: str
    workload: str
    #: A count, or an older job's text: checked as the request is made again from them.
    nodes: int | str
    gpus_per_node: int | str
    launcher: Text = None
    partition: Text = None
    #: The workload's own options, typed by its options type when the request is made again.
    options: Optional[dict[str, JsonValue]] = None
    transport: Text = None

    def as_json(self) -> str:
        """The one line the job script writes (``cat > job.json``), as version 1 wrote it."""
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), allow_nan=False)


class Reference(Model):
    """The site's reference a judgement used (containers/inputs/references.py)."""

    bytes: Count = None
    lower: Optional[float] = None


class Judged(Model):
    """A performance judgement as a verdict holds it (containers/prove/performance.py)."""

    state: str
    message: str = ""
    failed: bool = False
    measured: Optional[NonNegativeFloat] = None
    reference: Optional[Reference] = None


class Transport(Model):
    """The transport's proof as a smoke verdict holds it."""

    ok: Optional[bool] = None
    message: str = ""


class OpVerdict(Model):
    """One collective's part of a smoke verdict."""

    passed: Optional[bool] = None
    wrong_total: Count = None
    factor: Text = None
    performance: Optional[Judged] = None


class SmokeSummary(Model):
    """A run as the catalogue keeps its smoke (containers/publish/checks.py, ``smoke_summary``)."""

    passed: Optional[bool] = None
    site: Text = None
    partition: Text = None
    ranks: Count = None
    nodes: Count = None
    backend: Text = None
    device_kind: Text = None
    ops: Optional[list[str]] = None
    performance: Optional[Judged] = None
    wrong_total: Count = None
    seconds: Optional[NonNegativeFloat] = None
    date: Text = None


class Verdict(Record, SmokeSummary):
    """A run's ``verdict.json`` (containers/prove/verdict.py makes it; publish finds it)."""

    WHAT: ClassVar[str] = "verdict"

    kind: Text = None
    target: Text = None
    sha256: Text = None
    exit_code: Optional[int] = None
    reasons: list[str] = []
    degraded: Text = None
    transport: Optional[Transport] = None
    collectives: Optional[dict[str, OpVerdict]] = None
    out_dir: Text = None


class RunStatus(Record):
    """``invoke run``'s ``status.json``: publish's proof of an image without torch."""

    WHAT: ClassVar[str] = "run status"

    kind: Text = None
    target: Text = None
    sha256: Text = None
    command: list[str] = []
    #: None: the command never started (its device gate failed).
    exit_status: Optional[int] = None
    interrupted: bool = False
    device_gate: Text = None
    first_failure: Optional[dict[str, int]] = None
    seconds: Optional[NonNegativeFloat] = None
    #: When it ended (UTC, as verdicts write it).
    date: Text = None


class ImageTest(Model):
    """``apptainer test`` as publish records it (``passed`` None: none ran; ``how`` says why)."""

    passed: Optional[bool] = None
    how: Text = None
    date: Text = None


class Checks(Model):
    """What publish checked before a version went out (containers/publish/checks.py)."""

    skipped: bool = False
    apptainer_test: Optional[ImageTest] = None
    smoke: Optional[SmokeSummary] = None
    #: What an image without torch was published on instead of a collective proof.
    proof: Text = None
    #: The passing ``invoke run`` that proved an image whose build ran no %test (``file``: where).
    run: Optional[RunStatus] = None


class Accepted(Model):
    """Who accepted a release gate's problems, when and why (containers/publish/decision.py)."""

    why: Text = None
    by: Text = None
    date: Text = None
    problems: list[str] = []


class GateRecord(Model):
    """The release gate's record: the version compared against, and what was accepted."""

    against: Text = None
    skipped: bool = False
    accepted: Optional[Accepted] = None


class CatalogueEntry(Record):
    """One version in ``catalogue.json``."""

    WHAT: ClassVar[str] = "catalogue entry"

    target: Text = None
    version: Text = None
    description: Text = None
    file: Text = None
    checksum_file: Text = None
    module: Text = None
    sha256: Text = None
    size_bytes: Count = None
    signed: Optional[bool] = None
    key_fingerprint: Text = None
    key_user: Text = None
    public_key: Text = None
    checks: Optional[Checks] = None
    forced: Optional[bool] = None
    replaced_sha256: Text = None
    site: Text = None
    published: Text = None
    site_runtime: Optional[dict[str, Optional[str]]] = None
    provenance: Optional[BuildRecord] = None
    stack: Optional[dict[str, Optional[str]]] = None
    #: The site fit's findings (containers/image/sitefit.py, ``Finding.as_dict``).
    fit: Optional[list[dict[str, JsonValue]]] = None
    gate: Optional[GateRecord] = None
    driver_needed: Text = None
    sbom_file: Text = None
    diff_file: Text = None
    diff_page: Text = None
    license: Text = None
    batch_example: Optional[list[str]] = None


# ------------------------------------------------------------------ a workload's own report
class Mode(Model):
    """One mode (out-of-place or in-place) of a benchmark row (jobs/allreduce.py)."""

    time_us: Optional[NonNegativeFloat] = None
    algbw: Optional[NonNegativeFloat] = None
    busbw: Optional[NonNegativeFloat] = None
    #: Wrong values over every rank and cycle; None where the mode was not checked.
    wrong: Count = None


class Row(Model):
    """One size of one collective (a row of the nccl-tests table)."""

    op: str = "all_reduce"
    bytes: NonNegativeInt
    oop: Mode
    ip: Optional[Mode] = None
    wrong_cycles: list[PositiveInt] = []


class OpSummary(Model):
    """One collective's summary in a benchmark report (``collectives``)."""

    factor: Text = None
    busbw_factor: Optional[NonNegativeFloat] = None
    root: Optional[int] = None
    unsupported: Text = None
    wrong_total: Count = None
    avg_busbw: Optional[NonNegativeFloat] = None
    ok: Optional[bool] = None


class RunReport(Record):
    """What every kind's judging reads of its report, partial when the run died midway."""

    WHAT: ClassVar[str] = "report"

    backend: Text = None
    nodes: PositiveInt = 1
    finished: Text = None


class SmokeReport(RunReport):
    """``allreduce.json`` and each ``<op>.json`` (jobs/allreduce.py's REPORT_SCHEMA)."""

    WHAT: ClassVar[str] = "smoke report"

    ops: Optional[list[str]] = None
    world_size: Optional[PositiveInt] = None
    cycles: PositiveInt = 1
    cycles_done: Count = None
    results: list[Row] = []
    wrong_total: Count = None
    avg_busbw: Optional[NonNegativeFloat] = None
    ok: bool = False
    collectives: dict[str, OpSummary] = {}

    def rows(self, op: str | None = None) -> list[Row]:
        return [row for row in self.results if op is None or row.op == op]

    def wrong(self, op: str | None = None) -> int:
        """Wrong values over every row and mode (of one op when named)."""
        return sum(mode.wrong or 0 for row in self.rows(op) for mode in (row.oop, row.ip)
                   if mode is not None)
