"""Unit tests of signing's pure parts and of the public-key export (real ``gpg`` with a throwaway
home, a keyring of two keys in ``data/two-keys.asc``; no Apptainer: ``test_publish_image.py``
signs and verifies for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.host.runtime import Runtime
from containers.publish.signing import key_fingerprints, parse_key_list, public_key

TWO_KEYS = Path(__file__).parent / "data" / "two-keys.asc"
FIRST, SECOND = ("E3D02CEFF4EA164FBDA7180B8286BAE06F9F865A",
                 "3680953E00B97FFE1F462D457C7EEFC2A4D0032C")
RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


@pytest.fixture
def data_keysdir(tmp_path: Path) -> Path:
    """An Apptainer keys folder whose ``pgp-public`` (a binary keyring) holds both keys."""
    keysdir = tmp_path / "keys"
    keysdir.mkdir()
    subprocess.run(["gpg", "--homedir", str(tmp_path), "--batch", "--quiet", "--no-autostart",
                    "--output", str(keysdir / "pgp-public"), "--dearmor", str(TWO_KEYS)],
                   check=True, capture_output=True, timeout=60)
    return keysdir


KEY_LIST = """Private key listing (/tmp/keys/pgp-secret):

0)  User:              Site Admin (containers) <admin@example.org>
    Creation time:     2026-11-21 05:37:32 +0000 UTC
    Fingerprint:       3E1D619BF19EDB9AA692D1F2A1A731A140AB8DA0
    Length (in bits):  4096

1)  User:              Other <o@example.org>
    Creation time:     2026-11-21 05:39:07 +0000 UTC
    Fingerprint:       1a19ef8888b897856e7301734a1c1c40096aee87
    Length (in bits):  1024
"""


def test_parse_key_list() -> None:
    keys = parse_key_list(KEY_LIST)
    assert [(k.index, k.user, k.fingerprint) for k in keys] == [
        (0, "Site Admin (containers) <admin@example.org>",
         "3E1D619BF19EDB9AA692D1F2A1A731A140AB8DA0"),
        (1, "Other <o@example.org>", "1A19EF8888B897856E7301734A1C1C40096AEE87")]
    assert parse_key_list("Private key listing (/x):\n\n") == []


def test_runtime_sign_and_verify_argv_never_reach_a_key_server() -> None:
    apptainer = Runtime(binary="/usr/bin/apptainer", flavour="apptainer", version="1.4.5")
    singularity = Runtime(binary="singularity", flavour="singularity", version="4.1.3")
    assert apptainer.sign_argv("x.sif", keyidx=2) == ["/usr/bin/apptainer", "sign", "--keyidx",
                                                      "2", "x.sif"]
    assert apptainer.verify_argv("x.sif") == ["/usr/bin/apptainer", "verify", "--local",
                                              "--json", "x.sif"]
    assert apptainer.keyring_env("/k") == {"APPTAINER_KEYSDIR": "/k"}
    assert singularity.keyring_env("/k") == {"SINGULARITY_SYPGPDIR": "/k"}
    assert apptainer.keyring_env(None) == {}


def test_key_fingerprints_lists_primary_keys_only(data_keysdir: Path) -> None:
    assert key_fingerprints(TWO_KEYS) == [FIRST, SECOND], "subkey fingerprints are left out"
    assert key_fingerprints(data_keysdir / "pgp-public") == [FIRST, SECOND]


def test_public_key_exports_exactly_one_key_and_leaves_the_keyring_alone(
        data_keysdir: Path, tmp_path: Path) -> None:
    ring = data_keysdir / "pgp-public"
    before = ring.read_bytes(), ring.stat().st_mtime_ns
    for fingerprint in (SECOND, FIRST.lower()):
        exported = tmp_path / "key.pgp"
        exported.write_bytes(public_key(RUNTIME, data_keysdir, fingerprint))
        assert key_fingerprints(exported) == [fingerprint.upper()]
        assert not exported.read_bytes().startswith(b"-----"), "binary, like the keyring"
    assert (ring.read_bytes(), ring.stat().st_mtime_ns) == before
    assert sorted(p.name for p in data_keysdir.iterdir()) == ["pgp-public"]


def test_public_key_not_in_the_keyring_names_the_keyring(data_keysdir: Path,
                                                         tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"public key {'AB' * 20} is not in the keyring") as err:
        public_key(RUNTIME, data_keysdir, "AB" * 20)
    assert err.value.path == data_keysdir / "pgp-public"
    with pytest.raises(ConfigError, match="no public keyring here") as missing:
        public_key(RUNTIME, tmp_path / "nowhere", FIRST)
    assert missing.value.path == tmp_path / "nowhere" / "pgp-public"
