"""What every workload script (``allreduce.py``, ``train.py``) shares: the exit codes the host
reads, the flags every launcher passes, the argparse value types, how a rank takes its place
(cores, backend, device, ``device-<RANK>.json``), the per-rank completion file and the guarded
``main``.

The host tells a run's ranks apart by these: ``device-<RANK>.json`` says what a rank ran on (written
before the process group exists, whatever happens next), ``rank-<RANK>.json`` says it finished
cleanly, a usage error is one ``<script>: error: …`` line (from rank 0 only, so N ranks do not
print it N times; from the rank itself when only its own part of a flag is wrong) with exit status
2, a rank without the GPU ``--expect-gpu`` promised prints one ``<script>: rank R on HOST: expected
a … GPU, but …`` line (every such rank, no traceback) with exit status 4, and any other failure
names the rank and host and prints the traceback with exit status 3.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

import choices
import devices
import distenv

EXIT_OK = 0
#: The run finished but its result is wrong (all_reduce values, ranks disagree, loss not finite).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
#: --expect-gpu named a GPU kind and this rank has no usable GPU of that kind.
EXIT_NO_GPU = 4
EPILOG = ("Exit status: 0 ok, 1 {failed}, 2 bad command line, config or data, 3 other error, "
          "4 no usable GPU of the kind --expect-gpu names.")


class ScriptUsageError(Exception):
    """A bad flag, config file or data folder: one line on stderr from rank 0, exit status 2.

    The script's own, named apart from the engine's ``containers.errors.UsageError``: jobs/ runs
    in the images with torch only and never imports ``containers``."""


class RankUsageError(ScriptUsageError):
    """A usage error only this rank hits (its own entry of ``--rank-cores``): the others may not
    see it, so this rank prints it itself."""


class NoGpu(Exception):
    """``--expect-gpu`` named a GPU kind this rank does not have: one line, exit status 4."""


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=``: its ValueError message becomes the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from err

    convert.__name__ = parse.__name__
    return convert


def _checked(convert: Callable[[str], Any], holds: Callable[[Any], bool],
             rule: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that converts and refuses a value outside its range in one line."""

    def parse(text: str) -> Any:
        value = convert(text)
        if not holds(value):
            raise ValueError(f"must be {rule}, got {value}")
        return value

    return argparse_type(parse)


positive_int = _checked(int, lambda value: value >= 1, ">= 1")
non_negative_int = _checked(int, lambda value: value >= 0, ">= 0")
step_factor = _checked(int, lambda value: value >= 2, ">= 2")
fraction = _checked(float, lambda value: 0.0 < value <= 1.0, "in (0, 1]")
positive_float = _checked(float, lambda value: value > 0, "> 0")


def add_counts(parser: argparse.ArgumentParser,
               rows: Sequence[tuple[str, Callable[[str], Any], int, str]]) -> None:
    """Declare whole-number flags from a table of ``(flag, type, default, help)``: one line per
    flag, and the default always shown the same way."""
    for flag, kind, default, text in rows:
        parser.add_argument(flag, type=kind, default=default,
                            help=f"{text} (default: %(default)s)")


