"""The container runtime: which binary, which flavour, and the argv of every call made to it.

Sites run Apptainer or SingularityCE (LUMI: ``singularity`` 4.1.3); the container environment
goes by ``--env``, which both accept, unlike their host-side variables' prefixes."""

from __future__ import annotations

import os
import pwd
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from containers.errors import CommandFailed, RuntimeNotFound
from containers.host.process import capture

#: What a bound path cannot hold: ``--bind`` splits at commas and colons, a definition at newlines.
BIND_SPECIALS = ",:\n"
#: Apptainer expands a ``%files`` source as a shell word (it escapes spaces only), so these
#: characters would be interpreted (variables, quotes, globs, operators) instead of copied.
FILES_SPECIALS = "$`\\'\"()&;|<>*?[]{}\t\n"


@dataclass(frozen=True)
class Flavour:
    """What a runtime flavour does its own way (:meth:`Runtime.keysdir` reads the keyring's)."""

    variables: tuple[str, ...]
    config_variables: tuple[str, ...]
    config: str
    folder: str
    home_from_env: bool
    #: The variables it reads binds from, preferred first: with both set, Apptainer keeps
    #: APPTAINER_BIND alone ("have different values, using the latter"; FACTS.md section 11).
    bind_variables: tuple[str, ...]
    #: Whether it takes mksquashfs options from ``APPTAINER_MKSQUASHFS_ARGS`` (zstd, levels).
    mksquashfs_args: bool
    #: Whether it answers to ``singularity`` (what cotainr calls) only through a link.
    singularity_link: bool


#: Each flavour, by the name ``--version`` reports; its keyring as its own source finds it
#: (Apptainer's pkg/syfs/syfs.go, SingularityCE's pkg/sypgp/sypgp.go: docs/publishing.md).
FLAVOURS = {
    "apptainer": Flavour(("APPTAINER_KEYSDIR", "SINGULARITY_SYPGPDIR"),
                         ("APPTAINER_CONFIGDIR", "SINGULARITY_CONFIGDIR"), ".apptainer", "keys",
                         home_from_env=True,
                         bind_variables=("APPTAINER_BIND", "SINGULARITY_BIND"),
                         mksquashfs_args=True, singularity_link=True),
    "singularity": Flavour(("SINGULARITY_SYPGPDIR",), ("SINGULARITY_CONFIGDIR",), ".singularity",
                           "sypgp", home_from_env=False, bind_variables=("SINGULARITY_BIND",),
                           mksquashfs_args=False, singularity_link=False),
}


def first_set(environ: Mapping[str, str], names: Iterable[str]) -> str:
    return next((environ[name] for name in names if environ.get(name)), "")


def build_arg(key: str, value: str) -> str:
    """``KEY=VALUE`` as ``--build-arg`` reads it: the flag's value is a CSV record, so a pair
    holding a comma, a double quote or a newline is CSV-quoted (spaces pass unchanged)."""
    pair = f"{key}={value}"
    if any(c in pair for c in ',"\r\n'):
        return '"' + pair.replace('"', '""') + '"'
    return pair


def repeated(flag: str, values: Iterable[str]) -> list[str]:
    return [word for value in values for word in (flag, value)]


def unsafe_characters(path: str, specials: str) -> str:
    return "".join(dict.fromkeys(c for c in path if c in specials))


