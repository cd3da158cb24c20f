"""The records that cross modules, typed: each with one reader, one writer and a schema version.

A file one stage writes and another reads (an image's build record ``images/<target>.sif.json``,
a catalogue entry, a job's ``job.json``, a run's ``verdict.json``, the smoke benchmark's
``allreduce.json`` and ``<op>.json``) is read here into a frozen dataclass whose fields are the
keys its readers use, so a reader names ``record.sha256``, not ``record["sha256"]``, and a
misspelt key is an AttributeError, not a silent None. (Architecture: Records, not dicts.)

Each record keeps the mapping it was read from (``raw``) in its order: the writer writes that
mapping back with ``schema`` (:attr:`Record.SCHEMA`) first, so a record read and written again
loses no key an older or newer version added. A file without ``schema`` is one written before
records had versions: version 1, read as it is. A file whose value is of the wrong type, or
whose ``schema`` is newer than this checkout knows, is refused in one line naming the file and
the key (:class:`Malformed`): a record nobody can trust proves nothing.

A record compares equal to, and reads as, the read-only mapping it was made from, for the few
functions that take any mapping (an SBOM made from the record, the record embedded in a
catalogue entry); code that reads one key of a record uses its attribute (tests/test_records.py
counts the keyed reads left).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, TypeVar

from containers.errors import StateError
from containers.files import atomic_write_text, read_json_object

SCHEMA_KEY = "schema"
R = TypeVar("R", bound="Record")


class Malformed(StateError, ValueError):
    """A record file whose content is not the record it should be; the message names the file
    and the key in one line."""


def _key(kinds: tuple[type, ...], default: Any = None) -> Any:
    """A record field read from the key of its name, refused unless one of ``kinds`` (None
    always passes: the key was absent or null); ``default`` when absent."""
    return field(default=default, metadata={"kinds": kinds})


def _typed(value: Any, kinds: tuple[type, ...]) -> bool:
    """Whether ``value`` is one of ``kinds``; a bool is no int here (``ranks: true``)."""
    if value is None or object in kinds:
        return True
    if isinstance(value, bool) and bool not in kinds:
        return False
    return isinstance(value, kinds)


def schema_problem(schema: object, newest: int, what: str) -> str | None:
    """Why a file's ``schema`` value is none this checkout reads (1 to ``newest``), else None."""
    if type(schema) is int and 1 <= schema <= newest:
        return None
    return f"is {schema!r}; this checkout reads {what} versions 1 to {newest}"


@dataclass(frozen=True, eq=False)
class Record(Mapping[str, Any]):
    """The fields every record shares, and the reading and writing of any record."""

    #: The version this checkout writes; a file of a newer one is refused.
    SCHEMA: ClassVar[int] = 2
    #: What a refusal calls the record (``the image record``).
    WHAT: ClassVar[str] = "record"

    schema: int = 1
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls: type[R], data: object, *, source: str | Path = "a record") -> R:
        """``data`` (a file's parsed JSON, or the mapping a writer was given) as this record;
        :class:`Malformed` naming ``source`` and the key when it is not one."""
        if not isinstance(data, Mapping):
            raise Malformed(f"{source}: the {cls.WHAT} is not a JSON object")
        schema = data.get(SCHEMA_KEY, 1)
        problem = schema_problem(schema, cls.SCHEMA, cls.WHAT)
        if problem:
            raise Malformed(f"{source}: key {SCHEMA_KEY!r} {problem}")
        values = {}
        for spec in fields(cls):
            if "kinds" not in spec.metadata:
                continue
            value = data.get(spec.name, None if spec.default is MISSING else spec.default)
            if not _typed(value, spec.metadata["kinds"]):
                names = " or ".join(kind.__name__ for kind in spec.metadata["kinds"])
                raise Malformed(f"{source}: key {spec.name!r} is {value!r}, not {names}")
            values[spec.name] = value
        return cls(schema=schema, raw=dict(data), **values)

    @classmethod
    def view(cls: type[R], data: Mapping[str, Any], *, source: str | Path = "a record") -> R:
        """``data`` as this record: itself when it is one, else read as :meth:`of` reads."""
        return data if isinstance(data, cls) else cls.of(data, source=source)

    def as_dict(self) -> dict[str, Any]:
        """What the writer writes: ``schema`` first, then every key as read or made."""
        return {SCHEMA_KEY: self.SCHEMA,
                **{k: v for k, v in self.raw.items() if k != SCHEMA_KEY}}

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def write(path: Path, record: Record | Mapping[str, Any], kind: type[Record]) -> Record:
    """Write ``record`` (a ``kind``, or the mapping that makes one, checked first) to ``path``
    atomically (:func:`~containers.files.atomic_write_text`); the record as written."""
    made = record if isinstance(record, kind) else kind.of(record, source=path)
    atomic_write_text(path, made.as_json())
    return kind.of(made.as_dict(), source=path)


