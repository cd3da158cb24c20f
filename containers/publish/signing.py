"""PGP signing of published images with the runtime's own keyring, and checking signatures.

The keyring is resolved once, used only while it is the user's alone; no key server is reached,
and a key with a passphrase is refused (nothing would answer the prompt)."""

from __future__ import annotations

import os
import re
import shlex
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from containers.errors import CommandFailed, ConfigError, VerdictFailed
from containers.files import copy_hashing, file_type, json_value, not_yours_alone
from containers.host.process import capture
from containers.host.runtime import Runtime
from containers.image.cache import cache_problem

_KEY_BLOCK = re.compile(r"^(\d+)\)\s+User:\s*(.*?)\s*$.*?^\s+Fingerprint:\s*([0-9A-Fa-f]+)",
                        re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class SigningKey:
    index: int
    user: str
    fingerprint: str  # upper-case hex, as `apptainer key list` prints it
    keysdir: Path  # the keyring it was listed from: signing and exporting read this one


def parse_key_list(text: str, keysdir: Path) -> list[SigningKey]:
    """The keys of ``apptainer key list [--secret]`` output of ``keysdir``, in index order."""
    return [SigningKey(int(m.group(1)), m.group(2), m.group(3).upper(), keysdir)
            for m in _KEY_BLOCK.finditer(text)]


#: The keyring's files, as Apptainer names them in its keys folder.
RINGS = ("pgp-public", "pgp-secret")


def keyring(runtime: Runtime, configured: Path | None,
            environ: Mapping[str, str] | None = None) -> Path:
    """The keyring folder publishing uses, resolved once for signing and look-ups."""
    keysdir = configured or runtime.keysdir(environ)
    if problem := keyring_problem(keysdir):
        raise ConfigError(f"{problem}: refusing to sign with it or publish its key (whoever can "
                          "change a keyring chooses what is signed as the site's); use a "
                          "keyring only you can write", key="sign_keysdir")
    return keysdir


def keyring_problem(keysdir: Path) -> str:
    """Why ``keysdir`` or a key file in it is not the user's alone (empty: it is)."""
    problem = cache_problem(keysdir, parts=False)
    for ring in () if problem else (keysdir / name for name in RINGS):
        try:
            info = os.lstat(ring)
        except FileNotFoundError:
            continue
        why = not_yours_alone(ring, info, uid=os.getuid()) or (
            None if stat.S_ISREG(info.st_mode) else f"is {file_type(info.st_mode)}, not a file")
        if why:
            return f"{ring} {why}"
    return problem


def newpair_argv(runtime: Runtime, *, name: str, email: str, comment: str) -> list[str]:
    """Every value ``key newpair`` would prompt for (Apptainer 1.4 asks for a comment too)."""
    return [runtime.binary, "key", "newpair", f"--name={name}", f"--email={email}",
            f"--comment={comment}", "--password=", "--push=false"]


def _env(runtime: Runtime, keysdir: Path) -> dict[str, str]:
    return {**os.environ, **runtime.keyring_env(keysdir)}


def signing_key(runtime: Runtime, keysdir: Path, keyidx: int) -> SigningKey:
    """The secret key of ``keysdir`` that will sign, checked before anything is copied."""
    keys = parse_key_list(capture(runtime.key_list_argv(secret=True),
                                  env=_env(runtime, keysdir), timeout=60), keysdir)
    chosen = next((k for k in keys if k.index == keyidx), None)
    if chosen is None:
        found = f"it holds {len(keys)} secret keys" if keys else "it holds no secret key"
        env = [f"{k}={shlex.quote(v)}" for k, v in runtime.keyring_env(keysdir).items()]
        recipe = shlex.join(newpair_argv(runtime, name="NAME", email="EMAIL",
                                         comment="COMMENT"))
        raise ConfigError(
            f"no secret key #{keyidx} in the keyring {keysdir} ({found}); create one with: "
            f"{' '.join(env)} {recipe} (or set containers.sign_keysdir / sign_keyidx)",
            key="sign_keyidx")
    return chosen


def sign(runtime: Runtime, image: Path, *, keysdir: Path, keyidx: int) -> None:
    try:
        capture(runtime.sign_argv(image, keyidx=keyidx), env=_env(runtime, keysdir), timeout=600)
    except CommandFailed as exc:
        if "checksum failure" in str(exc) or "passphrase" in str(exc):
            raise ConfigError(f"secret key #{keyidx} has a passphrase; publishing signs without "
                              "a terminal, so use a key without one (apptainer key newpair "
                              "--password=) kept readable by the publishing account only",
                              key="sign_keyidx") from exc
        raise


class _Signer(BaseModel):
    """One signer in ``verify --json``'s report, read strictly (never coerced)."""

    model_config = ConfigDict(strict=True)
    Fingerprint: str
    KeyCheck: bool = False
    DataCheck: bool = False


class _SignerKey(BaseModel):
    model_config = ConfigDict(strict=True)
    Signer: _Signer


class _Verified(BaseModel):
    model_config = ConfigDict(strict=True)
    SignerKeys: list[_SignerKey] | None = None


def signers(runtime: Runtime, image: Path, *, keysdir: Path) -> set[str]:
    """Fingerprints (upper-case) whose signatures over ``image`` verify against ``keysdir``."""
    try:
        out = capture(runtime.verify_argv(image), env=_env(runtime, keysdir), timeout=600)
    except CommandFailed as exc:
        raise VerdictFailed(f"{image}: signature check failed: {exc}") from exc
    try:
        report = _Verified.model_validate(json_value(out or "{}"))
    except ValidationError as exc:
        error = exc.errors()[0]
        raise VerdictFailed(f"{image}: signature check failed: {runtime.flavour} verify's report "
                            f"has {'.'.join(map(str, error['loc'])) or 'no object'}: "
                            f"{error['msg']}") from None
    except ValueError as exc:
        raise VerdictFailed(f"{image}: signature check failed: {runtime.flavour} verify printed "
                            f"no JSON report ({exc})") from None
    found = {key.Signer.Fingerprint.upper() for key in report.SignerKeys or ()
             if key.Signer.KeyCheck and key.Signer.DataCheck}
    if not found:
        raise VerdictFailed(f"{image}: no valid signature")
    return found


def _gpg(home: Path, *args: str) -> list[str]:
    """A throwaway home: no agent, user config, key server, or keyring but those named."""
    return ["gpg", "--homedir", str(home), "--batch", "--quiet", "--no-autostart",
            "--no-default-keyring", *args]


def key_fingerprints(key_file: Path) -> list[str]:
    """The primary-key fingerprints (upper-case) in an OpenPGP key file, as ``gpg`` reads it."""
    with tempfile.TemporaryDirectory(prefix="containers-gpg-") as home:
        out = capture(_gpg(Path(home), "--with-colons", "--show-keys", str(key_file)),
                      timeout=60)
    fingerprints, primary = [], False
    for line in out.splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sub", "sec", "ssb"):
            primary = fields[0] in ("pub", "sec")
        elif fields[0] == "fpr" and primary and len(fields) > 9:
            fingerprints.append(fields[9].upper())
            primary = False
    return fingerprints


def public_key(keysdir: Path, fingerprint: str) -> bytes:
    """The public key ``fingerprint`` exported by ``gpg`` from a copy of the keyring."""
    ring = keysdir / "pgp-public"
    if not ring.is_file():
        raise ConfigError("no public keyring here (create a key with apptainer key newpair)",
                          path=ring)
    with tempfile.TemporaryDirectory(prefix="containers-gpg-") as name:
        home = Path(name)
        copy_hashing(ring, home / "pgp-public")
        out = home / "key.pgp"
        try:
            capture(_gpg(home, "--keyring", str(home / "pgp-public"), "--output", str(out),
                         "--export", fingerprint.upper()), timeout=60)
        except CommandFailed as exc:
            raise ConfigError(f"cannot export public key {fingerprint}: {exc}", path=ring) \
                from exc
        data = out.read_bytes() if out.is_file() else b""
        found = key_fingerprints(out) if data else []
    if found != [fingerprint.upper()]:
        raise ConfigError(f"public key {fingerprint} is not in the keyring", path=ring)
    return data


def verify_with_key(runtime: Runtime, image: Path, key_file: Path, fingerprint: str) -> None:
    """Check ``image`` was signed by ``fingerprint``, using only the published ``key_file``."""
    with tempfile.TemporaryDirectory(prefix="containers-verify-") as keysdir:
        try:
            capture(runtime.key_import_argv(key_file), env=_env(runtime, Path(keysdir)),
                    timeout=60)
        except CommandFailed as exc:
            raise VerdictFailed(f"{key_file}: cannot import the public key: {exc}") from exc
        found = signers(runtime, image, keysdir=Path(keysdir))
    if fingerprint.upper() not in found:
        raise VerdictFailed(f"{image}: signed by {', '.join(sorted(found))}, not by the "
                            f"catalogue's key {fingerprint}")
