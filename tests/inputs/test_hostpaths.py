"""containers/inputs/hostpaths.py: what a definition reads on the build host, outside the build
context: %setup and %pre judged on a shell's words, %files and %appfiles on Apptainer's, a
localimage base on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.inputs.definition import parse_definition, read_definition
from containers.inputs.hostpaths import host_path_uses
from tests.inputs.test_definition import MULTI_STAGE


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


@pytest.mark.parametrize("line, paths", [
    # a relative path after a cd out of the image reads the host: the cd is the host path
    ('cd / && cat etc/hostname > "$APPTAINER_ROOTFS/etc/built-on"', ("cd /",)),
    ("(cd /etc; cat hostname) > \"$APPTAINER_ROOTFS/x\"", ("cd /etc",)),
    ("cd -P .. && cat x", ("cd ..",)),
    ("cd && cat .ssh/id_rsa", ("cd ~",)),  # home
    ("cd - > /dev/null", ("cd -",)),
    ('pushd "$HOME"', ("pushd $HOME",)),
    ('cd "${APPTAINER_ROOTFS}/../.." && cat etc/shadow', ("${APPTAINER_ROOTFS}/../..",)),
    # into the image's root or the build context (or below): no host folder
    ('cd "$APPTAINER_ROOTFS" && ln -s usr/lib lib64', ()),
    ("cd ${SINGULARITY_ROOTFS}/opt; tar xf {{ BUILD_CONTEXT }}/t.tar", ()),
    ("cd -- {{ BUILD_CONTEXT }}/sub && cp a \"$APPTAINER_ROOTFS/a\"", ()),
    ("echo cd /", ()),
])
def test_setup_changing_folder_out_of_the_image_is_a_host_path(line: str, paths) -> None:
    text = f"Bootstrap: scratch\n%setup\n    {line}\n"
    assert [u.paths for u in host_path_uses(parse_definition(text))] == ([paths] if paths else [])
