"""The lossless definition reader: byte-for-byte sections, {{ ARG }} discovery, validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.definition import host_path_uses, parse_definition, read_definition

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
    assert definition.final is final and definition.header["stage"] == "final"
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


def test_host_paths_outside_the_build_context(data_root: Path) -> None:
    text = MULTI_STAGE.replace(
        "%files\n", "%setup\n    cp /etc/hosts ${APPTAINER_ROOTFS}/etc/hosts  # a host file\n"
        "    mkdir -p \"$APPTAINER_ROOTFS/opt\" 2>/dev/null\n"
        "%files\n    ~/secrets/key.pem /opt/key.pem\n    relative/file /opt/file\n")
    uses = host_path_uses(parse_definition(text))
    assert [(u.section, u.line, u.paths) for u in uses] == [
        ("%setup", 19, ("/etc/hosts",)), ("%files", 22, ("~/secrets/key.pem",)),
        ("%files", 23, ("relative/file",))]
    # %files from a stage, the build context and $APPTAINER_ROOTFS are not host paths, and the
    # shipped definitions read nothing outside the build context
    assert host_path_uses(parse_definition(MULTI_STAGE)) == []
    for path in sorted((data_root / "recipes").glob("*.def")):
        assert host_path_uses(read_definition(path)) == [], path


@pytest.mark.parametrize("line, paths", [
    ('    "{{ BUILD_CONTEXT }}/../../../../etc/shadow" /opt/shadow',
     ("{{ BUILD_CONTEXT }}/../../../../etc/shadow",)),
    # unquoted: Apptainer substitutes the argument before splitting, so the path is one word
    ("    {{ BUILD_CONTEXT }}/../../etc/shadow /opt/shadow",
     ("{{ BUILD_CONTEXT }}/../../etc/shadow",)),
    ("    {{BUILD_CONTEXT}}/a/../../x /opt/x", ("{{ BUILD_CONTEXT }}/a/../../x",)),
    ('    "{{ BUILD_CONTEXT }}-other/key" /opt/key', ("{{ BUILD_CONTEXT }}-other/key",)),
])
def test_files_climbing_out_of_the_build_context_are_host_paths(line: str, paths) -> None:
    text = MULTI_STAGE.replace("%files\n", f"%files\n{line}\n", 1)
    uses = [u for u in host_path_uses(parse_definition(text)) if u.section == "%files"]
    assert [u.paths for u in uses] == [paths]


def test_files_inside_the_build_context_are_not_host_paths() -> None:
    lines = ['    "{{ BUILD_CONTEXT }}" /opt/c', "    {{ BUILD_CONTEXT }}/a/../b /opt/b",
             "    {{ BUILD_CONTEXT }}/./x /opt/x"]
    text = MULTI_STAGE.replace("%files\n", "%files\n" + "\n".join(lines) + "\n", 1)
    assert host_path_uses(parse_definition(text)) == []


def test_setup_climbing_out_of_the_context_or_rootfs_is_a_host_path() -> None:
    text = MULTI_STAGE.replace(
        "%files\n", "%setup\n    cat {{ BUILD_CONTEXT }}/../../etc/hosts > /dev/null\n"
        "    cp \"${APPTAINER_ROOTFS}/../../etc/passwd\" x\n"
        "    cp {{ BUILD_CONTEXT }}/pip.conf \"$APPTAINER_ROOTFS/etc/\"\n%files\n", 1)
    uses = host_path_uses(parse_definition(text))
    assert [u.paths for u in uses] == [("{{ BUILD_CONTEXT }}/../../etc/hosts",),
                                       ("${APPTAINER_ROOTFS}/../../etc/passwd",)]


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
    appends each to the first, and merges %files sections with the same arguments."""
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
    [(args, sections)] = runtime.files_groups()
    assert args == "from devel" and [s.line for s in sections] == [26, 32]
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


def test_what_apptainer_accepts_in_a_header_and_sections() -> None:
    text = ("Bootstrap: docker # a comment\nFrom: debian:12\nOtherURL1: https://x\n"
            "Include: a \\\n  b\n%pre\n echo\n%apprun one\n x\n%apprun one\n y\n")
    definition = parse_definition(text)
    definition.validate()
    assert definition.header["bootstrap"] == "docker"
    assert definition.header["include"] == "a b"
    assert definition.final.section("apprun", app="one").body == " x\n y\n"
    assert definition.text == text


