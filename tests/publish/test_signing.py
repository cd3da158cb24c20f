"""Unit tests of signing's pure parts and of the public-key export (real ``gpg`` with a throwaway
home, a keyring of two keys in ``data/two-keys.asc``); the documented key recipe run by the real
Apptainer. ``test_publish_image.py`` signs and verifies for real."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from containers.errors import ConfigError, VerdictFailed
from containers.host.runtime import Runtime
from containers.publish.signing import (key_fingerprints, keyring, newpair_argv, parse_key_list,
                                        public_key, signers)
from tests.fixtures import ROOT
from tests.fixtures.disks import OTHER_UID
from tests.publish.standin import Built

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
    keys = parse_key_list(KEY_LIST, Path("/tmp/keys"))
    assert [(k.index, k.user, k.fingerprint, k.keysdir) for k in keys] == [
        (0, "Site Admin (containers) <admin@example.org>",
         "3E1D619BF19EDB9AA692D1F2A1A731A140AB8DA0", Path("/tmp/keys")),
        (1, "Other <o@example.org>", "1A19EF8888B897856E7301734A1C1C40096AEE87",
         Path("/tmp/keys"))]
    assert parse_key_list("Private key listing (/x):\n\n", Path("/x")) == []


def test_unset_keyring_is_the_one_the_runtime_reads() -> None:
    """containers.sign_keysdir unset: APPTAINER_KEYSDIR, else Apptainer's default; set: it."""
    environ = {"APPTAINER_KEYSDIR": "/site/keys", "HOME": "/home/admin"}
    assert keyring(RUNTIME, None, environ) == Path("/site/keys")
    assert keyring(RUNTIME, None, {"HOME": "/home/admin"}) == Path("/home/admin/.apptainer/keys")
    assert keyring(RUNTIME, Path("/configured"), environ) == Path("/configured")


@pytest.mark.skipif(os.geteuid() != 0, reason="a keyring of another uid needs root to make")
@pytest.mark.parametrize("flaw", ["another user's", "anyone may write", "a ring anyone may write"])
def test_a_keyring_not_the_users_alone_is_refused(data_built: Built, data_keysdir: Path,
                                                  monkeypatch, flaw: str) -> None:
    """A keyring (APPTAINER_KEYSDIR) another user owns, or anyone may write, was used and its
    public key published as the site's: refused in one line before a key is listed; the
    user's own is used."""
    monkeypatch.setenv("APPTAINER_KEYSDIR", str(data_keysdir))
    assert keyring(RUNTIME, None) == data_keysdir
    {"another user's": lambda: os.chown(data_keysdir, OTHER_UID, OTHER_UID),
     "anyone may write": lambda: data_keysdir.chmod(0o777),
     "a ring anyone may write": lambda: (data_keysdir / "pgp-public").chmod(0o666)}[flaw]()
    words = {"another user's": f"{data_keysdir} is owned by uid {OTHER_UID}, not this user",
             "anyone may write": f"{data_keysdir} is writable by its group or others",
             "a ring anyone may write": f"{data_keysdir / 'pgp-public'} is writable by its "
                                        "group or others"}
    with pytest.raises(ConfigError, match=f"^sign_keysdir: {words[flaw]}.*: refusing to sign "
                                          "with it or publish its key") as caught:
        data_built.publish(version="1.0", skip_checks=True, sign=True)
    assert "\n" not in str(caught.value) and not data_built.dest.exists()


def test_newpair_recipe_answers_every_prompt() -> None:
    argv = newpair_argv(RUNTIME, name="Site", email="a@example.org", comment="signing")
    assert argv == ["apptainer", "key", "newpair", "--name=Site", "--email=a@example.org",
                    "--comment=signing", "--password=", "--push=false"]


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
        exported.write_bytes(public_key(data_keysdir, fingerprint))
        assert key_fingerprints(exported) == [fingerprint.upper()]
        assert not exported.read_bytes().startswith(b"-----"), "binary, like the keyring"
    assert (ring.read_bytes(), ring.stat().st_mtime_ns) == before
    assert sorted(p.name for p in data_keysdir.iterdir()) == ["pgp-public"]


def test_public_key_not_in_the_keyring_names_the_keyring(data_keysdir: Path,
                                                         tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"public key {'AB' * 20} is not in the keyring") as err:
        public_key(data_keysdir, "AB" * 20)
    assert err.value.path == data_keysdir / "pgp-public"
    with pytest.raises(ConfigError, match="no public keyring here") as missing:
        public_key(tmp_path / "nowhere", FIRST)
    assert missing.value.path == tmp_path / "nowhere" / "pgp-public"


@pytest.mark.apptainer
def test_documented_key_recipe_runs_without_a_prompt(tmp_path: Path) -> None:
    """The recipe in docs/publishing.md, run as printed (its keyring moved to a temp folder)
    with no terminal: nothing is asked, and the keyring holds a secret key afterwards."""
    page = (ROOT / "docs" / "publishing.md").read_text()
    section = page[page.index("**Signing keys, first time.**"):]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start:section.index("\n```", start)]
    assert "/root/publish-keys" in block and "key newpair" in block
    keys = tmp_path / "keys"
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("APPTAINER_KEYSDIR", None)
    ran = subprocess.run(["bash", "-euc", block.replace("/root/publish-keys", str(keys))],
                         env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Enter" not in ran.stdout + ran.stderr, "the recipe prompted"
    assert "Fingerprint:" in ran.stdout and (keys / "pgp-secret").is_file()


@pytest.mark.parametrize("prints, words", [
    ("Container is signed by 1 key(s):", r" printed no JSON report \(Expecting value: line 1"),
    ("[]", r"'s report has no object: Input should be a valid dictionary"),
    ('{"SignerKeys": [{"Signer": {"KeyCheck": true, "DataCheck": true}}]}',
     r"'s report has SignerKeys.0.Signer.Fingerprint: Field required"),
    ('{"SignerKeys": [{"Signer": {"Fingerprint": "AB", "KeyCheck": "yes", "DataCheck": true}}]}',
     r"'s report has SignerKeys.0.Signer.KeyCheck: Input should be a valid boolean"),
])
def test_a_verify_report_this_tool_cannot_read_is_one_line(tmp_path: Path, prints: str,
                                                           words: str) -> None:
    """``verify --json`` output that is not its JSON report gave a traceback (json.loads)."""
    verify = tmp_path / "apptainer"
    verify.write_text(f"#!/bin/sh\ncat <<'EOF'\n{prints}\nEOF\n")
    verify.chmod(0o755)
    runtime = Runtime(binary=str(verify), flavour="apptainer", version="1.4.5")
    with pytest.raises(VerdictFailed, match=rf"^x.sif: signature check failed: apptainer "
                                            rf"verify{words}") as caught:
        signers(runtime, Path("x.sif"), keysdir=tmp_path)
    assert "\n" not in str(caught.value)