@dataclass(frozen=True)
class Runtime:
    """A container runtime binary and what it reported about itself."""

    binary: str
    flavour: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.flavour} {self.version} ({self.binary})"

    @property
    def own(self) -> Flavour:
        return FLAVOURS[self.flavour]

    def build_argv(self, *, output: Path, spec: Path | str, build_args: Mapping[str, str],
                   binds: Iterable[str] = (), fakeroot: bool = False,
                   arch: str | None = None) -> list[str]:
        """``--force``: else a base image's labels win; ``--notest``: the builder tests."""
        argv = [self.binary, "build", "--force", "--notest"]
        if fakeroot:
            argv.append("--fakeroot")
        if arch:  # the architecture pulled from a registry (docker/oras/library bootstraps)
            argv += ["--arch", arch]
        argv += repeated("--build-arg", (build_arg(k, v) for k, v in build_args.items()))
        return argv + repeated("--bind", binds) + [str(output), str(spec)]

    def exec_argv(self, *, image: Path | str, command: Sequence[str], gpu_flag: str | None = None,
                  binds: Iterable[str] = (), env: Mapping[str, str] | None = None,
                  options: Iterable[str] = ()) -> list[str]:
        return [self.binary, "exec", *options, *([gpu_flag] if gpu_flag else []),
                *repeated("--bind", binds),
                *repeated("--env", (f"{k}={v}" for k, v in (env or {}).items())),
                str(image), *command]

    def bind_env(self, environ: Mapping[str, str], binds: Iterable[str]) -> dict[str, str]:
        """The bind variables of a step adding ``binds`` to the user's, under every name."""
        names = self.own.bind_variables
        value = ",".join(filter(None, (first_set(environ, names), *binds)))
        return {name: value for name in names}

    def test_argv(self, image: Path | str, binds: Iterable[str] = ()) -> list[str]:
        return [self.binary, "test", *repeated("--bind", binds), str(image)]

    def inspect_argv(self, image: Path | str) -> list[str]:
        return [self.binary, "inspect", "--json", str(image)]

    def sign_argv(self, image: Path | str, *, keyidx: int = 0) -> list[str]:
        """PGP-sign every object group with key ``keyidx`` (no passphrase: nothing answers)."""
        return [self.binary, "sign", "--keyidx", str(keyidx), str(image)]

    def verify_argv(self, image: Path | str) -> list[str]:
        """``--local``: only the local keyring, so verification never waits on a key server."""
        return [self.binary, "verify", "--local", "--json", str(image)]

    def key_list_argv(self, *, secret: bool = False) -> list[str]:
        return [self.binary, "key", "list", *(["--secret"] if secret else [])]

    def key_import_argv(self, key_file: Path | str) -> list[str]:
        return [self.binary, "key", "import", str(key_file)]

    def keyring_env(self, keysdir: Path | str | None) -> dict[str, str]:
        """Variables pointing sign/verify/key at ``keysdir`` (none: nothing set, so the runtime
        follows :meth:`keysdir`'s rule). SingularityCE reads ``SINGULARITY_SYPGPDIR`` only."""
        if not keysdir:
            return {}
        return {self.own.variables[0]: str(keysdir)}

    def keysdir(self, environ: Mapping[str, str] | None = None) -> Path:
        """The keyring folder this runtime reads when none is named, in ``environ``."""
        environ = os.environ if environ is None else environ
        rule = self.own
        if named := first_set(environ, rule.variables):
            return Path(named)
        if config := first_set(environ, rule.config_variables):
            return Path(config) / rule.folder
        home = (environ.get("HOME") if rule.home_from_env else "") \
            or pwd.getpwuid(os.getuid()).pw_dir
        return Path(home) / rule.config / rule.folder


def parse_version(text: str) -> tuple[str, str]:
    """``(flavour, version)`` from ``apptainer version 1.4.5`` or ``singularity-ce version
    4.1.3`` (Apptainer's ``singularity`` link says ``apptainer``)."""
    match = re.search(r"(apptainer|singularity)(?:-?ce)?\s+version\s+(\S+)", text, re.I)
    if not match:
        raise RuntimeNotFound(f"cannot read a runtime version from: {text.strip()[:80]!r}")
    return match.group(1).lower(), match.group(2)


def find_runtime(preferred: str = "auto") -> Runtime:
    """``auto``: ``apptainer`` then ``singularity`` on PATH; else a flavour name or a path."""
    names = list(FLAVOURS) if preferred == "auto" else [preferred]
    for binary in filter(None, map(shutil.which, names)):
        try:
            flavour, version = parse_version(capture([binary, "--version"], timeout=30))
        except CommandFailed as exc:
            raise RuntimeNotFound(f"{binary} is on PATH but does not run: {exc}") from exc
        return Runtime(binary=binary, flavour=flavour, version=version)
    raise RuntimeNotFound(f"no container runtime found (looked for {', '.join(names)} on PATH); "
                          "install one with scripts/install-apptainer.sh or set "
                          "containers.runtime in invoke.yaml")


def assumed_runtime(flavour: str) -> Runtime:
    """A runtime for planning only (``--dry-run`` on a machine that has none)."""
    return Runtime(binary=flavour, flavour=flavour, version="unknown")
