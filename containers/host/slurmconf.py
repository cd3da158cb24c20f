"""The slurm.conf of a cluster on this machine: :func:`two_node_conf` for the tests' batch jobs,
or :func:`site_conf_writer`'s shaped like a site profile, so Slurm refuses what the site would."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from pathlib import Path
from typing import Callable, Sequence

from containers.files import atomic_write_text
from containers.inputs.sites import Site

#: The one account a site-shaped cluster of a site that requires one accepts.
TEST_ACCOUNT = "proj_1"
#: Nodes started per site-shaped cluster: enough for the 2-node jobs.
SITE_NODES = 2
#: Writes a slurm.conf into a root folder, for the given ports and munge socket.
ConfWriter = Callable[[Path, list[int], Path], Path]


def base_lines(root: Path, ctld_port: int, slurmd_port: int, munge_socket: Path, *,
               memory: bool = False) -> list[str]:
    """What every cluster's slurm.conf says (``memory``: allocated, as at the sites)."""
    controller = socket.gethostname().split(".")[0]
    return [
        "ClusterName=containers-test",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
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
        # No cgroups: what works in a container or a CI machine without systemd's delegation.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=" + ("CR_Core_Memory" if memory else "CR_Core"),
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root}/jobcomp.txt",
        "MinJobAge=600",  # finished jobs stay visible to scontrol while they are read
        "InactiveLimit=0",
        "KillWait=5",
    ]


def two_node_conf(root: Path, ports: list[int], munge_socket: Path) -> Path:
    """The two-node cluster: n1 and n2, both this machine, one partition ``debug``."""
    node_ports = ports[1:]
    lines = base_lines(root, ports[0], node_ports[0], munge_socket)
    cpus = os.cpu_count() or 1
    for name, port in zip(("n1", "n2"), node_ports):
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                     f"CPUs={cpus} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP")
    conf = root / "slurm.conf"
    atomic_write_text(conf, "\n".join(lines) + "\n")
    return conf


#: slurmctld refuses what the site would by a job_submit/lua filter, as sites do: a job naming
#: no account or another (``AllowAccounts`` needs slurmdbd: 22.05 then refuses every job, or none
#: with EnforcePartLimits=NO), or without a constraint the site requires (GPU jobs: GPUs asked).
_SUBMIT_FILTER = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
{checks}    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
"""
_ACCOUNT_CHECK = f"""\
    if job_desc.account ~= "{TEST_ACCOUNT}" then
        slurm.log_user("this cluster requires an account: --account={TEST_ACCOUNT}")
        return slurm.ESLURM_INVALID_ACCOUNT
    end
"""
_FEATURE_CHECK = """\
    if {gpu_only}not string.find(job_desc.features or "", "{name}", 1, true) then
        slurm.log_user("this cluster requires the constraint {name}{of}: {line}")
        return slurm.ERROR
    end
"""
_GPU_JOB = ('string.find((job_desc.tres_per_node or "") .. (job_desc.tres_per_job or "") .. '
            '(job_desc.tres_per_task or ""), "gpu", 1, true) and ')
#: A constraint in a profile's required lines (sbatch -C / --constraint), and its feature names.
_CONSTRAINT = re.compile(r"(?:-C |--constraint=)(?P<expr>\S+)\Z")
_FEATURE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def required_features(site: Site) -> dict[str, tuple[str, str]]:
    """The node features the profile's constraints name, with their lines and jobs."""
    found: dict[str, tuple[str, str]] = {}
    for scope, lines in (("", site.job.directives), ("gpu", site.job.gpu_directives)):
        for line in lines:
            match = _CONSTRAINT.match(line)
            for name in _FEATURE.findall(match["expr"]) if match else ():
                found.setdefault(name, (line, scope))
    return found


def _submit_filter(site: Site) -> str | None:
    """The job_submit.lua of ``site``'s shape, or None where it refuses nothing."""
    checks = _ACCOUNT_CHECK if site.account_required else ""
    for name, (line, scope) in required_features(site).items():
        checks += _FEATURE_CHECK.format(name=name, line=line, gpu_only=_GPU_JOB if scope else "",
                                        of=" of GPU jobs" if scope else "")
    return _SUBMIT_FILTER.format(checks=checks) if checks else None


def gres_type(site: Site) -> str:
    """Else the GPU model's first word (``A100 40GB``: ``a100``), as sites name them."""
    model = _FEATURE.match(site.gpus.model or "")
    return site.gpus.gres_type or (model[0].lower() if model else "gpu")


def site_node_names(site: Site) -> tuple[str, ...]:
    return tuple(f"{site.name}{i}" for i in range(1, SITE_NODES + 1))


