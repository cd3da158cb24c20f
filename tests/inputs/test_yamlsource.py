"""Located YAML: every mapping and list remembers its lines, and errors say where."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError
from containers.inputs.sites import load_sites
from containers.inputs.yamlsource import load_yaml_file, load_yaml_text


def test_yaml_syntax_error_has_line(factory_project) -> None:
    root = factory_project()
    (root / "sites" / "local.yaml").write_text("description: x\nbinds: [a, b\nenv: {}\n")
    with pytest.raises(ConfigError, match=r"local.yaml:\d+: invalid YAML"):
        load_sites(root)


def test_lines_of_keys_and_items() -> None:
    data = load_yaml_text("a: 1\nlist:\n  - x\n  - y\nnested:\n  b: 2\n")
    assert data.line_of("a") == 1 and data.line_of("list") == 2
    assert data["list"].line_of(1) == 4
    assert data["nested"].line_of("b") == 6


def test_duplicate_key_is_an_error_not_a_silent_override(tmp_path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_file(path)
    assert str(info.value) == f"{path}:3: a: duplicate key"


def test_missing_file_names_it(tmp_path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_yaml_file(tmp_path / "nope.yaml")
