"""The one directive grammar: what a job's extra ``#SBATCH``/``#PBS`` lines may say. Refused is
only what the tool sets or what takes the job out of its hands (a prefix too: ``getopt_long``)."""

from __future__ import annotations

import re
import shlex

#: Refused sbatch options (long names as in ``man sbatch`` of Slurm 26.05, SchedMD/slurm tag
#: slurm-26-05-3-1, doc/man/man1/sbatch.1, plus ``tasks-per-node`` and ``ntasks-per-tres`` of
#: its getopt table, src/common/slurm_opt.c): the tool's flag that sets each, "" where only the
#: tool sets it, None where it would change who or what the job runs.
SLURM_REFUSED: dict[str, str | None] = {
    "time": "--time", "time-min": "--time", "partition": "--partition", "account": "--account",
    "nodes": "--nodes", "qos": "--qos", "reservation": "--reservation",
    **dict.fromkeys("gpus gpus-per-node gpus-per-task gres ntasks ntasks-per-node tasks-per-node "
                    "ntasks-per-gpu ntasks-per-tres cpus-per-task mem-per-gpu".split(),
                    "--gpus-per-node"),
    **dict.fromkeys("job-name output error chdir exclusive parsable test-only help usage version "
                    "quiet".split(), ""),
    **dict.fromkeys("uid gid wrap export export-file get-user-env input container open-mode "
                    "propagate bb bbf".split(), None)}
#: sbatch options whose whole name begins a refused one (getopt_long takes a whole name first).
SLURM_WHOLE = ("mem",)
#: sbatch's short options that are refused ones (Slurm 26.05, as above); other letters pass.
SBATCH_SHORT = dict(zip("ADGJNQVcehinopqt", "account chdir gpus job-name nodes quiet version "
                        "cpus-per-task error help input ntasks output partition qos time".split()))
#: Refused qsub options (PBS Pro's qsub(1B), openpbs/openpbs doc/man1/qsub.1B): what each sets,
#: and as above the tool's flag, "" or None.
PBS_REFUSED: dict[str, tuple[str, str | None]] = {
    "A": ("account", "--account"), "q": ("queue", "--partition"), "N": ("job name", ""),
    "o": ("output path", ""), "e": ("error path", ""), "j": ("join", ""), "R": ("remove", ""),
    "z": ("quiet", ""), "C": ("directive prefix", ""), "u": ("user list", None),
    "S": ("shell", None), "v": ("variable list", None), "V": ("whole environment", None),
    "W": ("additional attributes", None), "k": ("keep", None), "I": ("interactive", None),
    "G": ("GUI session", None), "X": ("X11", None)}
#: ``-l`` resources the tool sets (PBS resource names are matched whole, in any case).
PBS_RESOURCES = {"walltime": "--time", "select": "--nodes", "nodes": "--nodes",
                 **dict.fromkeys(("ngpus", "ncpus", "mpiprocs"), "--gpus-per-node")}

#: What a PBS directive's value (and any value the tool writes itself) may hold: qsub reads no
#: shell quoting, so other characters are refused rather than quoted.
VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
#: A Slurm directive's value: sbatch reads quotes, so ``gpu&hbm80g`` or ``[a*2|b*4]`` pass,
#: quoted; nothing a shell would expand (spaces, quotes, ``\``, ``$``, backticks, controls).
SLURM_VALUE = re.compile(r"[!#%&(-\[\]-_a-~]+\Z")
_OPTION = re.compile(r"(?:--(?P<long>[a-z][a-z-]*)(?:=(?P<lvalue>\S+))?"
                     r"|-(?P<short>[A-Za-z])(?: (?P<svalue>\S+))?)\Z")
_SHAPE = ("takes one scheduler option such as --constraint=gpu, -C gpu or -l place=scatter, on "
          "one line (a value that does not start with -{chars})")


def scheduler_option(value: object, scheduler: str) -> str:
    """``value`` as one more ``#SBATCH``/``#PBS`` line, or a ValueError saying why not."""
    text = str(value)
    match = _OPTION.match(text)
    rule = SLURM_VALUE if scheduler == "slurm" else VALUE
    given = match and (match["lvalue"] or match["svalue"])
    if not match or (given and (given.startswith("-") or not rule.match(given))):
        raise ValueError(_SHAPE.format(chars="" if scheduler == "slurm" else
                                       "; letters, digits and _ @ % + = : , . / -"))
    refusal = (_slurm_refusal if scheduler == "slurm" else _pbs_refusal)(match)
    if refusal:
        raise ValueError(refusal)
    if not given or scheduler != "slurm":
        return text
    return text[:len(text) - len(given)] + shlex.quote(given)


def _slurm_refusal(match: re.Match[str]) -> str:
    """Why sbatch must not read this option here ("" where it may)."""
    if match["short"]:
        name = SBATCH_SHORT.get(match["short"])
        return _refusal(f"-{match['short']} (sbatch --{name})", SLURM_REFUSED[name]) if name \
            else ""
    name = match["long"]
    if name in SLURM_REFUSED:
        return _refusal(f"--{name}", SLURM_REFUSED[name])
    begun = [whole for whole in SLURM_REFUSED if whole.startswith(name)]
    if not begun or name in SLURM_WHOLE:
        return ""
    if len(begun) > 1:
        return (f"names --{name}, which sbatch reads as any of --" + ", --".join(begun)
                + " or refuses: write the option whole")
    return _refusal(f"--{name} (sbatch reads --{begun[0]})", SLURM_REFUSED[begun[0]])


def _pbs_refusal(match: re.Match[str]) -> str:
    """Why qsub must not read this option here ("" where it may)."""
    letter = match["short"]
    if not letter:
        return f"names --{match['long']}: qsub takes single-letter options (-l place=scatter)"
    if letter != "l":
        what, flag = PBS_REFUSED.get(letter, ("", ""))
        return _refusal(f"-{letter} (qsub: {what})", flag) if what else ""
    if not match["svalue"]:
        return "takes -l with its resources (-l place=scatter)"
    names = (pair.partition("=")[0].lower() for pair in match["svalue"].split(","))
    return "; ".join(dict.fromkeys(_refusal(f"-l {name}", PBS_RESOURCES[name])
                                   for name in names if name in PBS_RESOURCES))


def _refusal(shown: str, flag: str | None) -> str:
    if flag is None:
        return (f"refuses {shown}: it would change who the job runs as, what it runs or what "
                "reaches its processes")
    return f"names {shown}, which the tool sets" + (
        f": use {flag}" if flag else " itself (the script, its output, its name and what sbatch "
        "or qsub prints are the tool's)")
