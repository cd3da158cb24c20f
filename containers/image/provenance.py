"""An image's provenance: the JSON record beside each ``.sif`` (and the same facts as labels).

Later stages trust an image only through it: publish checks its sha256, verdicts name it."""

from __future__ import annotations

from pathlib import Path

from containers.errors import CommandFailed, StateError
from containers.files import FileRefused, TooDeep, json_value, read_regular_json
from containers.host.process import capture
from containers.host.runtime import Runtime
from containers.records import BuildRecord, Malformed

LABEL_PREFIX = "containers."


#: The most a provenance record may hold (its pip freeze and inputs are a few hundred KB at most).
RECORD_LIMIT = 16 << 20


def read(path: Path, *, corrupt_ok: bool = False) -> BuildRecord:
    """The record at ``path``, empty when none; an untrusted one is a :class:`StateError` (a
    verdict must never prove a null sha256), or empty with ``corrupt_ok`` (a build replaces it)."""
    try:
        return BuildRecord.of(read_regular_json(path, limit=RECORD_LIMIT), source=path)
    except FileNotFoundError:
        return BuildRecord()
    except (FileRefused, TooDeep) as exc:
        problem = str(exc)
    except Malformed as exc:
        problem = exc.problem
    except ValueError as exc:  # not UTF-8, not JSON
        problem = f"not JSON ({type(exc).__name__})"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if corrupt_ok:
        return BuildRecord()
    image = path.name.removesuffix(".json")
    raise StateError(f"the image record {path} is unreadable: {problem}; rebuild the image "
                     f"(invoke build --target {image.removesuffix('.sif')} --force) to write it "
                     "again")


def is_corrupt(path: Path) -> bool:
    """Whether a record is there but unreadable (see :func:`read`)."""
    try:
        read(path)
    except StateError:
        return True
    return False


def built_hashes(images_dir: Path, names: list[str]) -> dict[str, str]:
    """Inputs hash recorded beside each existing image (missing or unreadable: absent)."""
    records = {name: read(images_dir / f"{name}.sif.json", corrupt_ok=True) for name in names}
    return {name: record.inputs_hash for name, record in records.items()
            if (images_dir / f"{name}.sif").is_file() and record.inputs_hash}


def labels_of(runtime: Runtime, image: Path) -> dict[str, str]:
    argv = runtime.inspect_argv(image)
    try:
        data = json_value(capture(argv))
    except ValueError as exc:
        raise CommandFailed(f"{runtime.flavour} inspect of {image} printed no JSON",
                            argv=argv) from exc
    return dict(data.get("data", {}).get("attributes", {}).get("labels", {}) or {})
