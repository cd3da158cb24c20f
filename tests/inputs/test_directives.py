"""The one directive grammar, per scheduler: what a job's extra ``#SBATCH``/``#PBS`` lines may
say, how a Slurm value is quoted, and (against the real sbatch installed here) that a prefix it
refuses is one sbatch reads as a refused option or refuses as ambiguous. sbatch parses its
options before it reads the cluster's configuration further than its name, so a one-line
slurm.conf is enough and no daemon is started."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from containers.errors import UsageError
from containers.inputs import directives, flags


def _check(text: str, scheduler: str = "slurm") -> str:
    return flags.directive(scheduler)("--directive", text)


@pytest.mark.parametrize("text, written", [
    ("--constraint=hbm", "--constraint=hbm"), ("-C gpu", "-C gpu"),
    ("--constraint=gpu&hbm80g", "--constraint='gpu&hbm80g'"),
    ("-C gpu&hbm80g", "-C 'gpu&hbm80g'"), ("--constraint=[rack1*2|rack2*4]",
                                            "--constraint='[rack1*2|rack2*4]'"),
    ("--tres-bind=gres/gpu:closest", "--tres-bind=gres/gpu:closest"),
    ("--segment=2", "--segment=2"), ("--oom-kill-step=1", "--oom-kill-step=1"),
    ("--mem=64G", "--mem=64G"), ("--constr=hbm", "--constr=hbm"), ("--hint=nomultithread",
                                                                    "--hint=nomultithread"),
    ("--nosuch=1", "--nosuch=1"), ("-y 1", "-y 1"), ("-x n3", "-x n3"),
])
def test_a_slurm_site_takes_sbatchs_own_spelling_quoted(text: str, written: str) -> None:
    """Options the tool does not set pass, known or not (sbatch judges them); a constraint
    expression is quoted as sbatch reads quotes in #SBATCH lines."""
    assert _check(text) == written


@pytest.mark.parametrize("text, own", [
    ("--time=9-00:00:00", "--time"), ("-t 10", "--time"), ("--partition=big", "--partition"),
    ("-p big", "--partition"), ("--account=other", "--account"), ("-A other", "--account"),
    ("--nodes=64", "--nodes"), ("-N 2", "--nodes"), ("--gpus-per-node=8", "--gpus-per-node"),
    ("--gres=gpu:8", "--gpus-per-node"), ("--ntasks-per-node=8", "--gpus-per-node"),
    ("-c 8", "--gpus-per-node"), ("--qos=high", "--qos"), ("-q high", "--qos"),
    ("--reservation=r", "--reservation"), ("--parti=big", "--partition"),
    ("--accou=other", "--account"), ("--reserv=r", "--reservation"),
    ("--tasks-per-node=8", "--gpus-per-node"), ("--qo=high", "--qos"),
])
def test_a_slurm_option_the_tool_sets_names_the_tools_flag(text: str, own: str) -> None:
    with pytest.raises(UsageError) as refused:
        _check(text)
    message = str(refused.value)
    assert message.startswith("--directive ") and f"use {own}" in message
    assert f"(got {text!r})" in message and "\n" not in message


@pytest.mark.parametrize("text", [
    "--uid=0", "--gid=0", "--wrap=id", "--export=ALL,LD_PRELOAD=/tmp/x.so", "--export=NONE",
    "--chdir=/", "-D /", "--output=/etc/x", "-o /etc/x", "--error=/etc/x", "--job-name=x",
    "-J x", "--get-user-env", "--export-file=/x", "--input=/etc/shadow", "--container=x",
    "--outp=x", "--chd=/", "--ui=0", "--wr=id", "--o=/x", "--ex=x", "--gpu=1",
])
def test_a_slurm_option_out_of_the_tools_hands_or_its_prefix_is_refused(text: str) -> None:
    with pytest.raises(UsageError) as refused:
        _check(text)
    assert str(refused.value).startswith("--directive ") and "\n" not in str(refused.value)


@pytest.mark.parametrize("text, reads", [("--outp=x", "--output"), ("--chd=/", "--chdir"),
                                         ("--o=/x", None), ("--ti=1", None)])