def add_common_flags(parser: argparse.ArgumentParser, *, out: str, writes: str,
                     timeout_s: int) -> None:
    """``--backend``, ``--expect-gpu``, ``--rank-cores``, ``--out`` and ``--timeout-s``: what
    the host passes to every workload."""
    parser.add_argument(
        "--backend", choices=choices.BACKENDS, default="auto",
        help="process group backend; auto picks nccl when torch sees a GPU or --expect-gpu names "
        "one (ROCm torch reports its GPUs through torch.cuda and uses RCCL under the name "
        "nccl), else gloo on CPU (default: %(default)s)")
    parser.add_argument(
        "--expect-gpu", choices=choices.GPU_KINDS, default="none",
        help="the GPU kind every rank must run on: a rank whose torch is not that build or "
        f"that sees no GPU of its own exits with status {EXIT_NO_GPU}; auto then means nccl "
        "and --backend gloo is refused (default: %(default)s)")
    parser.add_argument(
        "--rank-cores", type=argparse_type(choices.parse_rank_cores), default=None,
        metavar="LIST",
        help="the CPU cores of each local rank, ranks separated by ':', each a Linux cpulist "
        "(e.g. 49-55:57-63 or 0-1,4:2-3,5); each rank pins itself to its cores before it "
        "touches a GPU (default: no pinning)")
    parser.add_argument(
        "--out", default=out,
        help=f"results folder for {writes}, device-<RANK>.json and rank-<RANK>.json "
        "(default: %(default)s)")
    parser.add_argument(
        "--timeout-s", type=positive_int, default=timeout_s,
        help="seconds before process-group init or a collective is declared hung; passed to "
        "init_process_group (default: %(default)s)")
    parser.add_argument(
        "--no-teardown", action="store_true",
        help="once this rank's results and rank file are written, end the process with "
        "os._exit, without destroy_process_group or the interpreter's shutdown: the host sets "
        "it when the ranks run under qemu-user emulation, where joining the backend's threads "
        "at teardown deadlocks in about one run in ten (default: tear down)")


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: its backend, its device, and its probe (``device-<RANK>.json``)."""

    backend: str
    device: torch.device
    probe: dict[str, Any]


def pin_rank(rank_cores: Optional[list[frozenset[int]]], env: distenv.DistEnv) -> bool:
    """Pin this rank to its cores of ``--rank-cores``; whether it was pinned.

    Under one torchrun per node every rank inherits the whole node, so Slurm cannot bind each to
    the cores next to its GPU (as LUMI's guides do); each rank does it itself, before torch.cuda
    starts threads that would inherit the wrong affinity.
    """
    if rank_cores is None:
        return False
    try:
        devices.check_cores_exist(rank_cores)
    except ValueError as err:
        raise ScriptUsageError(f"--rank-cores: {err}") from err
    if env.local_rank >= len(rank_cores):
        raise RankUsageError(
            f"--rank-cores: rank {env.rank} (local rank {env.local_rank}) has no entry: the map "
            f"names {len(rank_cores)} local ranks")
    try:
        devices.pin(rank_cores[env.local_rank])
    except ValueError as err:
        raise RankUsageError(
            f"--rank-cores: rank {env.rank} (local rank {env.local_rank}): {err}") from err
    return True


def place_rank(args: argparse.Namespace, env: distenv.DistEnv) -> Placement:
    """Pin, choose backend and device as ``--expect-gpu`` demands, write ``device-<RANK>.json``,
    and refuse without the expected GPU; the first thing either workload does.

    The probe is written whatever the choice ends in (a refusal, an error), so the host learns
    what every rank that started saw; nothing falls back to gloo where a GPU was expected.
    """
    pinned = pin_rank(args.rank_cores, env)
    if args.expect_gpu != "none" and args.backend == "gloo":
        raise ScriptUsageError(f"--backend gloo contradicts --expect-gpu {args.expect_gpu}: the "
                               "GPUs would sit idle while the run passes on the CPU")
    missing = devices.missing_gpu(args.expect_gpu, env.local_rank)
    backend, device = "none", torch.device("cpu")
    try:
        if missing is None:
            backend = distenv.choose_backend(args.backend, args.expect_gpu)
            device = distenv.choose_device(backend, env.local_rank)
    finally:
        probe = devices.probe(env, device, pinned)
        distenv.write_json(Path(args.out) / f"device-{env.rank}.json", probe)
    if missing is not None:
        raise NoGpu(missing)
    return Placement(backend=backend, device=device, probe=probe)


def join_group(env: distenv.DistEnv, backend: str, timeout_s: int) -> None:
    """Join the process group. A rank of a run across nodes that would advertise a loopback
    address says so first (it works only when every "node" is this host, as on a test cluster),
    and when joining then fails, that is the reason given, in one line from the rank."""
    loopback = loopback_reason(backend, os.environ)
    if loopback is None:
        distenv.init_process_group(env, backend, timeout_s)
        return
    where = f"rank {env.rank} on {socket.gethostname()} {loopback}"
    if not _is_loopback(os.environ.get("MASTER_ADDR")):
        # the first node is elsewhere: it can never reach this rank's loopback address
        raise RankUsageError(where)
    print(f"warning: {where}", file=sys.stderr, flush=True)
    try:
        distenv.init_process_group(env, backend, timeout_s)
    except Exception as err:  # noqa: BLE001 - gloo's refusal names no address
        raise RankUsageError(f"{where}; joining the process group failed: "
                             f"{str(err).splitlines()[0][:200]}") from err


def spans_nodes(environ: Any) -> bool:
    """Whether this run has ranks on other nodes: torchrun's agents (GROUP_WORLD_SIZE, or
    WORLD_SIZE above LOCAL_WORLD_SIZE), else srun's step."""
    if "GROUP_WORLD_SIZE" in environ:
        return int(environ["GROUP_WORLD_SIZE"]) > 1
    if "LOCAL_WORLD_SIZE" in environ and "WORLD_SIZE" in environ:
        return int(environ["WORLD_SIZE"]) > int(environ["LOCAL_WORLD_SIZE"])
    return int(environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_NNODES") or 1) > 1


def interface_ipv4(name: str) -> Optional[str]:
    """The IPv4 address of interface ``name`` here, or None when it has none (or is missing)."""
    import fcntl
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            # SIOCGIFADDR (linux/sockios.h): the interface's IPv4 address
            packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _is_loopback(host: Optional[str]) -> bool:
    """Whether ``host`` (MASTER_ADDR: the first node's name or address) is this machine's
    loopback, so every "node" may be this host (a test cluster) and loopback could work; an
    unknown or unresolvable host counts as loopback (no conclusion is drawn from it)."""
    if not host:
        return True
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return True
    return address.startswith("127.")


def loopback_reason(backend: str, environ: Any) -> Optional[str]:
    """Why ranks on other nodes could not reach this one: the address it would advertise is a
    loopback one (gloo advertises the address of GLOO_SOCKET_IFNAME's interface, else of the
    host name, which often resolves to 127.0.x.x; NCCL's bootstrap uses NCCL_SOCKET_IFNAME).
    Said before the process group forms, instead of a hang or a connection refused later."""
    if not spans_nodes(environ):
        return None
    setting = "GLOO_SOCKET_IFNAME" if backend == "gloo" else "NCCL_SOCKET_IFNAME"
    names = [n for n in (environ.get(setting) or "").split(",") if n and not n.startswith("^")]
    if names:
        address = interface_ipv4(names[0].lstrip("="))
        if address is None:
            return (f"{setting}={names[0]} names no interface with an IPv4 address on this "
                    "node, so the other nodes cannot reach this rank")
        source = f"{setting}={names[0]}"
    elif backend == "gloo":
        try:
            address = socket.gethostbyname(socket.gethostname())
        except OSError as err:
            return f"the host name {socket.gethostname()} does not resolve ({err})"
        source = f"the host name {socket.gethostname()} (no {setting} set)"
    else:  # NCCL picks a non-loopback interface itself when none is named
        return None
    if address.startswith("127.") or address == "::1":
        return (f"advertises the loopback address {address} to the other nodes (from "
                f"{source}); set {setting} in the site profile to the interface between the "
                "nodes")
    return None


def finish(out: Path, env: distenv.DistEnv, *, teardown: bool, **fields: Any) -> None:
    """Destroy the process group, then write ``OUT/rank-<RANK>.json``, last: the host counts
    the ranks that finished cleanly.

    Without ``teardown`` (``--no-teardown``) the group is left to :func:`guarded_main`'s
    ``os._exit``: under qemu-user a rank joining the gloo worker threads in
    ``destroy_process_group`` hung, one run in ten, with its results already written (the
    joined thread blocked in a futex no thread held). The rank file says which way it ended.
    """
    # torchrun stops every rank once one exits non-zero: a rank whose status fails the job
    # waits for the others (rank 0's report included) before it may exit
    if teardown:
        dist.barrier()
        dist.destroy_process_group()
    distenv.write_json(out / f"rank-{env.rank}.json", {
        "rank": env.rank, "local_rank": env.local_rank, "hostname": socket.gethostname(),
        "pid": os.getpid(), **fields, "teardown": "destroyed" if teardown else "skipped",
        "finished": True})
    if not teardown:
        dist.barrier()


def guarded_main(name: str, run: Callable[[distenv.DistEnv], int], *,
                 teardown: bool = True) -> int:
    """Run ``run`` for this process's place in the job; turn what escapes into an exit status
    (the module's doc says which). Without ``teardown`` the process ends here, through
    ``os._exit`` once its output is flushed (see :func:`finish`), whatever the status."""
    status = _guarded(name, run, distenv.resolve_dist_env(os.environ))
    if not teardown:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _guarded(name: str, run: Callable[[distenv.DistEnv], int], env: distenv.DistEnv) -> int:
    try:
        return run(env)
    except ScriptUsageError as err:
        if env.rank == 0 or isinstance(err, RankUsageError):
            print(f"{name}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except NoGpu as err:
        print(f"{name}: rank {env.rank} on {socket.gethostname()}: {err}", file=sys.stderr,
              flush=True)
        return EXIT_NO_GPU
    except Exception:  # noqa: BLE001 - report which rank failed and exit non-zero
        print(f"{name}: rank {env.rank} on {socket.gethostname()} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        return EXIT_ERROR