@pytest.mark.parametrize("line, paths", [
    ('curl -fsSL "https://example.org/a/b.tar.gz" -o "$APPTAINER_ROOTFS/opt/b.tgz"', ()),
    ("printf 'export PATH=/opt/tool/bin:$PATH\\n' > \"$APPTAINER_ROOTFS/.env\"", ()),
    ("printf '%s\\n' x > /etc/hosts-copy", ("/etc/hosts-copy",)),
    ('/usr/bin/env cp ~/x.pem "$APPTAINER_ROOTFS/x"', ("~/x.pem",)),
    ("cp \\", ()),
])
def test_setup_is_judged_on_shell_words(line: str, paths: tuple[str, ...]) -> None:
    """A URL in quotes and what printf prints are text, not host paths; a redirection's target
    and a path argument are."""
    text = f"Bootstrap: scratch\n%setup\n    {line}\n    /etc/hosts \"$APPTAINER_ROOTFS/x\"\n"
    uses = host_path_uses(parse_definition(text))
    expected = [(3, paths)] if paths else []
    if line.endswith("\\"):  # a continued line is one command with the next
        expected = [(3, ("/etc/hosts",))]
    else:
        expected.append((4, ("/etc/hosts",)))
    assert [(u.line, u.paths) for u in uses] == expected


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
    assert definition.header == {"bootstrap": "localimage", "from": "{{ BASE_IMAGE }}"}
    assert [(s.name, s.args) for s in definition.sections] == [("files", ""), ("post", "")]
    assert [u.paths for u in host_path_uses(definition)] == [("/etc/passwd",)]
    assert definition.text == text
    with pytest.raises(ConfigError, match=r"c.def:5: %post\r: unknown section"):
        parse_definition(text.replace("%post\r\n", "%post\r\r\n"), path=Path("c.def")).validate()


@pytest.mark.parametrize("lines, paths", [
    # '#' inside a word is no comment to the shell: cat runs
    (["true a#b ; cat /etc/hostname > x"], ("/etc/hostname",)),
    # a form feed is no blank to the shell: '\f#' is a command, not a comment
    (["\f# ; cat /etc/hostname > x"], ("/etc/hostname",)),
    # '\\' then a space ends the line: the next line is its own command, not echo's text
    (["echo hi \\ ", "/bin/cat /etc/hostname"], ("/etc/hostname",)),
    (["echo hi \\\\", "/bin/cat /etc/hostname"], ("/etc/hostname",)),
    (["# a comment \\", "cat /etc/hostname"], ("/etc/hostname",)),
    (['echo "#" ; cat /etc/hostname'], ("/etc/hostname",)),
    (["true # cat /etc/hostname"], ()),
])
def test_setup_comments_and_continuations_are_the_shells(lines: list[str], paths) -> None:
    text = "Bootstrap: scratch\n%setup\n" + "".join(f"    {line}\n" for line in lines)
    found = tuple(p for use in host_path_uses(parse_definition(text)) for p in use.paths)
    assert found == paths


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


def test_a_localimage_base_on_the_host_is_a_host_path() -> None:
    text = "Bootstrap: localimage\nFrom: {}\n%post\n    true\n"
    assert [(u.section, u.line, u.paths) for u in host_path_uses(parse_definition(
        text.format("/root/host.sif")))] == [("From", 2, ("/root/host.sif",))]
    for source in ("{{ BASE_IMAGE }}", "{{FOREIGN_ROOT}}", "{{ BUILD_CONTEXT }}/base.sif"):
        assert host_path_uses(parse_definition(text.format(source))) == [], source
    assert host_path_uses(parse_definition("Bootstrap: docker\nFrom: debian:12\n")) == []


def test_appfiles_and_pre_are_checked_for_host_paths() -> None:
    """%appfiles copies from the host as %files does (apps.go: the line up to '#', its first
    word); %pre runs on the host as %setup does."""
    text = ("Bootstrap: scratch\n%pre\n    cp /etc/shadow /tmp/x\n%appfiles tool\n"
            "    /etc/passwd passwd\n    {{ BUILD_CONTEXT }}/tool.sh bin/tool.sh\n"
            "    {{ BUILD_CONTEXT }}/../up#x y\n    # /etc/group group\n")
    assert [(u.section, u.line, u.paths) for u in host_path_uses(parse_definition(text))] == [
        ("%pre", 3, ("/etc/shadow", "/tmp/x")), ("%appfiles", 5, ("/etc/passwd",)),
        ("%appfiles", 7, ("{{ BUILD_CONTEXT }}/../up",))]


def test_apps_without_post_run_in_the_image() -> None:
    """Apptainer adds an install step per app to %post (apps.go HandlePost), so a definition
    with only app sections runs a script in the image (--fakeroot here), one with only labels
    does not."""
    assert read_definition(FIXTURES / "apps-no-post.def").runs_in_image
    assert parse_definition("Bootstrap: scratch\n%appstart foo\n    true\n").runs_in_image
    assert not parse_definition("Bootstrap: scratch\n%labels\n    a b\n%test\n true\n"
                                ).runs_in_image
