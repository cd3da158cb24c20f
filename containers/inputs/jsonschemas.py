"""JSON Schema files of the hand-edited inputs, for editors (``schemas/*.json``). Generated from
the loaders' models by ``python -m containers.inputs.jsonschemas``; a test fails when stale."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from containers.files import atomic_write_text
from containers.inputs.envspec import EnvFile
from containers.inputs.recipes import Manifest
from containers.inputs.settings import SettingsFile
from containers.inputs.sites import Profile

SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "site.schema.json": Profile.model_json_schema,
    "recipe.schema.json": Manifest.model_json_schema,
    "env-spec.schema.json": EnvFile.model_json_schema,
    "settings.schema.json": SettingsFile.model_json_schema,
}


def render(name: str) -> str:
    """The text of schema file ``name`` (sorted keys: a change shows as a small diff)."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **SCHEMAS[name]()}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def stale(folder: Path) -> list[str]:
    return [name for name in SCHEMAS
            if not (folder / name).is_file() or (folder / name).read_text() != render(name)]


def write(folder: Path) -> list[str]:
    changed = stale(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in changed:
        atomic_write_text(folder / name, render(name))
    return changed


if __name__ == "__main__":  # python -m containers.inputs.jsonschemas [FOLDER]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path(__file__).resolve().parents[2] / "schemas"
    print("\n".join(f"wrote {target / name}" for name in write(target)) or "schemas current")
