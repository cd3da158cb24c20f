"""PGP signing of published images with the runtime's own keyring, and checking signatures.

``apptainer sign`` and ``verify`` read the keyring from ``APPTAINER_KEYSDIR`` (SingularityCE:
``SINGULARITY_SYPGPDIR``), so the keyring is chosen through the environment
(:meth:`Runtime.keyring_env`). Nothing here reaches a key server: ``verify --local`` only, and
keys are never pushed. A key with a passphrase cannot be used (``apptainer`` would prompt, and
nothing answers): the error says so.

``apptainer key export`` always prompts for a key index, so the public key published beside the
images is cut out of the keyring file (``pgp-public``) here: a keyring is a sequence of OpenPGP
packets, and one key is its public-key packet and the packets that follow up to the next one.
``verify`` imports that file into a throwaway keyring, so anyone can check a published image
against the key the catalogue names, whatever their own keyring holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from containers.errors import CommandFailed, ConfigError, VerdictFailed
from containers.host.process import capture
from containers.host.runtime import Runtime

PUBLIC_KEY_TAG = 6
_KEY_BLOCK = re.compile(r"^(\d+)\)\s+User:\s*(.*?)\s*$.*?^\s+Fingerprint:\s*([0-9A-Fa-f]+)",
                        re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class SigningKey:
    index: int
    user: str
    fingerprint: str  # upper-case hex, as `apptainer key list` prints it


def parse_key_list(text: str) -> list[SigningKey]:
    """The keys of ``apptainer key list [--secret]`` output, in index order."""
    return [SigningKey(int(m.group(1)), m.group(2), m.group(3).upper())
            for m in _KEY_BLOCK.finditer(text)]


def default_keysdir(runtime: Runtime) -> Path:
    return Path.home() / (".apptainer/keys" if runtime.flavour == "apptainer"
                          else ".singularity/sypgp")


def _env(runtime: Runtime, keysdir: Path | None) -> dict[str, str]:
    return {**os.environ, **runtime.keyring_env(keysdir)}


def signing_key(runtime: Runtime, keysdir: Path | None, keyidx: int) -> SigningKey:
    """The secret key that will sign, checked before anything is copied."""
    where = keysdir or default_keysdir(runtime)
    keys = parse_key_list(capture(runtime.key_list_argv(secret=True),
                                  env=_env(runtime, keysdir), timeout=60))
    chosen = next((k for k in keys if k.index == keyidx), None)
    if chosen is None:
        found = f"it holds {len(keys)} secret keys" if keys else "it holds no secret key"
        raise ConfigError(
            f"no secret key #{keyidx} in the keyring {where} ({found}); create one with: "
            f"{runtime.binary} key newpair --name=NAME --email=EMAIL --password= --push=false "
            "(or set containers.sign_keysdir / sign_keyidx)", key="sign_keyidx")
    return chosen


def sign(runtime: Runtime, image: Path, *, keysdir: Path | None, keyidx: int) -> None:
    try:
        capture(runtime.sign_argv(image, keyidx=keyidx), env=_env(runtime, keysdir), timeout=600)
    except CommandFailed as exc:
        if "checksum failure" in str(exc) or "passphrase" in str(exc):
            raise ConfigError(f"secret key #{keyidx} has a passphrase; publishing signs without "
                              "a terminal, so use a key without one (apptainer key newpair "
                              "--password=) kept readable by the publishing account only",
                              key="sign_keyidx") from None
        raise


def signers(runtime: Runtime, image: Path, *, keysdir: Path | None) -> set[str]:
    """Fingerprints (upper-case) whose signatures over ``image`` verify against ``keysdir``;
    a :class:`VerdictFailed` naming the image when there is none or one does not verify."""
    try:
        out = capture(runtime.verify_argv(image), env=_env(runtime, keysdir), timeout=600)
    except CommandFailed as exc:
        raise VerdictFailed(f"{image}: signature check failed: {exc}") from None
    data = json.loads(out or "{}")
    found = {s["Signer"]["Fingerprint"].upper() for s in data.get("SignerKeys") or []
             if s.get("Signer", {}).get("KeyCheck") and s["Signer"].get("DataCheck")}
    if not found:
        raise VerdictFailed(f"{image}: no valid signature")
    return found


# ------------------------------------------------------------------ public key out of a keyring
def _packets(data: bytes) -> list[tuple[int, int, int, int]]:
    """``(tag, start, end, body start)`` of each OpenPGP packet (RFC 4880 §4.2, old and new
    headers)."""
    packets, pos = [], 0
    while pos < len(data):
        head = data[pos]
        if not head & 0x80:
            raise ValueError(f"not an OpenPGP packet at byte {pos}")
        if head & 0x40:  # new format
            tag, first = head & 0x3F, data[pos + 1]
            if first < 192:
                length, header = first, 2
            elif first < 224:
                length, header = ((first - 192) << 8) + data[pos + 2] + 192, 3
            elif first == 255:
                length, header = int.from_bytes(data[pos + 2:pos + 6], "big"), 6
            else:
                raise ValueError("partial-length packets do not occur in keyrings")
        else:  # old format
            tag, size = (head >> 2) & 0x0F, (1, 2, 4)[head & 0x03] if head & 0x03 != 3 else 0
            if not size:
                raise ValueError("indeterminate-length packets do not occur in keyrings")
            length, header = int.from_bytes(data[pos + 1:pos + 1 + size], "big"), 1 + size
        end = pos + header + length
        if end > len(data):
            raise ValueError("truncated OpenPGP packet")
        packets.append((tag, pos, end, pos + header))
        pos = end
    return packets


def split_keyring(data: bytes) -> dict[str, bytes]:
    """Each (version 4) key of a binary keyring by its fingerprint: SHA-1 over 0x99, the
    two-byte body length and the public-key packet body (RFC 4880 §12.2)."""
    keys: dict[str, bytes] = {}
    current: str | None = None
    for tag, start, end, body in _packets(data):
        if tag == PUBLIC_KEY_TAG:
            packet = data[body:end]
            current = hashlib.sha1(b"\x99" + len(packet).to_bytes(2, "big")
                                   + packet).hexdigest().upper()
            keys[current] = b""
        if current is not None:
            keys[current] += data[start:end]
    return keys


def public_key(runtime: Runtime, keysdir: Path | None, fingerprint: str) -> bytes:
    """The public key ``fingerprint`` from the keyring's ``pgp-public`` file."""
    path = (keysdir or default_keysdir(runtime)) / "pgp-public"
    try:
        keys = split_keyring(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the public keyring: {exc}", path=path) from None
    if fingerprint.upper() not in keys:
        raise ConfigError(f"public key {fingerprint} is not in the keyring", path=path)
    return keys[fingerprint.upper()]


def verify_with_key(runtime: Runtime, image: Path, key_file: Path, fingerprint: str) -> None:
    """Check ``image`` was signed by ``fingerprint``, using only the published ``key_file``."""
    with tempfile.TemporaryDirectory(prefix="containers-verify-") as keysdir:
        try:
            capture(runtime.key_import_argv(key_file), env=_env(runtime, Path(keysdir)),
                    timeout=60)
        except CommandFailed as exc:
            raise VerdictFailed(f"{key_file}: cannot import the public key: {exc}") from None
        found = signers(runtime, image, keysdir=Path(keysdir))
    if fingerprint.upper() not in found:
        raise VerdictFailed(f"{image}: signed by {', '.join(sorted(found))}, not by the "
                          f"catalogue's key {fingerprint}")
