"""Runtime discovery and the argv of runtime calls."""

from __future__ import annotations

import csv
import os
import pwd
import re
from pathlib import Path

import pytest

from containers.errors import RuntimeNotFound
from containers.host.runtime import FLAVOURS, Runtime, build_arg, find_runtime, parse_version
from tests.fixtures import ROOT


@pytest.mark.parametrize("text, expected", [
    ("apptainer version 1.4.5\n", ("apptainer", "1.4.5")),
    ("singularity-ce version 4.1.3-jammy\n", ("singularity", "4.1.3-jammy")),
    ("SingularityCE version 3.11.4", ("singularity", "3.11.4")),
])
def test_parse_version(text, expected) -> None:
    assert parse_version(text) == expected


def test_exec_argv_flags_binds_env_in_order() -> None:
    runtime = Runtime("singularity", "singularity", "4.1.3")
    argv = runtime.exec_argv(image="/x.sif", command=["python", "-c", "1"], gpu_flag="--rocm",
                             binds=["/a:/b:ro", "/opt/cray"], env={"NCCL_SOCKET_IFNAME": "hsn"})
    assert argv == ["singularity", "exec", "--rocm", "--bind", "/a:/b:ro", "--bind", "/opt/cray",
                    "--env", "NCCL_SOCKET_IFNAME=hsn", "/x.sif", "python", "-c", "1"]


def test_find_runtime_prefers_apptainer_and_reports_version(tmp_path: Path, monkeypatch) -> None:
    for name, output in (("apptainer", "apptainer version 9.9.9"),
                         ("singularity", "singularity-ce version 4.1.3")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho '{output}'\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_runtime("auto") == Runtime(str(tmp_path / "apptainer"), "apptainer", "9.9.9")
    assert find_runtime("singularity").flavour == "singularity"
    (tmp_path / "apptainer").unlink()
    assert find_runtime("auto").binary == str(tmp_path / "singularity")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeNotFound, match="no container runtime found"):
        find_runtime("auto")


@pytest.mark.parametrize("key, value, expected", [
    ("A", "/plain/path", "A=/plain/path"),
    ("A", "/with space/x", "A=/with space/x"),
    ("A", "/a,b", '"A=/a,b"'),
    ("A", 'say "hi"', '"A=say ""hi"""'),
    ("A", "one\ntwo", '"A=one\ntwo"'),
])
def test_build_arg_is_one_csv_field(key, value, expected) -> None:
    """Apptainer reads each --build-arg value as a CSV record (as Python's csv module does)."""
    assert build_arg(key, value) == expected
    assert next(csv.reader([expected])) == [f"{key}={value}"]


def test_build_argv_quotes_args_and_keeps_bind_paths() -> None:
    runtime = Runtime("apptainer", "apptainer", "1.4.5")
    argv = runtime.build_argv(output=Path("/o.sif"), spec="/x.def",
                              build_args={"CTX": "/a b,c", "X": "1"}, binds=["/my wheels"],
                              fakeroot=True)
    assert argv == ["apptainer", "build", "--force", "--notest", "--fakeroot",
                    "--build-arg", '"CTX=/a b,c"', "--build-arg", "X=1",
                    "--bind", "/my wheels", "/o.sif", "/x.def"]


APPTAINER = Runtime("apptainer", "apptainer", "1.4.5")
SINGULARITY = Runtime("singularity", "singularity", "4.1.3")


@pytest.mark.parametrize("runtime, environ, expected", [
    # Apptainer: APPTAINER_KEYSDIR, else the older SINGULARITY_SYPGPDIR, else CONFIGDIR/keys,
    # else $HOME/.apptainer/keys (pkg/syfs DefaultLocalKeyDirPath)
    (APPTAINER, {"APPTAINER_KEYSDIR": "/k", "SINGULARITY_SYPGPDIR": "/old", "HOME": "/h"}, "/k"),
    (APPTAINER, {"APPTAINER_KEYSDIR": "", "SINGULARITY_SYPGPDIR": "/old", "HOME": "/h"}, "/old"),
    (APPTAINER, {"SINGULARITY_CONFIGDIR": "/sc", "HOME": "/h"}, "/sc/keys"),
    (APPTAINER, {"APPTAINER_CONFIGDIR": "/c", "SINGULARITY_CONFIGDIR": "/sc"}, "/c/keys"),
    (APPTAINER, {"HOME": "/h"}, "/h/.apptainer/keys"),
    # SingularityCE: SINGULARITY_SYPGPDIR only, else CONFIGDIR/sypgp (pkg/sypgp dirPath)
    (SINGULARITY, {"APPTAINER_KEYSDIR": "/k", "SINGULARITY_SYPGPDIR": "/s"}, "/s"),
    (SINGULARITY, {"APPTAINER_KEYSDIR": "/k", "SINGULARITY_CONFIGDIR": "/sc"}, "/sc/sypgp"),
])
def test_keysdir_follows_the_runtimes_own_rule(runtime, environ, expected) -> None:
    assert runtime.keysdir(environ) == Path(expected)


def test_keysdir_without_home_is_the_accounts_home() -> None:
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert APPTAINER.keysdir({}) == home / ".apptainer" / "keys"
    assert SINGULARITY.keysdir({"HOME": "/elsewhere"}) == home / ".singularity" / "sypgp"



def test_each_flavour_owns_what_differs_and_nothing_compares_its_name() -> None:
    apptainer, singularity = (Runtime(binary=name, flavour=name, version="1")
                              for name in FLAVOURS)
    assert (apptainer.own.bind_variables, singularity.own.bind_variables) == (
        ("APPTAINER_BIND", "SINGULARITY_BIND"), ("SINGULARITY_BIND",))
    assert apptainer.own.mksquashfs_args and apptainer.own.singularity_link
    assert not singularity.own.mksquashfs_args and not singularity.own.singularity_link
    found = [path.name for path in (ROOT / "containers").rglob("*.py")
             if re.search(r"flavour\s*[!=]=|==\s*\S*flavour\b", path.read_text())]
    assert not found, f"a runtime flavour's name compared: {found}"
