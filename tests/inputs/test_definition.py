"""The lossless definition reader: byte-for-byte sections, {{ ARG }} discovery, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.definition import parse_definition, read_definition

LUMI_STYLE = (
    "Bootstrap: localimage\r\n"
    "From: {{ BASE }}\r\n"
    "\r\n"
    "%arguments\r\n"
    "    BASE=/appl/local/containers/sif-images/lumi-rocm-rocm-6.2.4.sif\r\n"
    "%environment\r\n"
    "\texport WITH_CONDA=\"source /opt/miniconda3/bin/activate pytorch\"\r\n"
    "%files\r\n"
    "  env.yml   /opt/env.yml\r\n"
    "%post -c /bin/bash\r\n"
    "    $WITH_CONDA\r\n"
    "    pip install {{ EXTRA }}   # trailing spaces kept   \r\n"
    "%help\r\n"
    "    PyTorch on ROCm for LUMI.\r\n"
    "%test\r\n"
    "    python -c 'import torch'\r\n"
)


def test_roundtrip_is_byte_exact(data_root: Path) -> None:
    for path in sorted((data_root / "recipes").glob("*.def")):
        assert read_definition(path).text == path.read_bytes().decode()
    definition = parse_definition(LUMI_STYLE)
    assert definition.text == LUMI_STYLE
    assert definition.section("post").args == " -c /bin/bash"
    assert definition.section("help").body == "    PyTorch on ROCm for LUMI.\r\n"
    assert [s.name for s in definition.sections] == [
        "arguments", "environment", "files", "post", "help", "test"]


def test_build_args_defaults_and_render() -> None:
    definition = parse_definition(LUMI_STYLE)
    assert definition.build_args == ("BASE", "EXTRA")
    assert definition.arg_lines == {"BASE": 2, "EXTRA": 12}
    assert definition.argument_defaults["BASE"].endswith("lumi-rocm-rocm-6.2.4.sif")
    assert definition.missing_args({}) == ["EXTRA"]
    rendered = definition.render({"EXTRA": "deepspeed"})
    assert "From: /appl/local/containers/sif-images/lumi-rocm-rocm-6.2.4.sif" in rendered
    assert "pip install deepspeed   #" in rendered
    with pytest.raises(ConfigError, match=r"^:?.*12: EXTRA: build argument \{\{ EXTRA \}\} has no"):
        parse_definition(LUMI_STYLE, path=Path("x.def")).render({})


def test_unknown_section_and_bootstrap() -> None:
    with pytest.raises(ConfigError, match=r"d.def:3: %enviroment: unknown section.*'environment'"):
        parse_definition("Bootstrap: docker\nFrom: x\n%enviroment\n  A=1\n",
                         path=Path("d.def")).validate()
    with pytest.raises(ConfigError, match=r"unknown bootstrap agent 'debootstrp'.*'debootstrap'"):
        parse_definition("Bootstrap: debootstrp\n").validate()
    with pytest.raises(ConfigError, match="no 'Bootstrap:' line"):
        parse_definition("From: x\n%post\n").validate()
    with pytest.raises(ConfigError, match="appears twice"):
        parse_definition("Bootstrap: scratch\n%post\n%post\n").validate()


def test_app_sections_may_repeat_per_app() -> None:
    definition = parse_definition("Bootstrap: scratch\n%apprun a\n x\n%apprun b\n y\n")
    definition.validate()
    assert [s.args for s in definition.sections] == [" a", " b"]


def test_header_garbage_is_reported_with_line() -> None:
    with pytest.raises(ConfigError, match=r"x.def:2: header line is not 'Key: value'"):
        parse_definition("Bootstrap: docker\nthis is not a header\n", path=Path("x.def"))
