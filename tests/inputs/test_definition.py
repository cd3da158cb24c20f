"""The lossless definition reader: byte-for-byte sections, {{ ARG }} discovery, validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.definition import parse_definition, read_definition
from containers.inputs.hostpaths import host_path_uses

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
    assert definition.missing_arg_lines(None) == {"BASE": 2, "EXTRA": 12}
    assert definition.argument_defaults["BASE"].endswith("lumi-rocm-rocm-6.2.4.sif")
    assert list(definition.missing_arg_lines({})) == ["EXTRA"]
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


def test_app_sections_may_repeat_per_app() -> None:
    definition = parse_definition("Bootstrap: scratch\n%apprun a\n x\n%apprun b\n y\n")
    definition.validate()
    assert [s.args for s in definition.sections] == [" a", " b"]


def test_header_garbage_is_reported_with_line() -> None:
    with pytest.raises(ConfigError, match=r"x.def:2: header line is not 'Key: value'"):
        parse_definition("Bootstrap: docker\nthis is not a header\n", path=Path("x.def"))


MULTI_STAGE = (
    "Bootstrap: localimage\n"
    "From: {{ BASE_IMAGE }}\n"
    "Stage: build\n"
    "\n"
    "%arguments\n"
    "    GREETING=hello\n"
    "%post\n"
    "    echo {{ GREETING }} > /built.txt\n"
    "\n"
    "Bootstrap: localimage\n"
    "From: {{ BASE_IMAGE }}\n"
    "Stage: final\n"
    "\n"
    "%arguments\n"
    "    GREETING=hi\n"
    "%files from build\n"
    "    /built.txt /opt/built.txt\n"
    "%files\n"
    "    \"{{ BUILD_CONTEXT }}\" /opt/build-context\n"
    "%post\n"
    "    test -s /opt/built.txt\n"
    "%test\n"
    "    grep -q {{ GREETING }} /opt/built.txt\n"
)


def test_multi_stage_definition_is_read_per_stage() -> None:
    definition = parse_definition(MULTI_STAGE, path=Path("m.def"))
    assert definition.text == MULTI_STAGE  # byte for byte: the build gets the file unchanged
    definition.validate()  # valid Apptainer: two %post and two %files, one per stage
    build, final = definition.stages
    assert (build.name, build.line, final.name, final.line) == ("build", 1, "final", 10)
    assert [s.name for s in build.sections] == ["arguments", "post"]
    assert [(s.name, s.args) for s in final.sections] == [
        ("arguments", ""), ("files", " from build"), ("files", ""), ("post", ""), ("test", "")]
    assert definition.final is final and definition.final.header["stage"] == "final"
    assert definition.section("test") is final.section("test")
    # a --build-arg serves every stage; a %arguments default only its own stage
    assert definition.build_args == ("BASE_IMAGE", "GREETING", "BUILD_CONTEXT")
    assert list(definition.missing_arg_lines({"BASE_IMAGE": "/b.sif"})) == ["BUILD_CONTEXT"]
    rendered = definition.render({"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/c"})
    assert "echo hello > /built.txt" in rendered and "grep -q hi /opt/built.txt" in rendered
    assert "grep -q bye" in definition.render({"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/c",
                                               "GREETING": "bye"})
    # as Apptainer says, the build stage's default does not serve the final stage
    alone = parse_definition(MULTI_STAGE.replace("%arguments\n    GREETING=hi\n", ""),
                             path=Path("m.def"))
    assert list(alone.missing_arg_lines({"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/c"})) == \
        ["GREETING"]
    with pytest.raises(ConfigError, match=r"m.def:21: GREETING: build argument \{\{ GREETING "
                                          r"\}\} has no value: .* a default in %arguments of "
                                          r"its stage"):
        alone.render({"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/c"})


@pytest.mark.parametrize("text, message", [
    (MULTI_STAGE.replace("%files from build", "%files from biuld"),
     r"m.def:16: %files: '%files from biuld': no earlier stage is named 'biuld' "
     r"\(did you mean 'build'\?\)"),
    (MULTI_STAGE.replace("Stage: final", "Stage: build"),
     "m.def:12: Stage: stage name 'build' is used twice"),
    (MULTI_STAGE.replace("%post\n    test -s", "%post\n    true\n  %post\n    test -s"),
     r"m.def:22: %post: the line '%post' starts with '%' after spaces: Apptainer reads it as a "
     r"section header with no name"),
    (MULTI_STAGE.replace("%files\n", "%files \n", 1).replace("%post\n    test", "%post\t\n    test"),
     r"m.def:20: %post\t: unknown section"),
])
def test_multi_stage_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_definition(text, path=Path("m.def")).validate()


def test_a_definition_that_is_a_fifo_or_device_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "x.def"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=rf"^{fifo}: not a regular file \(a FIFO\)"):
        read_definition(fifo)
    zero = tmp_path / "z.def"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"not a regular file \(a device\)"):
        read_definition(zero)
    with pytest.raises(ConfigError, match="definition file not found"):
        read_definition(tmp_path / "none.def")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "definitions"


def test_repeated_sections_are_appended_as_apptainer_does() -> None:
    """HPC Container Maker writes one %post and one %environment per building block: Apptainer
    appends each to the first."""
    path = FIXTURES / "hpccm-style.def"
    definition = read_definition(path)
    definition.validate()
    assert definition.text == path.read_text()  # byte for byte
    devel, runtime = definition.stages
    assert [s.name for s in devel.sections] == ["post", "environment", "post", "environment"]
    post = runtime.section("post")
    assert post is not None and post.line == 29
    assert post.body == ("    echo first-block > /opt/blocks\n\n"
                         "    echo second-block >> /opt/blocks\n\n")
    assert "TOOL_A" in runtime.section("environment").body
    assert "TOOL_B" in runtime.section("environment").body
    assert host_path_uses(definition) == []


@pytest.mark.parametrize("text, message", [
    ("Bootstrap: scratch\nFoo: bar\n", r"2: foo: unknown header keyword 'foo'"),
    ("Bootstrap: scratch\n%appenv\n export X=1\n", r"2: %appenv: '%appenv' names no app"),
    ("Bootstrap: scratch\n%labels\n a b\n%{\n", r"4: %\{: unknown section '%\{'"),
    ("Bootstrap: scratch\n%post-x\n", r"2: %post-x: unknown section '%post-x'"),
])
def test_what_apptainer_refuses_at_parse_time_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="d.def:" + message):
        parse_definition(text, path=Path("d.def")).validate()


@pytest.mark.parametrize("text, message", [
    # a multi-stage definition whose second stage names no base: Apptainer 1.4.5 builds the
    # working folder as the image
    ("Bootstrap: docker\nFrom: debian:12\nStage: build\n%post\n true\n"
     "Bootstrap: localimage\nStage: final\n%files from build\n /a /a\n",
     r"d.def:6: From: 'Bootstrap: localimage' takes its base from 'From:', and this stage has "
     r"none: Apptainer builds the working folder as the image"),
    ("Bootstrap: docker\n%labels\n a b\n", r"d.def:1: From: 'Bootstrap: docker' takes its base "
     r"from 'From:', and this stage has none: Apptainer fails to fetch an empty reference"),
    ("Bootstrap: oci\nFrom:  # nothing\n", r"d.def:2: From: .* Apptainer reads the working "
     r"folder as an OCI layout"),
])
def test_a_stage_without_the_from_its_bootstrap_takes_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_definition(text, path=Path("d.def")).validate()
    parse_definition("Bootstrap: scratch\n%labels\n a b\n").validate()  # no base to name


def test_what_apptainer_accepts_in_a_header_and_sections() -> None:
    text = ("Bootstrap: docker # a comment\nFrom: debian:12\nOtherURL1: https://x\n"
            "Include: a \\\n  b\n%pre\n echo\n%apprun one\n x\n%apprun one\n y\n")
    definition = parse_definition(text)
    definition.validate()
    assert definition.final.header["bootstrap"] == "docker"
    assert definition.final.header["include"] == "a b"
    assert definition.final.section("apprun").body == " x\n y\n"
    assert definition.text == text


#: Line breaks of Python's ``str.splitlines`` that are not Apptainer's (it cuts at ``\n`` only).
NOT_APPTAINER_BREAKS = ["\f", "\r", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("brk", NOT_APPTAINER_BREAKS)
def test_a_setup_line_is_one_line_whatever_breaks_python_would_see(brk: str) -> None:
    """The issue's reproduction: ``true <FF>%labels ;cat /etc/hostname > ...`` is one %setup
    line to Apptainer, which runs ``cat``; the checks see it whole."""
    text = ("Bootstrap: localimage\nFrom: {{ BASE_IMAGE }}\n%setup\n"
            f'    true {brk}%labels ;cat /etc/hostname > "${{APPTAINER_ROOTFS}}/leak"\n')
    definition = parse_definition(text)
    definition.validate()
    assert [s.name for s in definition.sections] == ["setup"] and definition.text == text
    assert [(u.section, u.line, u.paths) for u in host_path_uses(definition)] == [
        ("%setup", 4, ("/etc/hostname",))]


@pytest.mark.parametrize("brk", NOT_APPTAINER_BREAKS)
def test_bootstrap_after_a_break_apptainer_does_not_cut_is_no_stage(brk: str) -> None:
    """One stage for Apptainer (its stages begin at ``bootstrap:`` after a ``\\n``), one here."""
    text = ("Bootstrap: localimage\nFrom: {{ BASE_IMAGE }}\n%post\n"
            f"    echo one{brk}Bootstrap: docker\n")
    assert len(parse_definition(text).stages) == 1
    assert len(parse_definition(text.replace(brk, "\n")).stages) == 2


def test_crlf_reads_as_apptainer_reads_it() -> None:
    """``bufio.ScanLines`` drops one ``\\r`` before each ``\\n``: header values, section names
    and %files sources carry none; a second ``\\r`` stays (``%post\\r`` is no section)."""
    text = ("Bootstrap: localimage\r\nFrom: {{ BASE_IMAGE }}\r\n%files\r\n"
            "    /etc/passwd /opt/p\r\n%post\r\n    true\r\n")
    definition = parse_definition(text, path=Path("c.def"))
    definition.validate()
    assert definition.final.header == {"bootstrap": "localimage", "from": "{{ BASE_IMAGE }}"}
    assert [(s.name, s.args) for s in definition.sections] == [("files", ""), ("post", "")]
    assert [u.paths for u in host_path_uses(definition)] == [("/etc/passwd",)]
    assert definition.text == text
    with pytest.raises(ConfigError, match=r"c.def:5: %post\r: unknown section"):
        parse_definition(text.replace("%post\r\n", "%post\r\r\n"), path=Path("c.def")).validate()


@pytest.mark.parametrize("header, message", [
    ("%apprun my app", r"d.def:2: %apprun: '%apprun my app' names app 'my': Apptainer drops "
                       r"'app' \(an app name is one word\)"),
    ("%appinstall ../../etc", r"d.def:2: %appinstall: app name '../../etc' is not a plain name"),
    ("%appenv a;b", r"d.def:2: %appenv: app name 'a;b' is not a plain name"),
    ("%apprun  two-spaces", r"d.def:2: %apprun: '%apprun' names no app"),
])
def test_app_names_apptainer_reads_otherwise_are_refused(header: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_definition(f"Bootstrap: scratch\n{header}\n    true\n",
                         path=Path("d.def")).validate()
    parse_definition("Bootstrap: scratch\n%apprun my-app.v2_1 \n    true\n").validate()


def test_a_header_key_given_twice_is_refused() -> None:
    """Apptainer keeps the last ``From:``: a second one under the manifest's base would be the
    real base, unseen."""
    text = ("Bootstrap: localimage\nFrom: {{ BASE_IMAGE }}\n# later\n"
            "from: /root/host.sif\n%post\n    true\n")
    with pytest.raises(ConfigError, match=r"^d.def:4: from: header key 'from' is given twice "
                                          r"\(lines 2 and 4\); Apptainer uses only the last"):
        parse_definition(text, path=Path("d.def"))


def test_apps_without_post_run_in_the_image() -> None:
    """Apptainer adds an install step per app to %post (apps.go HandlePost), so a definition
    with only app sections runs a script in the image (--fakeroot here), one with only labels
    does not."""
    assert read_definition(FIXTURES / "apps-no-post.def").runs_in_image
    assert parse_definition("Bootstrap: scratch\n%appstart foo\n    true\n").runs_in_image
    assert not parse_definition("Bootstrap: scratch\n%labels\n    a b\n%test\n true\n"
                                ).runs_in_image
