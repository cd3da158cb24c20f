"""The rendezvous of each scheduler: its Python resolution (``--nodes`` inside an allocation) and
its batch script lines give the same address and port, for the same job, from the same commands.

Both are run here: the shell lines by bash under the scripts' strict mode, the Python side with a
``query`` that runs the very same stand-in ``scontrol`` (a recorded answer, as on a cluster)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from containers.errors import StateError
from containers.run.rendezvous import (PORT_BASE, PORT_SPAN, RENDEZVOUS, PbsRendezvous,
                                       SlurmRendezvous, port_of)

NODE_LINE = "NodeName=nid001 Arch=x86_64 CoresPerSocket=64 NodeAddr={addr} NodeHostName=nid001"


def _fake_scontrol(folder: Path, *, addr: str | None) -> Path:
    """An ``scontrol`` answering ``show hostnames`` and ``show node -o`` as Slurm does."""
    folder.mkdir(exist_ok=True)
    node = NODE_LINE.format(addr=addr) if addr else "NodeName=nid001 Arch=x86_64 State=IDLE"
    script = folder / "scontrol"
    script.write_text("#!/bin/bash\n"
                      'if [[ $2 == hostnames ]]; then printf "nid001\\nnid002\\n"; exit 0; fi\n'
                      f'if [[ $2 == node && $3 == -o && $4 == nid001 ]]; then echo "{node}"; '
                      "exit 0; fi\nexit 1\n")
    script.chmod(0o755)
    return folder


def _shell(lines: list[str], env: dict[str, str], path: Path | None = None) -> tuple[str, str]:
    search = f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"]
    text = "set -euo pipefail\n" + "\n".join(lines) + '\necho "$MASTER_ADDR $MASTER_PORT"\n'
    out = subprocess.run(["bash", "-c", text], env={**env, "PATH": search},
                         capture_output=True, text=True, check=True).stdout
    host, port = out.strip().splitlines()[-1].split()
    return host, port


@pytest.mark.parametrize("addr", ["10.1.2.3", None])
@pytest.mark.parametrize("job_id", ["4242", "123456789", "7"])
def test_slurm_python_and_shell_agree(tmp_path, addr, job_id) -> None:
    slurm = SlurmRendezvous()
    fake = _fake_scontrol(tmp_path / "bin", addr=addr)
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": "nid[001-002]"}
    calls: list[list[str]] = []

    def query(argv: list[str]) -> str:
        calls.append(argv)
        return subprocess.run([str(fake / argv[0]), *argv[1:]], capture_output=True, text=True,
                              check=True).stdout

    found = slurm.resolve(env[slurm.job_id_var], env[slurm.nodes_var], query=query)
    assert _shell(slurm.shell(), env, fake) == (found.host, found.port)
    assert found.host == (addr or "nid001") and found.id == job_id
    assert found.port == str(PORT_BASE + int(job_id) % PORT_SPAN)
    assert calls == [["scontrol", "show", "hostnames", "nid[001-002]"],
                     ["scontrol", "show", "node", "-o", "nid001"]]


@pytest.mark.parametrize("job_id", ["0081234.desched1", "4242.desched1", "9"])
def test_pbs_python_and_shell_agree(tmp_path, job_id) -> None:
    pbs = PbsRendezvous()
    nodefile = tmp_path / "nodes"
    nodefile.write_text("dec0001.hsn.de.hpc.ucar.edu\ndec0002.hsn.de.hpc.ucar.edu\n")
    env = {"PBS_JOBID": job_id, "PBS_NODEFILE": str(nodefile)}
    found = pbs.resolve(env[pbs.job_id_var], env[pbs.nodes_var])
    assert _shell(pbs.shell(), env) == (found.host, found.port)
    assert found.host == "dec0001.hsn.de.hpc.ucar.edu" and found.id == job_id
    assert found.port == str(PORT_BASE + int(job_id.split(".")[0]) % PORT_SPAN)


def test_ports_follow_the_job_number() -> None:
    assert port_of("4242") == 24242 and port_of("123456789") == 26789
    assert port_of("0081234.desched1") == 21234 and port_of("x") == PORT_BASE


def test_one_rendezvous_per_scheduler_and_what_it_refuses(tmp_path) -> None:
    assert set(RENDEZVOUS) == {"slurm", "pbs"}
    assert all(r.scheduler == name for name, r in RENDEZVOUS.items())
    with pytest.raises(StateError, match="lists no hosts"):
        SlurmRendezvous().head("nid[1-2]", query=lambda argv: "")
    with pytest.raises(StateError, match="cannot read the job's node file"):
        PbsRendezvous().head(str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(StateError, match="lists no nodes"):
        PbsRendezvous().head(str(tmp_path / "empty"))
    at = SlurmRendezvous().at_job_time(lambda name: f"<{name}>")
    assert (at.endpoint, at.id) == ("<MASTER_ADDR>:<MASTER_PORT>", "<SLURM_JOB_ID>")
