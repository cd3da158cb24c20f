"""A real Slurm cluster on this machine: Debian's slurm-wlm and munge, nodes that are all this host.

All it makes lives in one folder reached through ``SLURM_CONF``, never the machine's own Slurm
and munge; it stops only processes it recognises as its own."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from containers.errors import CommandFailed, StateError
from containers.files import atomic_write_text, not_yours_alone, read_json_object, unsafe_way
from containers.host.process import terminate
from containers.host.slurmconf import ConfWriter

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "salloc")
#: What the command's cluster records about itself, in its folder.
STATE_FILE = "cluster.json"

#: The daemon programs a record may name (``slurmd-<node>`` is a slurmd).
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd")
#: What a site-shaped cluster with QoS needs besides: Slurm enforces QoS only with accounting.
ACCOUNTING_PACKAGES = ("mariadb-server", "slurmdbd")
#: Slurm 22.05's slurmdbd connections ignore ``AuthInfo=socket=`` (docs/local-slurm.md): such a
#: process runs where munge's default socket path leads to the cluster's munged (``$1``).
_MUNGE_NAMESPACE = ('mount -t tmpfs tmpfs /run && mkdir /run/munge && '
                    'ln -s "$1" /run/munge/munge.socket.2 && shift && exec "$@"')
#: Seconds a status call (sinfo, squeue) may take: a dead controller must not hold ``--stop``.
CLIENT_TIMEOUT = 10


def missing_programs() -> list[str]:
    """The Slurm and munge programs this machine lacks (``apt-get install slurm-wlm munge``)."""
    return [p for p in PROGRAMS if not shutil.which(p)]


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as open_sockets:  # all bound at once: no port given twice
        sockets = [open_sockets.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass
class SlurmCluster:
    """A running cluster and the client calls made to it (all through its ``SLURM_CONF``)."""

    root: Path
    conf: Path
    nodes: tuple[str, ...] = ("n1", "n2")
    node_addr: str = "127.0.0.1"
    pids: dict[str, int] = field(default_factory=dict)
    #: Each daemon's start time (psutil's ``create_time``): tells a reused PID apart.
    started: dict[str, float] = field(default_factory=dict)

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge-socket" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def accounting(self) -> bool:
        """Whether it enforces QoS through slurmdbd (its writer wrote a slurmdbd.conf)."""
        return (self.root / "slurmdbd.conf").is_file()

    def with_munge(self, argv: list[str]) -> list[str]:
        """``argv`` as it must run to reach slurmdbd (:data:`_MUNGE_NAMESPACE`)."""
        if not self.accounting:
            return argv
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                _MUNGE_NAMESPACE, "sh", str(self.munge_socket), *argv]

    def run(self, argv: list[str], *, timeout: float = 60, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        try:
            result = subprocess.run(argv, env={**self.env, **(env or {})}, capture_output=True,
                                    text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(f"{argv[0]} gave no answer in {timeout:.0f} s",
                                argv=argv) from exc
        if check and result.returncode != 0:
            raise CommandFailed(argv[0], argv=argv, returncode=result.returncode,
                                output=(result.stdout + result.stderr).splitlines())
        return result

    def idle_nodes(self) -> list[str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout
        return [line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]]

    def partitions(self, *, timeout: float = 60) -> list[str]:
        out = self.run(["sinfo", "-h", "-o", "%P"], check=False, timeout=timeout).stdout
        return [line.strip().rstrip("*") for line in out.splitlines() if line.strip()]


def _read_pid(path: Path, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    raise StateError(f"no PID in {path} after {timeout:.0f} s")


def _prepare(root: Path) -> tuple[Path, Path]:
    """The cluster's folders; every folder above munged's own must let others through."""
    for folder in root.parents:
        if folder.exists() and not folder.stat().st_mode & stat.S_IXOTH:
            raise StateError(f"{folder} is closed to other users, so munged (user munge) cannot "
                             f"reach the cluster's folder {root.parent}: choose one under "
                             "/var/tmp")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    for sub in ("state", "log"):
        (root / sub).mkdir()
    munge_dir, socket_dir = root / "munge", root / "munge-socket"
    for folder, mode in ((munge_dir, 0o700), (socket_dir, 0o755)):
        folder.mkdir()
        shutil.chown(folder, "munge", "munge")
        folder.chmod(mode)
    return munge_dir, socket_dir / "munge.socket"


def _as_munge(argv: list[str]) -> None:
    full = ["runuser", "-u", "munge", "--", *argv]
    result = subprocess.run(full, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise CommandFailed(argv[0], argv=full, returncode=result.returncode,
                            output=(result.stdout + result.stderr).splitlines())


def _start_munge(munge_dir: Path, munge_socket: Path) -> int:
    _as_munge(["mungekey", "-c", "-k", str(munge_dir / "munge.key")])
    _as_munge(["munged", f"--socket={munge_socket}", f"--key-file={munge_dir / 'munge.key'}",
               f"--log-file={munge_dir / 'munged.log'}",
               f"--pid-file={munge_dir / 'munged.pid'}",
               f"--seed-file={munge_dir / 'munged.seed'}"])
    return _read_pid(munge_dir / "munged.pid")


def start(root: Path, write_conf: ConfWriter, *, nodes: tuple[str, ...], ports: int,
          idle_timeout: float = 30) -> SlurmCluster:
    """Start the daemons in the fresh folder ``root`` until every node is idle."""
    if os.geteuid() != 0:
        raise StateError("the local Slurm cluster runs its daemons as root; run as root")
    missing = missing_programs()
    if missing:
        raise StateError(f"Slurm is not installed (missing {', '.join(missing)}): "
                         f"apt-get install {' '.join(PACKAGES)} (./setup.sh env does)")
    munge_dir, munge_socket = _prepare(root)
    conf = write_conf(root, free_ports(ports), munge_socket)
    cluster = SlurmCluster(root=root, conf=conf, nodes=nodes)
    try:
        _recorded(cluster, "munged", _start_munge(munge_dir, munge_socket))
        if cluster.accounting:
            _start_accounting(cluster)
        cluster.run(cluster.with_munge(["slurmctld", "-f", str(conf)]))
        _recorded(cluster, "slurmctld", _read_pid(root / "slurmctld.pid"))
        for node in nodes:
            cluster.run(["slurmd", "-f", str(conf), "-N", node])
            _recorded(cluster, f"slurmd-{node}", _read_pid(root / f"slurmd-{node}.pid"))
        _until(lambda: set(nodes) <= set(cluster.idle_nodes()), idle_timeout,
               "the local Slurm nodes did not become idle", root)
    except BaseException:
        stop(cluster)
        raise
    return cluster


def _start_accounting(cluster: SlurmCluster, timeout: float = 60) -> None:
    """A private MariaDB, slurmdbd over it, and the recorded sacctmgr calls."""
    missing = [p for p in ("mariadbd", "mariadb-install-db", "slurmdbd") if not shutil.which(p)]
    if missing:
        raise StateError(f"QoS are enforced only with accounting, and {', '.join(missing)} "
                         f"is missing: apt-get install {' '.join(ACCOUNTING_PACKAGES)} "
                         "(./setup.sh env does)")
    root, data, sock = cluster.root, cluster.root / "mysql", cluster.root / "mysql.sock"
    cluster.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=120)
    database = subprocess.Popen(
        ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}", "--user=root",
         "--skip-networking", f"--pid-file={root / 'mariadbd.pid'}",
         f"--log-error={root / 'log' / 'mariadbd.log'}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    threading.Thread(target=database.wait, daemon=True).start()  # reaped when it stops
    _recorded(cluster, "mariadbd", database.pid)
    _until(sock.exists, timeout, "MariaDB made no socket", root)
    cluster.run(cluster.with_munge(["slurmdbd"]), env={"MYSQL_UNIX_PORT": str(sock)})
    _recorded(cluster, "slurmdbd", _read_pid(root / "slurmdbd.pid"))
    calls = json.loads((root / "accounting.json").read_text())
    _until(lambda: cluster.run(cluster.with_munge(calls[0]), check=False).returncode == 0,
           timeout, "slurmdbd did not answer sacctmgr", root)
    for argv in calls[1:]:
        cluster.run(cluster.with_munge(argv))


def _until(ready: Callable[[], bool], timeout: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise StateError(f"{what} in {timeout:.0f} s:\n" + "\n".join(
                f"--- {log.name}\n" + log.read_text(errors="replace")[-1500:]
                for log in sorted((root / "log").glob("*.log"))))
        time.sleep(0.3)


def _recorded(cluster: SlurmCluster, name: str, pid: int) -> None:
    cluster.pids[name] = pid
    with contextlib.suppress(psutil.Error):
        cluster.started[name] = psutil.Process(pid).create_time()


def _program(name: str) -> str:
    return "slurmd" if name.startswith("slurmd-") else name


def _stranger(cluster: SlurmCluster, name: str, proc: psutil.Process) -> str | None:
    """Why the live ``proc`` is not ``cluster``'s daemon ``name``, else None."""
    argv = proc.cmdline()
    program = _program(name)
    own = {"munged": f"--socket={cluster.munge_socket}",
           "mariadbd": f"--datadir={cluster.root / 'mysql'}"}.get(program, str(cluster.conf))
    if program not in DAEMONS or not argv or os.path.basename(argv[0]) != program:
        words = " ".join(argv) or "a process without a command line"
        shown = words if len(words) <= 80 else words[:77] + "..."  # a few words, for a refusal
        return f"is {shown!r}, not {program}"
    if program == "slurmdbd":  # it takes no config in its argv: SLURM_CONF names it
        if proc.environ().get("SLURM_CONF") != own:
            return f"is a slurmdbd without this cluster's SLURM_CONF={own}"
    elif own not in argv:
        return f"is a {program} without this cluster's {own} in its command line"
    started = cluster.started.get(name)
    if started is not None and abs(proc.create_time() - started) > 1:
        return f"started at another time than the {program} the record names"
    return None


