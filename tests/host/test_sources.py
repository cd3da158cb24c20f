"""What builds inherit from the host: Debian mirror, pip configuration, CA certificates."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.host import sources
from containers.host.sources import debian_mirror, parse_pip_config_list


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\n# comment\nURIs: http://mirror.example/debian/\nSuites: bookworm "
        "bookworm-updates\nComponents: main\n")
    assert debian_mirror("bookworm", sources_dir=tmp_path,
                         sources_list=tmp_path / "none") == "http://mirror.example/debian"


def test_mirror_from_one_line_list(tmp_path: Path) -> None:
    listing = tmp_path / "sources.list"
    listing.write_text("# x\ndeb [arch=amd64 signed-by=/k.gpg] http://local.mirror/debian "
                       "bookworm main\n")
    assert debian_mirror("bookworm", sources_dir=tmp_path / "d",
                         sources_list=listing) == "http://local.mirror/debian"
    with pytest.raises(ConfigError, match="no Debian mirror for 'trixie'.*--build-arg MIRROR"):
        debian_mirror("trixie", sources_dir=tmp_path / "d", sources_list=listing)


def test_pip_config_precedence_and_local_paths(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    index = tmp_path / "simple"
    wheels.mkdir()
    index.mkdir()
    config = parse_pip_config_list(
        f":env:.find-links='{wheels}'\n"
        "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        f"global.extra-index-url='file://{index} https://mirror.example/simple'\n"
        "global.find-links='/ignored/because/env/wins'\n"
        ":env:.default-timeout='180'\n"
        "site.index-url='https://proxy.example/pypi/simple'\n")
    assert config.find_links == (str(wheels),)
    assert config.index_url == "https://proxy.example/pypi/simple"
    assert config.local_paths() == [str(tmp_path), str(wheels)]  # index: the folder above simple/
    conf = config.pip_conf(cert_path="/ctx/cert.pem")
    assert conf.splitlines() == [
        "[global]", "index-url = https://proxy.example/pypi/simple",
        f"extra-index-url = file://{index} https://mirror.example/simple",
        f"find-links = {wheels}", "cert = /ctx/cert.pem", "default-timeout = 180"]


def test_uv_gets_the_same_sources_as_pip() -> None:
    """uv reads no pip.conf: uv.toml names the same indexes, links and trusted hosts, weighed
    as pip weighs them (every index alike), and parses as TOML whatever a path holds."""
    config = parse_pip_config_list(
        "global.index-url='https://proxy.example/pypi/simple'\n"
        "global.extra-index-url='file:///srv/a\"b/simple https://mirror.example/simple'\n"
        "global.find-links='/srv/wheels'\n"
        "global.trusted-host='proxy.example:8443'\n"
        "global.no-index='true'\n")
    assert tomllib.loads(config.uv_toml()) == {
        "index-url": "https://proxy.example/pypi/simple",
        "extra-index-url": ['file:///srv/a"b/simple', "https://mirror.example/simple"],
        "find-links": ["/srv/wheels"], "allow-insecure-host": ["proxy.example:8443"],
        "no-index": True, "index-strategy": "unsafe-best-match"}
    assert tomllib.loads(parse_pip_config_list("").uv_toml()) == {
        "index-strategy": "unsafe-best-match"}


def test_pip_config_asked_ahead_is_the_same_answer_taken_once(monkeypatch) -> None:
    """invoke build asks pip before its imports; the plan takes that answer, once."""
    asked = []
    monkeypatch.setattr(sources, "_pip_config", lambda python: asked.append(python) or
                        sources.PipConfig(index_url=f"https://mirror.invalid/{len(asked)}"))
    sources.start_pip_config("py")
    sources.start_pip_config("py")  # already asked: not again
    assert sources.host_pip_config("py").index_url == "https://mirror.invalid/1"
    assert sources.host_pip_config("py").index_url == "https://mirror.invalid/2"  # asked anew
    assert asked == ["py", "py"]
