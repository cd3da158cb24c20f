"""Multi-node runs that cross a real network interface: two network namespaces of this machine,
one per "node", joined by a veth pair with IPv4 addresses from the test's own range. Each node
runs the exact command a 2-node run gives each node (the tool's plan, less its srun prefix):
torchrun's c10d rendezvous and gloo go over the veth, bound to it by the site profile's
GLOO_SOCKET_IFNAME, as LUMI's profile binds NCCL to hsn. Without that setting a rank advertises
its host name's loopback address, and the run fails saying so.

Only namespaces and links this test creates are touched, and they are removed at teardown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from containers.inputs.sites import load_sites
from containers.prove import verdict
from containers.prove.kind import plan
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from containers.run.rendezvous import Rendezvous
from containers.run.workload import Placement, collect
from tests.fixtures import ROOT

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]

#: The test's own addresses (a /30 of 10.213.0.0/16, used by nothing else here).
ADDRESSES = ("10.213.7.1", "10.213.7.2")
#: The interface's name inside each namespace (the same on both nodes, as hsn0 is on a site).
IFNAME = "hsn0"
#: Each node's host name. Its /etc/hosts (``ip netns exec`` mounts /etc/netns/NS/hosts over
#: /etc/hosts, and Apptainer binds that in) lists it first at 127.0.1.1, as Debian's installer
#: writes it, and then at its veth address: torchrun finds the rendezvous address among the host
#: name's addresses and hosts the store, while gloo, asked for the host name's address, gets
#: the loopback one unless GLOO_SOCKET_IFNAME names the interface.
HOSTNAMES = ("ctn-node-a", "ctn-node-b")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_nodes():
    """Two namespaces joined by a veth pair (``hsn0`` in each, 10.213.7.1/30 and .2/30, and
    ``lo`` up); yields their names; removed (with the pair) at teardown."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (./setup.sh runs as root)")
    tag = f"{os.getpid() % 100000}"
    names = (f"ctn-a-{tag}", f"ctn-b-{tag}")
    ends = (f"ctva{tag}", f"ctvb{tag}")
    made: list[str] = []
    hosts = "127.0.0.1 localhost\n" + "".join(
        f"{address} {host}\n" for address, host in zip(ADDRESSES, HOSTNAMES))
    try:
        for name, host in zip(names, HOSTNAMES):
            _ip("netns", "add", name)
            made.append(name)
            etc = Path("/etc/netns") / name
            etc.mkdir(parents=True)
            (etc / "hosts").write_text(f"127.0.1.1 {host}\n" + hosts)
        _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for name, end, address in zip(names, ends, ADDRESSES):
            _ip("link", "set", end, "netns", name)
            _ip("-n", name, "link", "set", end, "name", IFNAME)
            _ip("-n", name, "addr", "add", f"{address}/30", "dev", IFNAME)
            _ip("-n", name, "link", "set", IFNAME, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in made:  # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        try:
            Path("/etc/netns").rmdir()  # only when no other namespace keeps files there
        except OSError:
            pass


def _site(interface: bool):
    local = load_sites(ROOT)["local"]
    env = {k: v for k, v in local.env.items() if k != "GLOO_SOCKET_IFNAME"}
    chosen = {**env, "GLOO_SOCKET_IFNAME": IFNAME} if interface else env
    return local.model_copy(update={"env": chosen})


def _run(nodes: tuple[str, str], tmp_path: Path, options, *, interface: bool = True,
         port: int = 29561) -> verdict.Result:
    """Plan the 2-node run as the tool does, start each node's command in its namespace, and
    judge what the ranks left as an interactive run is judged."""
    settings = load_settings(ROOT, {"results_dir": str(tmp_path / "results")})
    site = _site(interface)
    workload = plan(load_targets(ROOT)["cpu"], site, settings=settings,
                    runtime=_runtime(), options=options, run_id="netns",
                    placement=Placement(nodes=2, rendezvous=Rendezvous(
                        host=ADDRESSES[0], port=str(port), id="netns")))
    argv = workload.argv[workload.argv.index(workload.launch.runtime.binary):]  # less srun
    workload.out_dir.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen(["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c",
                               'hostname "$0" && exec "$@"', host, *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, host in zip(nodes, HOSTNAMES)]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
    lines = [line for out in outputs for line in out.splitlines()]
    status = next((p.returncode for p in procs if p.returncode), 0)
    outcome = collect(workload, returncode=status, timed_out=False, lines=lines, seconds=1.0)
    return verdict.Result(options.kind, workload, outcome)


def _runtime():
    from containers.host.runtime import find_runtime
    return find_runtime("auto")


@pytest.mark.parametrize("ranks", [1, 2])
def test_smoke_crosses_the_veth(cpu_image, two_nodes, tmp_path, ranks: int) -> None:
    result = _run(two_nodes, tmp_path, SmokeOptions(gpus=ranks, sizes="1K:256K", iters=3,
                                                    warmup=1, timeout=180), port=29561 + ranks)
    assert result.reasons == [], "\n".join(result.outcome.lines[-40:])
    report = json.loads((result.plan.out_dir / "allreduce.json").read_text())
    assert report["nodes"] == 2 and report["world_size"] == 2 * ranks, report


def test_ddp_trains_across_the_veth(cpu_image, two_nodes, tmp_path) -> None:
    result = _run(two_nodes, tmp_path, TrainOptions(example="ddp", gpus=2, model="cnn",
                                                    model_size="tiny", epochs=2, samples=512,
                                                    batch_size=32, timeout=240), port=29571)
    assert result.reasons == [], "\n".join(result.outcome.lines[-40:])
    report = json.loads((result.plan.out_dir / "train.json").read_text())
    assert report["world_size"] == 4 and report["loss_last"] < report["loss_first"], report


def test_without_the_interface_setting_a_rank_names_the_loopback(cpu_image, two_nodes,
                                                                 tmp_path) -> None:
    result = _run(two_nodes, tmp_path, SmokeOptions(gpus=1, sizes="1K:4K", iters=2, warmup=1,
                                                    timeout=30), interface=False, port=29581)
    assert not result.ok
    # the rank on the node that is not the first refuses before joining (the first node is
    # elsewhere); the first node's rank fails joining and says why; the verdict names one
    named = [r for r in result.reasons if re.search(
        r"rank \d on ctn-node-[ab] advertises the loopback address 127\.0\.1\.1 to the other "
        r"nodes \(from the host name ctn-node-[ab] \(no GLOO_SOCKET_IFNAME set\)\); set "
        r"GLOO_SOCKET_IFNAME in the site profile", r)]
    assert named, result.reasons
    refused = [line for line in result.outcome.lines if "advertises the loopback" in line]
    assert any("joining" not in line for line in refused), refused
