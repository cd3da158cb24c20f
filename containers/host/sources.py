"""What a build inherits from the build host: its Debian mirror, pip configuration and CA certs.

Sites run local mirrors and TLS-intercepting proxies, so the project never names a package
registry itself: pip's sources are what ``pip config list`` says (``PIP_*`` variables included)."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from containers.errors import ConfigError
from containers.host import aptsources
from containers.host.process import capture

if TYPE_CHECKING:
    from concurrent.futures import Future

CA_DIR = Path("/usr/local/share/ca-certificates")
#: pip configuration scopes, lowest precedence first (pip's own order).
_SCOPES = ("global", "user", "site", ":env:")
#: python -> its ``pip config list`` asked ahead (:func:`start_pip_config`), taken once.
_EARLY: dict[str, Future[PipConfig]] = {}


def debian_mirror(suite: str = "bookworm", *, sources_dir: Path = aptsources.SOURCES_DIR,
                  sources_list: Path = aptsources.SOURCES_LIST) -> str:
    """The host's Debian mirror URI serving ``suite``, by :mod:`.aptsources`' rules."""
    mirror = aptsources.find_mirror(aptsources.read_sources(sources_dir, sources_list), suite)
    if mirror is None:
        raise ConfigError(f"no Debian mirror for '{suite}' in the host's apt sources; pass one "
                          f"with --build-arg MIRROR=URL", path=sources_dir, key="URIs")
    return mirror


@dataclass(frozen=True)
class PipConfig:
    """The pip settings that decide where packages come from."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    cert: str | None = None
    no_index: bool = False
    extras: dict[str, str] = field(default_factory=dict)

    def local_paths(self) -> list[str]:
        """Host folders the build must see (find-links folders and ``file://`` indexes)."""
        paths: dict[str, None] = {}  # in order, each once
        indexes = {self.index_url, *self.extra_index_urls}
        for location in filter(None, (self.index_url, *self.extra_index_urls, *self.find_links)):
            parsed = urlparse(location)
            if parsed.scheme not in ("file", ""):
                continue
            local = Path(unquote(parsed.path) if parsed.scheme else location).resolve()
            # a PEP 503 "simple" folder links its files relative to itself (../files/x.whl)
            if location in indexes and local.name == "simple":
                local = local.parent
            if local.exists():
                paths[str(local)] = None
        return list(paths)

    def pip_conf(self, *, cert_path: str | None) -> str:
        """A ``pip.conf`` equivalent to the host's, with the certificate at ``cert_path``."""
        settings = [("index-url", self.index_url),
                    ("extra-index-url", " ".join(self.extra_index_urls)),
                    ("find-links", " ".join(self.find_links)),
                    ("trusted-host", " ".join(self.trusted_hosts)),
                    ("no-index", "true" if self.no_index else None), ("cert", cert_path)]
        lines = [f"{k} = {v}" for k, v in settings if v]
        lines += [f"{k} = {v}" for k, v in sorted(self.extras.items())]
        return "\n".join(["[global]", *lines]) + "\n"

    def uv_toml(self) -> str:
        """The same sources for uv, which takes its certificate, timeout and proxy from ``pip.conf``
        (the install script); ``unsafe-best-match``: every index weighed alike, as pip does."""
        settings = {"index-url": self.index_url, "extra-index-url": list(self.extra_index_urls),
                    "find-links": list(self.find_links),
                    "allow-insecure-host": list(self.trusted_hosts), "no-index": self.no_index,
                    "index-strategy": "unsafe-best-match"}
        return "".join(f"{key} = {json.dumps(value)}\n"  # JSON's strings and lists are TOML's
                       for key, value in settings.items() if value)


_PASSED_ON = ("timeout", "default-timeout", "retries", "proxy")


def parse_pip_config_list(text: str) -> PipConfig:
    """Merge ``pip config list`` output (``scope.key='value'``) by pip's precedence."""
    found = [match.groups() for line in text.splitlines()
             if (match := re.match(r"^(:env:|[\w-]+)\.([\w-]+)='(.*)'$", line.strip()))]
    # A stable sort: of equal precedence the later line wins (an unknown scope ranks lowest).
    ranked = sorted(found, key=lambda m: _SCOPES.index(m[0]) if m[0] in _SCOPES else 0)
    values = {key: value for _, key, value in ranked}
    return PipConfig(
        index_url=values.get("index-url"),
        extra_index_urls=tuple(values.get("extra-index-url", "").split()),
        find_links=tuple(values.get("find-links", "").split()),
        trusted_hosts=tuple(values.get("trusted-host", "").split()),
        cert=values.get("cert"),
        no_index=values.get("no-index", "").lower() in ("1", "true", "yes", "on"),
        extras={k: values[k] for k in _PASSED_ON if k in values},
    )


def _pip_config(python: str) -> PipConfig:
    return parse_pip_config_list(capture([python, "-m", "pip", "config", "list"], timeout=60))


def start_pip_config(python: str = sys.executable) -> None:
    """Ask pip now, in a thread: its start (~0.25 s) then overlaps a build command's imports,
    and :func:`host_pip_config` takes the answer."""
    from concurrent.futures import ThreadPoolExecutor
    if python not in _EARLY:
        pool = ThreadPoolExecutor(1)
        _EARLY[python] = pool.submit(_pip_config, python)
        pool.shutdown(wait=False)  # the thread ends with its one task


def host_pip_config(python: str = sys.executable) -> PipConfig:
    """The build host's effective pip configuration, as its own pip reports it."""
    early = _EARLY.pop(python, None)
    return early.result() if early is not None else _pip_config(python)


def extra_ca_certificates(ca_dir: Path = CA_DIR) -> list[Path]:
    """Locally added CA certificates (what ``update-ca-certificates`` adds to the system bundle)."""
    return sorted(p for p in ca_dir.rglob("*.crt") if p.is_file()) if ca_dir.is_dir() else []
