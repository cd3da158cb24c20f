"""A real Slurm cluster for the tests: Debian's slurm-wlm 22.05 and munge, two nodes on this machine.

``slurm_cluster`` (session) installs the packages if they are missing, writes a ``slurm.conf`` into
a fresh temp folder (cluster ``containers-test``, nodes ``n1`` and ``n2`` both on 127.0.0.1, free
ports picked at start, a private munge key and socket), starts ``munged``, ``slurmctld`` and one
``slurmd`` per node, and waits until both nodes are idle. Nothing of it touches the machine's own
Slurm or munge set-up: every path is in the temp folder and every client call goes through
``SLURM_CONF``. At teardown it cancels its jobs, stops the daemons by the PIDs they wrote, stops
any process still carrying its ``SLURM_CONF`` (the job steps it started), and removes the folder.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "salloc")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def ensure_installed() -> None:
    """apt-get install slurm-wlm munge when they are missing (about 15 s; root only)."""
    if all(shutil.which(p) for p in PROGRAMS):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and this is not a root Debian machine that can "
                    "install it (apt-get install slurm-wlm munge)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
        subprocess.run(install, env=env, check=True, capture_output=True)
    missing = [p for p in PROGRAMS if not shutil.which(p)]
    assert not missing, f"installed {PACKAGES} but these are still missing: {missing}"


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class SlurmCluster:
    """The running test cluster and the calls the tests make to it."""

    root: Path
    conf: Path
    nodes: tuple[str, ...] = ("n1", "n2")
    node_addr: str = "127.0.0.1"
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, argv: list[str], *, timeout: float = 60, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, env={**self.env, **(env or {})}, capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def job_info(self, job_id: str) -> dict[str, str]:
        text = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: str, *, timeout: float = 180) -> dict[str, str]:
        """Poll until the job ends; on timeout cancel it and fail with what it printed."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job_info(job_id)
            if info.get("JobState") in TERMINAL:
                return info
            if time.monotonic() > deadline:
                self.run(["scancel", job_id], check=False)
                out = Path(info.get("StdOut", ""))
                raise AssertionError(f"job {job_id} still {info.get('JobState')} after "
                                     f"{timeout:.0f} s:\n"
                                     + (out.read_text()[-3000:] if out.is_file() else ""))
            time.sleep(0.5)

    def idle_nodes(self) -> list[str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout
        return [line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]]


def _write_conf(root: Path, ports: list[int], munge_socket: Path) -> Path:
    controller = socket.gethostname().split(".")[0]
    ctld_port, node_ports = ports[0], ports[1:]
    lines = [
        "ClusterName=containers-test",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={node_ports[0]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool-%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        # The settings FACTS.md section 3 found to work on these machines (no cgroups).
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root}/jobcomp.txt",
        "MinJobAge=600",  # finished jobs stay visible to scontrol while the tests read them
        "InactiveLimit=0",
        "KillWait=5",
    ]
    cpus = os.cpu_count() or 1
    for name, port in zip(("n1", "n2"), node_ports):
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                     f"CPUs={cpus} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP")
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _read_pid(path: Path, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    raise AssertionError(f"no PID in {path} after {timeout} s")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _stop(pids: list[int], grace: float = 10) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _carrying(marker: str) -> list[int]:
    """PIDs of processes whose environment holds ``marker`` (this cluster's SLURM_CONF)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _log_tail(root: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text()[-1500:]
                     for p in sorted((root / "log").glob("*.log")))


@pytest.fixture(scope="session")
def slurm_cluster():
    ensure_installed()
    if os.geteuid() != 0:
        pytest.skip("the test Slurm cluster runs its daemons as root")
    root = Path(tempfile.mkdtemp(prefix="containers-slurm-"))
    root.chmod(0o755)  # munged (user munge) must reach its folders below
    for sub in ("state", "log"):
        (root / sub).mkdir()
    munge_dir, socket_dir = root / "munge", root / "munge-socket"
    for folder, mode in ((munge_dir, 0o700), (socket_dir, 0o755)):
        folder.mkdir()
        shutil.chown(folder, "munge", "munge")
        folder.chmod(mode)
    munge_socket = socket_dir / "munge.socket"
    conf = _write_conf(root, free_ports(3), munge_socket)
    cluster = SlurmCluster(root=root, conf=conf)
    marker = f"SLURM_CONF={conf}"
    started: list[int] = []
    try:
        as_munge = ["runuser", "-u", "munge", "--"]
        subprocess.run([*as_munge, "mungekey", "-c", "-k", str(munge_dir / "munge.key")],
                       check=True, capture_output=True)
        subprocess.run([*as_munge, "munged", f"--socket={munge_socket}",
                        f"--key-file={munge_dir / 'munge.key'}",
                        f"--log-file={munge_dir / 'munged.log'}",
                        f"--pid-file={munge_dir / 'munged.pid'}",
                        f"--seed-file={munge_dir / 'munged.seed'}"],
                       check=True, capture_output=True)
        started.append(_read_pid(munge_dir / "munged.pid"))
        cluster.pids["munged"] = started[-1]
        cluster.run(["slurmctld", "-f", str(conf)])
        started.append(_read_pid(root / "slurmctld.pid"))
        cluster.pids["slurmctld"] = started[-1]
        for node in cluster.nodes:
            cluster.run(["slurmd", "-f", str(conf), "-N", node])
            started.append(_read_pid(root / f"slurmd-{node}.pid"))
            cluster.pids[f"slurmd-{node}"] = started[-1]
        deadline = time.monotonic() + 30
        while sorted(cluster.idle_nodes()) != list(cluster.nodes):
            if time.monotonic() > deadline:
                raise AssertionError("the test Slurm nodes did not become idle:\n"
                                     + _log_tail(root))
            time.sleep(0.3)
        yield cluster
    finally:
        jobs = cluster.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split() \
            if "slurmctld" in cluster.pids else []
        if jobs:
            cluster.run(["scancel", *jobs], check=False)
        _stop([p for p in started if p != cluster.pids.get("munged")])
        _stop(_carrying(marker))  # job steps of ours that outlived their slurmd
        _stop([p for p in started if p == cluster.pids.get("munged")])
        shutil.rmtree(root, ignore_errors=True)
