"""Unit tests of publishing's pure parts: versions, catalogue updates, pruning, consistency rules,
module-file and wrapper rendering (quoting), key listing, permissions and verdict lookup."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.host.runtime import Runtime
from containers.publish import catalogue as cat
from containers.publish.modulefile import (ModuleSpec, lua_string, render_exec_wrapper,
                                           render_modulefile)
from containers.publish.publisher import Modes, expected_mode, find_verdict, mode_problems
from containers.publish.signing import parse_key_list, split_keyring


# ------------------------------------------------------------------------------- versions
@pytest.mark.parametrize("version", ["1.0", "2026.11.21-1e9c228c", "v2+cuda12.4", "a_b", "x" * 64])
def test_good_versions(version: str) -> None:
    assert cat.validate_version(version) == version


@pytest.mark.parametrize("version", ["", "../x", "a/b", ".hidden", "-x", "has space", "latest",
                                     "default", "bin", "x.partial", "x.tmp", "x" * 65, "é"])
def test_bad_versions_are_refused(version: str) -> None:
    with pytest.raises(ConfigError, match="not a usable version"):
        cat.validate_version(version)


def test_default_version_is_build_day_and_inputs_hash() -> None:
    record = {"build_date": "2026-11-21T05:27:24Z", "inputs_hash": "1e9c228c71566f9d"}
    assert cat.default_version(record) == "2026.11.21-1e9c228c"
    with pytest.raises(ConfigError, match="give --version"):
        cat.default_version({"inputs_hash": "abc"})


def test_checksum_line_is_sha256sum_format() -> None:
    sha = "ab" * 32
    line = cat.checksum_line(sha, "1.0")
    assert line == f"{sha}  1.0.sif\n"
    assert cat.parse_checksum_line(line) == (sha, "1.0.sif")
    assert cat.parse_checksum_line("nonsense\n") is None


# ------------------------------------------------------------------------------ catalogue
def _entry(version: str, target: str = "cpu") -> dict:
    return {"target": target, "version": version, "sha256": "0" * 64}


def test_with_entry_appends_and_moves_latest_and_forced_republish_moves_to_end() -> None:
    data = cat.empty()
    for version in ("a", "b", "c"):
        data = cat.with_entry(data, _entry(version), now="t")
    assert [e["version"] for e in cat.entries(data, "cpu")] == ["a", "b", "c"]
    assert cat.latest(data, "cpu") == "c"
    again = cat.with_entry(data, {**_entry("a"), "sha256": "1" * 64}, now="t2")
    assert [e["version"] for e in cat.entries(again, "cpu")] == ["b", "c", "a"]
    assert cat.find(again, "cpu", "a")["sha256"] == "1" * 64 and again["updated"] == "t2"
    assert cat.find(data, "cpu", "a")["sha256"] == "0" * 64, "the input is not modified"
    fewer = cat.without_versions(again, "cpu", ["b"], now="t3")
    assert [e["version"] for e in cat.entries(fewer, "cpu")] == ["c", "a"]


def test_catalogue_format_is_checked() -> None:
    assert cat.check_format(cat.empty(), path="c.json")["targets"] == {}
    with pytest.raises(ConfigError, match="not a catalogue"):
        cat.check_format([], path="c.json")
    with pytest.raises(ConfigError, match="format 7"):
        cat.check_format({"format": 7, "targets": {}}, path="c.json")
    with pytest.raises(ConfigError, match="no 'versions' list"):
        cat.check_format({"format": 1, "targets": {"cpu": {}}}, path="c.json")


@pytest.mark.parametrize("versions,keep,latest,gone", [
    (["a", "b", "c"], 1, "c", ["a", "b"]),
    (["a", "b", "c"], 2, "c", ["a"]),
    (["a", "b", "c"], 5, "c", []),
    (["a", "b", "c"], 1, "a", ["b"]),       # latest is never removed, even when old
    (["a"], 1, "a", []),
])
def test_select_prune(versions, keep, latest, gone) -> None:
    assert cat.select_prune(versions, keep=keep, latest=latest) == gone


def test_keep_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="--keep must be at least 1"):
        cat.select_prune(["a"], keep=0, latest="a")


def _healthy(versions: list[str]) -> cat.TargetFolder:
    return cat.TargetFolder(sifs=set(versions), checksums=set(versions), modules=set(versions),
                            latest_link=f"{versions[-1]}.sif",
                            default_link=f"{versions[-1]}.lua", has_exec=True)


def test_consistency_of_a_healthy_folder() -> None:
    data = cat.with_entry(cat.with_entry(cat.empty(), _entry("a"), now="t"), _entry("b"), now="t")
    assert cat.consistency_problems(data, {"cpu": _healthy(["a", "b"])}) == []


def test_consistency_names_every_problem() -> None:
    data = cat.with_entry(cat.with_entry(cat.empty(), _entry("a"), now="t"), _entry("b"), now="t")
    folder = _healthy(["a", "b"])
    folder.sifs = {"b", "stray"}
    folder.checksums = {"b"}
    folder.modules = {"b"}
    folder.latest_link = "a.sif"
    folder.default_link = None
    folder.has_exec = False
    problems = cat.consistency_problems(data, {"cpu": folder, "gpu": _healthy(["x"])})
    assert problems == [
        "cpu/a.sif: listed in the catalogue but missing",
        "cpu/a.sif.sha256: missing",
        "modules/cpu/a.lua: missing",
        "cpu/stray.sif: not in the catalogue",
        "cpu/latest: points to 'a.sif', the catalogue says 'b.sif'",
        "modules/cpu/default: points to None, expected 'b.lua'",
        "cpu/bin/cpu-exec: missing",
        "gpu/x.sif: not in the catalogue",
    ]
    broken = json.loads(json.dumps(data))
    broken["targets"]["cpu"]["latest"] = "zz"
    assert "catalogue: cpu latest 'zz' is not a listed version" in \
        cat.consistency_problems(broken, {"cpu": _healthy(["a", "b"])})


# ---------------------------------------------------------------------------- module files
NASTY = 'say "hi" \\ it\'s ]] end\nnext\tline\x01'


def test_lua_string_escapes_everything_that_matters() -> None:
    assert lua_string("plain /path:1,2") == '"plain /path:1,2"'
    assert lua_string(NASTY) == '"say \\"hi\\" \\\\ it\'s ]] end\\nnext\\tline\\001"'
    assert lua_string("a\x002") == '"a\\0002"', "three digits: a following digit stays out"


def _spec(**changes) -> ModuleSpec:
    base = dict(target="lumi-rocm", version="1.0", description=f"desc {NASTY}",
                image="/appl/containers/lumi-rocm/1.0.sif",
                bin_dir="/appl/containers/lumi-rocm/bin",
                runtime="singularity", gpu_flag="--rocm",
                binds=("/var/spool/slurmd", "/opt/cray", "/pfs:/pfs:ro"),
                env={"NCCL_SOCKET_IFNAME": "hsn", "WEIRD": NASTY}, sha256="ab" * 32,
                signed_by="F" * 40, published="2026-11-21T00:00:00Z")
    return ModuleSpec(**{**base, **changes})


def test_modulefile_sets_image_binds_env_and_path() -> None:
    text = render_modulefile(_spec())
    lines = text.splitlines()
    assert 'local sif = "/appl/containers/lumi-rocm/1.0.sif"' in lines
    assert 'setenv("SIF", sif)' in lines and 'setenv("CONTAINER_IMAGE", sif)' in lines
    for name in ("SINGULARITY_BIND", "APPTAINER_BIND"):
        assert [l for l in lines if l.startswith(f'append_path("{name}"')] == [
            f'append_path("{name}", "/var/spool/slurmd", ",")',
            f'append_path("{name}", "/opt/cray", ",")',
            f'append_path("{name}", "/pfs:/pfs:ro", ",")']
    for prefix in ("SINGULARITYENV_", "APPTAINERENV_"):
        assert f'setenv("{prefix}NCCL_SOCKET_IFNAME", "hsn")' in lines
        assert f'setenv("{prefix}WEIRD", {lua_string(NASTY)})' in lines
    assert 'prepend_path("PATH", "/appl/containers/lumi-rocm/bin")' in lines
    assert 'family("container_image")' in lines
    assert any(l.startswith("help(") for l in lines) and "whatis(\"Version: 1.0\")" in lines
    assert "singularity exec --rocm $SIF COMMAND" in text
    assert "\n" not in lua_string(NASTY), "no raw newline can end a Lua string early"


def test_modulefile_without_binds_or_env_sets_none() -> None:
    text = render_modulefile(_spec(binds=(), env={}, gpu_flag=None, runtime="apptainer"))
    assert "BIND" not in text and "ENV_" not in text and "apptainer exec $SIF" in text


def test_exec_wrapper_is_valid_bash_and_quotes(tmp_path: Path) -> None:
    script = tmp_path / "w"
    expected = {None: "", "--nv": "--nv ", "--weird flag'": "'--weird flag'\"'\"'' "}
    for gpu, rendered in expected.items():
        text = render_exec_wrapper("cpu", runtime="apptainer", gpu_flag=gpu)
        script.write_text(text)
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert text.splitlines()[-1] == f'exec apptainer exec {rendered}"$SIF" "$@"'
    script.chmod(0o755)
    result = subprocess.run([str(script), "true"], capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "SIF"})
    assert result.returncode == 1 and "load a module first: module load cpu" in result.stderr


# ---------------------------------------------------------------------------- signing keys
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


def _packet(tag: int, body: bytes) -> bytes:
    assert len(body) < 192
    return bytes([0xC0 | tag, len(body)]) + body


def test_split_keyring_by_v4_fingerprint() -> None:
    key1, key2 = b"\x04" + b"k1" * 20, b"\x04" + b"k2" * 60
    old_style_uid = bytes([0x80 | (13 << 2), 3]) + b"uid"  # old-format header, 1-byte length
    ring = (_packet(6, key1) + old_style_uid + _packet(2, b"sig") + _packet(6, key2)
            + _packet(13, b"other"))
    fpr = {k: hashlib.sha1(b"\x99" + len(k).to_bytes(2, "big") + k).hexdigest().upper()
           for k in (key1, key2)}
    keys = split_keyring(ring)
    assert list(keys) == [fpr[key1], fpr[key2]]
    assert keys[fpr[key1]] == _packet(6, key1) + old_style_uid + _packet(2, b"sig")
    assert keys[fpr[key2]] == _packet(6, key2) + _packet(13, b"other")
    with pytest.raises(ValueError):
        split_keyring(b"\x00garbage")
    with pytest.raises(ValueError, match="truncated"):
        split_keyring(_packet(6, key1)[:-3])


def test_runtime_sign_and_verify_argv_never_reach_a_key_server() -> None:
    apptainer = Runtime(binary="/usr/bin/apptainer", flavour="apptainer", version="1.4.5")
    singularity = Runtime(binary="singularity", flavour="singularity", version="4.1.3")
    assert apptainer.sign_argv("x.sif", keyidx=2) == ["/usr/bin/apptainer", "sign", "--keyidx",
                                                      "2", "x.sif"]
    assert apptainer.verify_argv("x.sif") == ["/usr/bin/apptainer", "verify", "--local",
                                              "--json", "x.sif"]
    newpair = apptainer.key_newpair_argv(name="A", email="a@b", bits=2048)
    assert "--push=false" in newpair and "--password=" in newpair
    assert apptainer.keyring_env("/k") == {"APPTAINER_KEYSDIR": "/k"}
    assert singularity.keyring_env("/k") == {"SINGULARITY_SYPGPDIR": "/k"}
    assert apptainer.keyring_env(None) == {}


# ---------------------------------------------------------------------- modes and verdicts
def test_modes_and_problems(tmp_path: Path) -> None:
    world, group = Modes.of(world_readable=True, gid=None), Modes.of(world_readable=False, gid=None)
    assert (world.file, world.dir, world.umask) == (0o644, 0o755, 0o022)
    assert (group.file, group.dir, group.umask) == (0o640, 0o750, 0o027)
    (tmp_path / "bin").mkdir()
    wrapper, sif = tmp_path / "bin" / "cpu-exec", tmp_path / "1.sif"
    wrapper.write_text("#!/bin/sh\n")
    sif.write_text("x")
    assert expected_mode(wrapper, group) == 0o750 and expected_mode(sif, group) == 0o640
    os.chmod(sif, 0o666)
    os.chmod(wrapper, 0o750)
    assert mode_problems([sif, wrapper], group) == [f"{sif}: world-writable (mode 0666)"]
    os.chmod(sif, 0o644)
    assert mode_problems([sif], group) == [f"{sif}: mode 0644, expected 0640"]
    assert mode_problems([sif], None) == []


def test_find_verdict_wants_this_image_passing_with_two_ranks(tmp_path: Path) -> None:
    sha = "ab" * 32

    def write(name: str, **record) -> Path:
        path = tmp_path / "smoke" / name / "verdict.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"target": "cpu", "sha256": sha, "passed": True, "ranks": 2,
                                    "date": "2026-11-21T05:00:00Z", **record}))
        return path

    assert find_verdict(tmp_path, "cpu", sha) is None
    write("failed", passed=False, date="2026-11-21T09:00:00Z")
    write("one-rank", ranks=1, date="2026-11-21T09:00:00Z")
    write("other-image", sha256="cd" * 32, date="2026-11-21T09:00:00Z")
    write("other-target", target="gpu", date="2026-11-21T09:00:00Z")
    old = write("old")
    assert find_verdict(tmp_path, "cpu", sha)[0] == old
    new = write("new", date="2026-11-21T06:00:00Z")
    (tmp_path / "smoke" / "broken").mkdir()
    (tmp_path / "smoke" / "broken" / "verdict.json").write_text("{")
    assert find_verdict(tmp_path, "cpu", sha)[0] == new
