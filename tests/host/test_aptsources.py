"""The one apt sources parser: deb822 and one-line files, shared by the package and the script."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from containers.host import aptsources
from containers.host.aptsources import find_mirror, parse_deb822, parse_one_line, read_sources
from tests.fixtures import ROOT

SCRIPT = ROOT / "containers" / "host" / "aptsources.py"

DEB822 = """\
# The security archive first: it must not be taken for the main one.
Types: deb deb-src
URIs: http://mirror.example/debian-security/
Suites: bookworm-security
Components: main

types: deb-src
uris: http://src-only.example/debian
suites: bookworm
components: main

Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Enabled: no

Types: deb
# a comment inside a stanza
URIs: http://first.example/debian/ http://second.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD9K7pgXhVEnfKkHFHd
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: https://thirdparty.example/node
Suites: nodistro
Components: main
"""

ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://security.example/debian-security \
bookworm-security main
deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] \
http://local.mirror/debian/ bookworm main  # trailing comment
deb\thttp://tabs.example/debian\ttrixie main
deb http://updates.example/debian bookworm-updates main
"""


def test_deb822_stanzas_fields_and_continuations(tmp_path: Path) -> None:
    sources = parse_deb822(DEB822, tmp_path / "debian.sources")
    assert [s.line for s in sources] == [2, 7, 12, 17, 28]
    assert sources[0].types == ("deb", "deb-src") and sources[1].types == ("deb-src",)
    assert sources[1].uris == ("http://src-only.example/debian",)  # keys are case-insensitive
    assert not sources[2].enabled and sources[3].enabled
    assert sources[3].uris == ("http://first.example/debian/", "http://second.example/debian")
    assert sources[3].suites == ("bookworm", "bookworm-updates")
    # The inline key's lines did not become fields or stanzas of their own.
    assert find_mirror(sources, "bookworm") == "http://first.example/debian"  # first URI
    assert find_mirror(sources, "bookworm-updates") == "http://first.example/debian"
    assert find_mirror(sources, "bookworm-security") == "http://mirror.example/debian-security"
    assert find_mirror(sources, "nodistro") == "https://thirdparty.example/node"
    assert find_mirror(sources, "trixie") is None


def test_one_line_options_deb_src_and_suites(tmp_path: Path) -> None:
    sources = parse_one_line(ONE_LINE, tmp_path / "sources.list")
    assert [s.types for s in sources] == [("deb-src",), ("deb",), ("deb",), ("deb",), ("deb",)]
    assert find_mirror(sources, "bookworm") == "http://local.mirror/debian"  # not deb-src
    assert find_mirror(sources, "bookworm-security") == "http://security.example/debian-security"
    assert find_mirror(sources, "bookworm-updates") == "http://updates.example/debian"
    assert find_mirror(sources, "trixie") == "http://tabs.example/debian"
    assert [s.line for s in sources] == [2, 3, 4, 5, 6]


def test_deb822_files_come_before_one_line_files(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    listing = tmp_path / "sources.list"
    listing.write_text("deb http://list.example/debian bookworm main\n")
    (parts / "b.list").write_text("deb http://parts-list.example/debian trixie main\n")
    (parts / "z.sources").write_text("Types: deb\nURIs: http://z.example/debian\n"
                                     "Suites: bookworm\n")
    (parts / "a.sources.disabled").write_text("Types: deb\nURIs: http://off.example/debian\n"
                                              "Suites: bookworm\n")
    sources = read_sources(parts, listing)
    assert [s.path.name for s in sources] == ["z.sources", "sources.list", "b.list"]
    assert find_mirror(sources, "bookworm") == "http://z.example/debian"
    assert find_mirror(sources, "trixie") == "http://parts-list.example/debian"
    assert read_sources(tmp_path / "none", tmp_path / "none.list") == []


def test_host_release(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    assert aptsources.host_release(release) == "bookworm"
    release.write_text('NAME="Some Linux"\n')
    assert aptsources.host_release(release) is None
    assert aptsources.host_release(tmp_path / "missing") is None


def test_runs_as_a_script_with_the_system_python(tmp_path: Path) -> None:
    """install-apptainer.sh runs it before the venv exists: plain python3, no package imports."""
    (tmp_path / "debian.sources").write_text(DEB822)
    argv = ["python3", "-I", str(SCRIPT), "--sources-dir", str(tmp_path), "--sources-list",
            str(tmp_path / "none")]
    found = subprocess.run([*argv, "--suite", "bookworm"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert (found.returncode, found.stdout, found.stderr) == (0, "http://first.example/debian\n",
                                                              "")
    missing = subprocess.run([*argv, "--suite", "sid"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no enabled 'deb' source for suite 'sid'" in missing.stderr


def test_install_script_detects_what_the_package_detects(capsys) -> None:
    """The script's detect_mirror and the package read the host's sources the same way."""
    script = ROOT / "scripts" / "install-apptainer.sh"
    shell = subprocess.run(["bash", "-c", f'source "{script}"; detect_mirror'],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin"})
    code = aptsources.main([])
    assert (shell.returncode, shell.stdout) == (code, capsys.readouterr().out)
    override = subprocess.run(["bash", "-c", f'source "{script}"; detect_mirror'],
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin",
                                   "APPTAINER_DEBIAN_MIRROR": "http://override.example/debian/"})
    assert override.stdout == "http://override.example/debian\n"


@pytest.mark.parametrize("text", ["", "# only a comment\n", "deb\n", "deb http://x.example\n"])
def test_incomplete_entries_are_ignored(text: str, tmp_path: Path) -> None:
    assert parse_one_line(text, tmp_path / "x.list") == []
    assert find_mirror(parse_deb822(text, tmp_path / "x.sources"), "bookworm") is None
