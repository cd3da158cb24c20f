"""The directive grammar against the real sbatch installed here (Slurm 22.05): its option table is
sbatch's, and a prefix resolves to the option sbatch resolves it to. sbatch parses its options
before it reads the cluster's configuration further than its name, so a one-line slurm.conf is
enough and no daemon is started."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from containers.inputs import directives

pytestmark = pytest.mark.skipif(not shutil.which("sbatch"), reason="sbatch is not installed")


@pytest.fixture(scope="module")
def sbatch(tmp_path_factory: pytest.TempPathFactory):
    """sbatch with an argument, its first line of complaint back (it exits before any job)."""
    conf = Path(tmp_path_factory.mktemp("slurm")) / "slurm.conf"
    conf.write_text("ClusterName=probe\nSlurmctldHost=localhost\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def run(*argv: str) -> str:
        done = subprocess.run(["sbatch", *argv], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=10)
        return (done.stderr or done.stdout).splitlines()[0]
    if not re.match(r"slurm(-wlm)? 22\.05", run("--version")):
        pytest.skip("the option table is Slurm 22.05's")
    return run


def test_the_long_option_table_is_the_installed_sbatchs(sbatch) -> None:
    """Every option sbatch names when a one-letter prefix is ambiguous (or the only one it
    resolves to) is in the table, and the table holds nothing else."""
    named = set()
    for letter in "abcdefghijklmnopqrstuvwxyz":
        named |= set(re.findall(r"'--([a-z][a-z-]+)", sbatch(f"--{letter}")))
    assert named == set(directives.SBATCH_LONG)


@pytest.mark.parametrize("prefix", ["outp", "chd", "job-n", "accou", "parti", "ntasks-per-n",
                                    "gpu", "expo", "ti", "constr", "wr"])
def test_a_prefix_resolves_as_sbatch_resolves_it(sbatch, prefix: str) -> None:
    said = sbatch(f"--{prefix}")
    try:
        ours = directives.sbatch_long(prefix)
    except ValueError:
        assert "is ambiguous" in said
    else:
        assert f"option '--{ours}' requires an argument" in said