def daemons(cluster: SlurmCluster) -> dict[str, psutil.Process]:
    """The recorded daemons still running; a StateError for a PID alive as another."""
    found = {}
    for name, pid in cluster.pids.items():
        try:
            proc = psutil.Process(pid)
            why = _stranger(cluster, name, proc)
        except psutil.NoSuchProcess:  # a zombie too: exited
            continue
        except psutil.AccessDenied:
            why = "cannot be read by this user"
        if why:
            raise StateError(f"{cluster.root / STATE_FILE} names PID {pid} as {name}, but PID "
                             f"{pid} {why}; refusing to signal it (if the cluster is gone, "
                             f"remove {cluster.root})")
        found[name] = proc
    return found


def steps(cluster: SlurmCluster) -> list[psutil.Process]:
    """Each root ``slurmstepd`` with a socket in the cluster's folder, and its tree, but never
    the caller or its parents (a stop run from inside a job)."""
    program = shutil.which("slurmstepd")
    if not program:
        return []
    exe, inside = os.path.realpath(program), f"{cluster.root}{os.sep}"
    mine = {os.getpid(), *(proc.pid for proc in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(["exe", "uids"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["exe"] == exe and proc.info["uids"].real == 0 and any(
                    str(sock.laddr).startswith(inside) for sock in proc.net_connections("unix")):
                found += [proc, *proc.children(recursive=True)]
    return [proc for proc in found if proc.pid not in mine]


def stop(cluster: SlurmCluster) -> None:
    """Cancel the jobs, stop the steps and daemons it recognises, remove the folder."""
    running = daemons(cluster)
    if "slurmctld" in running:
        with contextlib.suppress(CommandFailed):
            jobs = cluster.run(["squeue", "-h", "-o", "%i"], check=False,
                               timeout=CLIENT_TIMEOUT).stdout.split()
            if jobs:
                cluster.run(["scancel", *jobs], check=False, timeout=CLIENT_TIMEOUT)
    terminate(steps(cluster), 10, late=lambda: steps(cluster))
    for proc in reversed(list(running.values())):
        terminate([proc], 10)
    shutil.rmtree(cluster.root, ignore_errors=True)


def save(cluster: SlurmCluster) -> Path:
    """Record the cluster in its folder, so another command can find and stop it."""
    path = cluster.root / STATE_FILE
    atomic_write_text(path, json.dumps({"conf": str(cluster.conf), "nodes": list(cluster.nodes),
                                        "pids": cluster.pids, "started": cluster.started},
                                       indent=1) + "\n", mode=0o644)
    return path


def check_folder(root: Path) -> None:
    """A :class:`StateError` unless the cluster's folder and record, and the way, are the user's."""
    for path in (root, root / STATE_FILE):
        try:
            why = not_yours_alone(path, os.lstat(path))
        except FileNotFoundError:
            continue
        why = f"{path} {why}" if why else unsafe_way(path)
        if why:
            raise StateError(f"{why}; refusing to use the local Slurm cluster's record in "
                             f"{root} (someone else may have planted it: check it, remove it)")


def load(root: Path) -> SlurmCluster | None:
    """The cluster recorded in ``root``, or None; a bad or foreign record is a StateError."""
    check_folder(root)
    data = read_json_object(root / STATE_FILE)
    if data is None:
        return None
    conf, nodes, pids = data.get("conf"), data.get("nodes"), data.get("pids")
    started = data.get("started", {})
    if (conf != str(root / "slurm.conf") or not isinstance(nodes, list)
            or not all(isinstance(n, str) for n in nodes) or not isinstance(pids, dict)
            or not all(type(p) is int and p > 0 for p in pids.values())
            or not isinstance(started, dict)
            or not all(isinstance(t, (int, float)) for t in started.values())):
        raise StateError(f"{root / STATE_FILE} is not a record this tool wrote (conf "
                         f"{root / 'slurm.conf'}, nodes, PIDs); refusing to use it")
    return SlurmCluster(root=root, conf=Path(conf), nodes=tuple(nodes), pids=dict(pids),
                        started={k: float(v) for k, v in started.items()})
