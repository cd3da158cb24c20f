"""The JSON Schema files editors read are current and agree with the loaders."""

from __future__ import annotations

import json

import yaml

from containers.inputs import jsonschemas
from tests.fixtures import ROOT


def test_schema_files_are_current() -> None:
    stale = jsonschemas.stale(ROOT / "schemas")
    assert not stale, f"run: python -m containers.inputs.jsonschemas (stale: {stale})"


def test_shipped_inputs_validate_against_their_schemas() -> None:
    import jsonschema  # here: its import (1.8 s, its format checkers) is every worker's otherwise
    for folder, pattern, name in (("sites", "*.yaml", "site.schema.json"),
                                  ("recipes", "*.yaml", "recipe.schema.json"),
                                  ("envs", "*.yml", "env-spec.schema.json")):
        schema = json.loads((ROOT / "schemas" / name).read_text())
        for path in sorted((ROOT / folder).glob(pattern)):
            jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_site_profiles_name_their_schema_for_editors() -> None:
    for path in sorted((ROOT / "sites").glob("*.yaml")):
        assert path.read_text().splitlines()[0] == \
            "# yaml-language-server: $schema=../schemas/site.schema.json", path


def test_a_stale_schema_is_found_and_rewritten(tmp_path) -> None:
    assert set(jsonschemas.write(tmp_path)) == set(jsonschemas.SCHEMAS)
    (tmp_path / "site.schema.json").write_text("{}")
    assert jsonschemas.stale(tmp_path) == ["site.schema.json"]
    assert jsonschemas.write(tmp_path) == ["site.schema.json"] and not jsonschemas.stale(tmp_path)
