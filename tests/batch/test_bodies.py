"""The shell lines of a job's body: host modules (across nodes, those the binds name too), a
build by ``invoke build`` where this checkout's environment runs, the verdict's ``invoke
verdict`` with the job's status."""

from __future__ import annotations

from pathlib import Path

from containers.batch.bodies import build_body, loaded_modules, module_lines


def test_modules_across_nodes_add_the_transports(data_world) -> None:
    lumi = data_world[1]["lumi"]
    one, many = loaded_modules(lumi, multinode=False), loaded_modules(lumi, multinode=True)
    assert one == list(lumi.modules)
    assert many[:len(one)] == one and set(many) >= set(lumi.transport.modules)
    assert module_lines([]) == []
    assert module_lines(["a b"], multinode=True)[1:4] == ["set +u", "module load 'a b'", "set -u"]


def test_a_build_here_runs_this_checkouts_invoke(data_world) -> None:
    targets, sites = data_world
    lines = build_body(targets["lumi-rocm"], sites["lumi"], root=Path("/proj"),
                       host_arch="x86_64", venv=Path("/proj/.venv"), tool=())
    assert lines[-1] == "/proj/.venv/bin/invoke build --target lumi-rocm"