def test_a_prefix_names_what_sbatch_reads(text: str, reads: str | None) -> None:
    with pytest.raises(UsageError) as refused:
        _check(text)
    message = str(refused.value)
    assert f"(sbatch reads {reads})" in message if reads else "option whole" in message


@pytest.mark.parametrize("text", ["-C gpu", "-l walltime=99:00:00", "-l select=9:ngpus=4",
                                  "-q big", "-A other", "-N x", "-o /x", "-V", "-v X=1",
                                  "-W group_list=x", "-S /bin/evil", "--constraint=gpu",
                                  "-l Walltime=1:00:00", "-l place=scatter,walltime=9:00:00",
                                  "-l place=scatter&x", "-l"])
def test_a_pbs_site_keeps_qsubs_rules(text: str) -> None:
    """-C is qsub's directive prefix on a PBS site; qsub has no long options; its values keep
    the plain rule (qsub reads no quoting)."""
    with pytest.raises(UsageError, match="^--directive "):
        _check(text, "pbs")


@pytest.mark.parametrize("text", ["-l place=scatter", "-m e", "-r n", "-l mem=4GB"])
def test_a_pbs_option_the_tool_does_not_set_passes(text: str) -> None:
    assert _check(text, "pbs") == text


@pytest.mark.parametrize("text", ["--qos=--x", "--constraint=-x", "--qos --x", "--x=a b",
                                  "--constraint=hbm\n#SBATCH --uid=0", "", "constraint=hbm",
                                  "--constraint=a'b", '--comment="x"', "--constraint=a\\b",
                                  "--x=$(id)", "--x=`id`"])
def test_a_directive_that_is_not_one_option_is_refused_in_one_line(text: str) -> None:
    for scheduler in ("slurm", "pbs"):
        with pytest.raises(UsageError) as refused:
            _check(text, scheduler)
        message = str(refused.value)
        assert "\n" not in message and message.endswith(f"(got {text!r})")


def test_the_render_uses_the_one_grammar_for_its_scheduler() -> None:
    """A Resources made in code (no request) is checked at render, for its scheduler."""
    from containers.batch.schedulers import SCHEDULERS, Resources
    res = Resources(name="j", time="01:00:00", partition=None, account=None, output="o/j-%j.out",
                    directives=("-C gpu",))
    assert "#SBATCH -C gpu" in SCHEDULERS["slurm"].preamble(res)
    with pytest.raises(UsageError, match="directive prefix"):
        SCHEDULERS["pbs"].preamble(res)


# ------------------------------------------------------------------ against the real sbatch
@pytest.fixture(scope="module")
def sbatch(tmp_path_factory: pytest.TempPathFactory):
    """sbatch with an argument, its first line of complaint back (it exits before any job)."""
    if not shutil.which("sbatch"):
        pytest.skip("sbatch is not installed")
    conf = Path(tmp_path_factory.mktemp("slurm")) / "slurm.conf"
    conf.write_text("ClusterName=probe\nSlurmctldHost=localhost\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def run(*argv: str) -> str:
        done = subprocess.run(["sbatch", *argv], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=10)
        return (done.stderr or done.stdout).splitlines()[0]
    return run


def test_a_prefix_refused_here_is_a_refused_option_or_ambiguous_to_sbatch(sbatch) -> None:
    """Every prefix of every refused long option: where the grammar refuses it, the installed
    sbatch reads it as a refused option (the only one it begins: unique) or refuses it as
    ambiguous, never as another whole option; where it passes, sbatch reads it whole."""
    prefixes = {name[:end] for name in directives.SLURM_REFUSED for end in range(2, len(name))}
    for prefix in sorted(prefixes):
        said = sbatch(f"--{prefix}")
        read = re.search(r"option '--([a-z-]+)' requires an argument", said)
        try:
            _check(f"--{prefix}=1")
        except UsageError:
            assert "ambiguous" in said or not read or read[1] in directives.SLURM_REFUSED, \
                (prefix, said)
        else:
            assert prefix in directives.SLURM_WHOLE and read and read[1] == prefix, (prefix, said)
