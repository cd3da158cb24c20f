"""Located YAML: every mapping and list remembers its lines, and errors say where."""

from __future__ import annotations

import os

import pytest

from containers.errors import ConfigError
from containers.inputs.sites import load_sites
from containers.inputs.yamlsource import INPUT_LIMIT, load_yaml_file, load_yaml_text
from tests.inputs.test_recipes import bounded


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


@pytest.mark.parametrize("special,kind", [("fifo", "a FIFO"), ("zero", "a device"),
                                          ("folder", "a folder")])
def test_a_site_profile_that_is_not_a_regular_file_is_refused(factory_project, special: str,
                                                              kind: str) -> None:
    root = factory_project()
    path = root / "sites" / "odd.yaml"
    {"fifo": os.mkfifo, "folder": os.mkdir,
     "zero": lambda p: os.symlink("/dev/zero", p)}[special](path)
    if special == "zero":  # a link out of the project is refused before it is opened
        assert bounded(lambda: load_sites(root)) == (
            "ConfigError", f"{path}: a link to /dev/zero, outside the project {root}: inputs "
                           "must be the project's own files")
        assert bounded(lambda: load_yaml_file(path)) == (
            "ConfigError", f"{path}: not a regular file ({kind}): inputs are regular files of "
                           f"at most {INPUT_LIMIT} bytes")
        return
    assert bounded(lambda: load_sites(root)) == (
        "ConfigError", f"{path}: not a regular file ({kind}): inputs are regular files of at "
                       f"most {INPUT_LIMIT} bytes")


def test_a_huge_file_is_refused_unread(tmp_path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * INPUT_LIMIT + "\n")
    with pytest.raises(ConfigError, match=rf"big.yaml: larger than {INPUT_LIMIT} bytes"):
        load_yaml_file(path)


def test_a_byte_that_is_not_utf8_names_the_line(tmp_path) -> None:
    path = tmp_path / "x.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(ConfigError) as refused:
        load_yaml_file(path)
    assert str(refused.value) == f"{path}:2: not UTF-8 text (byte 0xe9 at offset 11)"


@pytest.mark.parametrize("text,line,message", [
    ("a: 1\nb: \x01\n", 2, "invalid YAML: character #x0001: special characters are not "
                            "allowed"),
    ("[" * 100_000, None, "invalid YAML: nested deeper than 100 levels"),
    # parsed, but a model's check or a copy of it would recurse past Python's limit
    ("a:\n" + "".join(" " * n + "- \n" for n in range(1, 150)), None,
     "invalid YAML: nested deeper than 100 levels"),
    ("[" * 250 + "]" * 250, None, "invalid YAML: nested deeper than 100 levels"),
])
def test_yaml_the_reader_refuses_is_one_line(tmp_path, text: str, line, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_yaml_text(text, path=tmp_path / "x.yaml")
    where = f"{tmp_path / 'x.yaml'}" + (f":{line}" if line else "")
    assert str(refused.value) == f"{where}: {message}"