def parse(text: str | bytes, kind: type[R], *, source: str | Path) -> R:
    """A file's text as a ``kind``; not JSON is :class:`Malformed` naming ``source``."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON
        raise Malformed(f"{source}: the {kind.WHAT} is not JSON ({type(exc).__name__})") from exc
    return kind.of(data, source=source)


# ------------------------------------------------------------------------------- the records
@dataclass(frozen=True, eq=False)
class BuildRecord(Record):
    """An image's build record (``images/<target>.sif.json``), written by the build
    (containers/image/builder.py) and read through :mod:`containers.image.provenance`. The
    values its readers refuse in their own words (publish: "no provenance record with a
    sha256"; a guard: "names no architecture") are typed by those checks, which keep their
    refusals; the rest are typed here."""

    WHAT: ClassVar[str] = "image record"

    target: str | None = _key((object,))
    image: str | None = _key((object,))
    inputs_hash: str | None = _key((object,))
    sha256: str | None = _key((object,))
    build_date: str | None = _key((object,))
    arch: str | None = _key((object,))
    tested: bool | None = _key((bool,))
    size_bytes: int | None = _key((int,))
    labels: dict | None = _key((object,))
    stack: dict | None = _key((object,))
    squashfs: str | None = _key((str,))
    probe_errors: dict | None = _key((dict,))


@dataclass(frozen=True, eq=False)
class JobRecord(Record):
    """A batch job's ``job.json`` (written by its script, rendered by containers/batch/job.py;
    read by its verdict, containers/app/judging.py): the request the job ran. Its values are
    checked where the request is made again from it (an unknown workload or site, options the
    workload does not take: each refused in the verdict's words), so they are not typed here.
    It is version 1, written without ``schema`` (a file without one is version 1): it is a line
    of the rendered job script, which a version field would change; a later version writes
    its number as every record does."""

    SCHEMA: ClassVar[int] = 1
    WHAT: ClassVar[str] = "job record"
    #: The keys every ``job.json`` has (``launcher``, ``partition``, ``transport`` and
    #: ``options`` may be missing); its verdict refuses a file without one.
    REQUIRED: ClassVar[tuple[str, ...]] = ("target", "site", "workload", "nodes",
                                           "gpus_per_node")

    target: str | None = _key((object,))
    site: str | None = _key((object,))
    workload: Any = _key((object,))
    nodes: int | str | None = _key((object,))
    gpus_per_node: int | str | None = _key((object,))
    launcher: str | None = _key((object,))
    partition: str | None = _key((object,))
    transport: str | None = _key((object,))
    options: Any = _key((object,))

    def as_json(self) -> str:
        """The one line the job script writes (``cat > job.json``), as version 1 wrote it."""
        return json.dumps(dict(self.raw))

    def missing(self) -> list[str]:
        """The keys of :data:`REQUIRED` this record lacks: none, or it describes no job."""
        return [key for key in self.REQUIRED if key not in self.raw]


@dataclass(frozen=True, eq=False)
class Verdict(Record):
    """A run's ``verdict.json`` (containers/prove/verdict.py makes it, containers/app writes it;
    publish looks it up by the image's sha256). Its values are typed by the checks that read
    them (publish's evidence, the follow's exit code), each failing closed on a wrong type,
    so the reader refuses only a file that is no object or of a newer schema."""

    WHAT: ClassVar[str] = "verdict"

    kind: str | None = _key((object,))
    target: str | None = _key((object,))
    site: str | None = _key((object,))
    sha256: str | None = _key((object,))
    ranks: int | None = _key((object,))
    backend: str | None = _key((object,))
    device_kind: str | None = _key((object,))
    passed: bool | None = _key((object,))
    exit_code: int | None = _key((object,))
    reasons: Any = _key((object,), ())
    degraded: str | None = _key((object,))
    transport: dict | None = _key((object,))
    performance: dict | None = _key((object,))
    collectives: dict | None = _key((object,))
    date: str | None = _key((object,))
    out_dir: str | None = _key((object,))


@dataclass(frozen=True, eq=False)
class CatalogueEntry(Record):
    """One published version in ``catalogue.json`` (containers/publish/publisher.py makes it;
    the catalogue, its page, verify and the gate read it). The catalogue's own check
    (containers/publish/catalogue.py, ``entry_problem``) refuses, in its words and naming the
    catalogue, an entry whose names, sha256, size, checks or signature are not what publish
    writes; the page and verify read the rest defensively. So this reader types nothing
    itself: it names the keys, refusing only a newer ``schema``."""

    WHAT: ClassVar[str] = "catalogue entry"

    target: Any = _key((object,))
    version: Any = _key((object,))
    description: Any = _key((object,))
    file: Any = _key((object,))
    checksum_file: Any = _key((object,))
    module: Any = _key((object,))
    sha256: Any = _key((object,))
    size_bytes: Any = _key((object,))
    signed: Any = _key((object,))
    key_fingerprint: Any = _key((object,))
    key_user: Any = _key((object,))
    public_key: Any = _key((object,))
    checks: Any = _key((object,))
    forced: Any = _key((object,))
    replaced_sha256: Any = _key((object,))
    site: Any = _key((object,))
    published: Any = _key((object,))
    site_runtime: Any = _key((object,))
    provenance: Any = _key((object,))
    stack: Any = _key((object,))
    fit: Any = _key((object,))
    gate: Any = _key((object,))
    driver_needed: Any = _key((object,))
    sbom_file: Any = _key((object,))
    diff_file: Any = _key((object,))
    diff_page: Any = _key((object,))
    license: Any = _key((object,))
    batch_example: Any = _key((object,))


class Refused(ValueError):
    """A smoke report that does not say what a pass needs; its message says why (the release
    gate turns it into a reason, so it names the file by its name)."""


def _exactly(report: Mapping, key: str, kind: type, what: str) -> Any:
    """``report[key]`` when it is exactly of ``kind`` (a bool is no int here), else
    :class:`Refused`: a loosely typed report (``wrong_total: false``) proves nothing."""
    value = report.get(key)
    if type(value) is not kind:
        raise Refused(f"{what} has {key} {value!r}, not a {kind.__name__}")
    return value


def _mode_wrong(mode: object, name: str) -> int | None:
    """One mode's ``wrong``: a count, or None where values were not checked."""
    if not isinstance(mode, Mapping):
        raise Refused(f"{name} has a result row that is not a record")
    value = mode.get("wrong")
    if value is not None and type(value) is not int:
        raise Refused(f"{name} has a row whose wrong is {value!r}, not a count")
    return value


@dataclass(frozen=True)
class SmokeReport:
    """The benchmark's results JSON (``allreduce.json``, and per op ``<op>.json``), written in
    the image by jobs/allreduce.py (which imports nothing of this package, so it writes the
    same keys itself) and read strictly here."""

    #: The version jobs/allreduce.py writes (REPORT_SCHEMA); a report without one is version 1.
    SCHEMA: ClassVar[int] = 2

    ok: bool
    finished: str
    wrong_total: int
    world_size: int
    #: Every mode's count of wrong values, size by size (None: the mode was not checked).
    wrong: tuple[int | None, ...]

    @classmethod
    def of(cls, report: Mapping, name: str) -> "SmokeReport":
        """``report`` (the file ``name``'s object) read strictly, or :class:`Refused`."""
        problem = schema_problem(report.get(SCHEMA_KEY, 1), cls.SCHEMA, "smoke report")
        if problem:
            raise Refused(f"{name}: {SCHEMA_KEY} {problem}")
        rows = report.get("results", [])
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise Refused(f"{name} has results that are not a list of rows")
        wrong = tuple(_mode_wrong(mode, name) for row in rows for mode in
                      (row.get("oop"), row.get("ip")) if mode is not None)
        return cls(ok=_exactly(report, "ok", bool, name),
                   finished=_exactly(report, "finished", str, name),
                   wrong_total=_exactly(report, "wrong_total", int, name),
                   world_size=_exactly(report, "world_size", int, name), wrong=wrong)


def read_smoke(path: Path) -> SmokeReport:
    """The smoke report at ``path``, or :class:`Refused` (none there, or not readable)."""
    report = read_json_object(path)
    if report is None:
        raise Refused(f"no readable {path.name} (the benchmark's results)")
    return SmokeReport.of(report, path.name)


@dataclass(frozen=True)
class RunReport:
    """A workload's report as its run left it, read by the judging of that run: the benchmark
    rewrites ``allreduce.json`` after each size, so a run that died midway left part of one
    (or none); what is absent reads as its default here and the kind's rules say what is
    missing. :class:`SmokeReport` is the strict reader of a finished benchmark's file."""

    #: The mapping as read (None: no report), for what takes the whole (a plot of the rows).
    raw: Mapping[str, Any] | None
    backend: Any = None
    nodes: int = 1
    finished: Any = None
    rows: tuple[Mapping[str, Any], ...] = ()
    cycles: int = 1
    cycles_done: Any = None
    collectives: Mapping[str, Any] = field(default_factory=dict)
    #: The ops the benchmark lists as measured (None: a report that lists none).
    ops: list | None = None

    @classmethod
    def of(cls, report: Mapping[str, Any] | None) -> "RunReport":
        if not report:
            return cls(raw=report)
        listed = report.get("ops")
        return cls(raw=report, backend=report.get("backend"),
                   nodes=int(report.get("nodes") or 1), finished=report.get("finished"),
                   rows=tuple(report.get("results", [])), cycles=int(report.get("cycles") or 1),
                   cycles_done=report.get("cycles_done"),
                   collectives=report.get("collectives") or {},
                   ops=listed if isinstance(listed, list) else None)