def _site_node_lines(site: Site, root: Path, names: Sequence[str],
                     ports: Sequence[int]) -> tuple[list[str], list[str]]:
    """slurm.conf's and gres.conf's node lines: the site's cores, memory (the largest
    ``allocatable_gb``, refusing more) and GPUs (stand-ins: slurmd counts only GPUs with a File)."""
    gpus, gpu_type = site.gpus.per_node, gres_type(site)
    memory_mb = _node_memory_mb(site)
    features = ",".join(required_features(site))
    nodes, gres = [], []
    for name, port in zip(names, ports):
        devices = root / "dev" / name
        devices.mkdir(parents=True)
        for index in range(gpus):
            os.mknod(devices / f"gpu{index}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        nodes.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                     f"Port={port} CPUs={site.cpus_per_node or 2} RealMemory={memory_mb} "
                     + (f"Feature={features} " if features else "")
                     + (f"Gres=gpu:{gpu_type}:{gpus} " if gpus else "") + "State=UNKNOWN")
        if gpus:
            gres.append(f"NodeName={name} Name=gpu Type={gpu_type} "
                        f"File={devices}/gpu[0-{gpus - 1}]")
    return nodes, gres


def _node_memory_mb(site: Site) -> int:
    """A node's RealMemory (MiB): the most a partition allocates, else what jobs ask."""
    figures = [part.allocatable_gb for part in site.partitions.values() if part.allocatable_gb]
    if figures:
        return max(figures) * 1024
    return max(site.memory.per_gpu_gb * site.gpus.per_node, 8) * 1024 + 1024


def _accounting(site: Site, root: Path, dbd_port: int, munge_socket: Path) -> list[str]:
    """Slurm enforces a site's QoS only with accounting: slurmdbd's slurm.conf lines and conf, and
    ``accounting.json``'s sacctmgr calls (cluster, account, each QoS with DenyOnLimit, user)."""
    if not site.qos:
        return []
    atomic_write_text(root / "slurmdbd.conf", "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={munge_socket}", "DbdHost=localhost",
        f"DbdPort={dbd_port}", "SlurmUser=root", f"PidFile={root}/slurmdbd.pid",
        f"LogFile={root}/log/slurmdbd.log", "StorageType=accounting_storage/mysql",
        "StorageHost=localhost", "StorageUser=root", "StorageLoc=slurm_acct_db"]) + "\n",
                      mode=0o600)
    add = ["sacctmgr", "-i", "add"]
    calls = [[*add, "cluster", "containers-test"], [*add, "account", TEST_ACCOUNT]]
    for name, qos in site.qos.items():  # GPUs per job: the tool's check (a gres/gpu TRES
        # is known to slurmdbd only once slurmctld has registered, after these calls)
        calls.append([*add, "qos", name, "Flags=DenyOnLimit",
                      *([f"MaxWall={-(-qos.max_time // 60)}"] if qos.max_time else []),
                      *([f"MaxTRESPerJob=node={qos.max_nodes}"] if qos.max_nodes else [])])
    calls.append([*add, "user", "root", f"Account={TEST_ACCOUNT}", f"QOS={','.join(site.qos)}",
                  *([f"DefaultQOS={site.default_qos}"] if site.default_qos else [])])
    atomic_write_text(root / "accounting.json", json.dumps(calls) + "\n")
    return ["AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost", f"AccountingStoragePort={dbd_port}",
            "AccountingStorageEnforce=associations,limits,qos"]


def site_conf_writer(site: Site) -> ConfWriter:
    """A slurm.conf shaped like ``site``'s, whose limits Slurm enforces as the site's."""
    def write(root: Path, ports: list[int], munge_socket: Path) -> Path:
        names = site_node_names(site)
        lines = [*base_lines(root, ports[0], ports[1], munge_socket, memory=True),
                 "GresTypes=gpu", "SlurmdParameters=config_overrides",
                 # as sites do; else a job over a partition's limits waits forever
                 # (PartitionTimeLimit)
                 "EnforcePartLimits=ALL"]
        nodes, gres = _site_node_lines(site, root, names, ports[1:])
        lines += nodes
        accounting = _accounting(site, root, ports[-1], munge_socket)
        lines = [line for line in lines if not (accounting and line.startswith(
            "AccountingStorageType="))] + accounting
        default = site.default_partition or next(iter(site.partitions), None)
        for part in site.partitions:
            limits = site.partition(part)
            minutes = -(-limits.max_time // 60) if limits.max_time else None
            lines.append(
                f"PartitionName={part} Nodes={','.join(names)} "
                f"MaxTime={minutes if minutes else 'INFINITE'} "
                f"MaxNodes={limits.max_nodes or 'UNLIMITED'} "
                + (f"MaxMemPerNode={limits.allocatable_gb * 1024} " if limits.allocatable_gb
                   else "")
                + ("Default=YES " if part == default else "") + "State=UP")
        if not site.partitions:  # a profile that lists none: Slurm's default partition
            lines.append(f"PartitionName=debug Nodes={','.join(names)} Default=YES "
                         "MaxTime=INFINITE State=UP")
        atomic_write_text(root / "gres.conf", "".join(line + "\n" for line in gres))
        lua = _submit_filter(site)
        if lua:  # slurmctld reads job_submit.lua beside slurm.conf
            lines.append("JobSubmitPlugins=lua")
            atomic_write_text(root / "job_submit.lua", lua)
        conf = root / "slurm.conf"
        atomic_write_text(conf, "\n".join(lines) + "\n")
        return conf
    return write
