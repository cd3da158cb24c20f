"""The one directive grammar: what ``--directive`` may add to a job's ``#SBATCH``/``#PBS`` lines.

A scheduler reads a directive the way its command line reads an option, so a name is matched here
the way sbatch and qsub match it, not as written:

* sbatch reads ``#SBATCH`` lines with ``getopt_long``, which takes any unique prefix of a long
  option (``--outp=`` is ``--output=``, ``--chd=`` is ``--chdir=``); a prefix of two or more
  options is refused by sbatch as ambiguous and here too. :data:`SBATCH_LONG` is sbatch's whole
  long-option table, the options ``getopt_long`` matches a prefix against;
* qsub (PBS Pro) takes single-letter options only (``qsub --version`` aside), and ``-l`` a list of
  ``resource=value`` pairs separated by commas; resource names are matched whole.

:func:`scheduler_option` is used at the flag (``flags.DIRECTIVE``), the request (``JobRequest``)
and the render (``Scheduler.preamble``), so the three never disagree; :data:`VALUE` is the one rule
for what a directive's value may hold, the tool's own values included.
"""

from __future__ import annotations

import re

#: sbatch's long options, Slurm 22.05.8 as installed here (Debian slurm-client 22.05.8-4): every
#: option ``man sbatch`` documents, plus the four its ``getopt_long`` table holds undocumented
#: (``cluster``, ``context``, ``ntasks-per-tres``, ``tasks-per-node``), which sbatch itself lists
#: when a prefix is ambiguous (``sbatch --t`` prints "option '--t' is ambiguous; possibilities:
#: '--tasks-per-node' '--test-only' ..."; run for every letter a-z).
SBATCH_LONG = tuple("""
account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters comment
constraint container context contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu
cpus-per-task deadline delay-boot dependency distribution error exclude exclusive export
export-file extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
gpus-per-task gres gres-flags help hint hold ignore-pbs input job-name kill-on-invalid-dep licenses
mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nice no-kill
no-requeue nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node
ntasks-per-socket ntasks-per-tres open-mode output overcommit oversubscribe parsable partition
power prefer priority profile propagate qos quiet reboot requeue reservation signal
sockets-per-node spread-job switches tasks-per-node test-only thread-spec threads-per-core time
time-min tmp uid usage use-min-nodes verbose version wait wait-all-nodes wckey wrap
""".split())
#: sbatch's short options and the long option each is (``man sbatch``, Slurm 22.05).
SBATCH_SHORT = dict(zip("ABCDFGHJLMNOQSVWabcdehikmnopqstvwx", """
account extra-node-info constraint chdir nodefile gpus hold job-name licenses clusters nodes
overcommit quiet core-spec version wait array begin cpus-per-task dependency error help input
no-kill distribution ntasks output partition qos oversubscribe time verbose nodelist exclude
""".split()))
#: qsub's options as PBS Pro's qsub(1B) names them
#: (https://github.com/openpbs/openpbs/blob/master/doc/man1/qsub.1B): the attribute each sets.
QSUB_SHORT = {"a": "execution time", "A": "account", "c": "checkpoint", "C": "directive prefix",
              "e": "error path", "f": "foreground", "G": "GUI session", "h": "hold",
              "I": "interactive", "j": "join", "J": "array range", "k": "keep", "l": "resources",
              "m": "mail events", "M": "mail users", "N": "job name", "o": "output path",
              "p": "priority", "P": "project", "q": "queue", "r": "rerunnable", "R": "remove",
              "S": "shell", "u": "user list", "v": "variable list", "V": "whole environment",
              "W": "additional attributes", "X": "X11", "z": "quiet"}

#: What the tool sets itself, by sbatch long option, qsub attribute or PBS ``-l`` resource, with
#: the tool's flag that sets it ("" where only the tool sets it). A directive repeating one would
#: override the checked value while the script's header described the original job.
_OWN = {name: flag for flag, names in {
    "--time": ("time", "time-min", "walltime"),
    "--partition": ("partition", "queue"), "--account": ("account",),
    "--nodes": ("nodes", "select"),
    "--gpus-per-node": ("gpus", "gpus-per-node", "gpus-per-task", "gres", "ntasks",
                        "ntasks-per-node", "tasks-per-node", "ntasks-per-gpu", "ntasks-per-tres",
                        "cpus-per-task", "mem-per-gpu", "ngpus", "ncpus", "mpiprocs"),
    "--qos": ("qos",), "--reservation": ("reservation",),
    "": ("job-name", "job name", "output", "output path", "error", "error path", "join",
         "remove", "chdir", "exclusive", "parsable", "test-only", "help", "usage", "version",
         "quiet", "directive prefix"),
}.items() for name in names}
#: What would change who the job runs as, what it runs or what reaches its processes.
_DANGEROUS = {"uid", "gid", "wrap", "export", "export-file", "get-user-env", "input", "container",
              "open-mode", "propagate", "bb", "bbf", "user list", "shell", "variable list",
              "whole environment", "additional attributes", "keep", "interactive", "GUI session",
              "X11"}

#: What a directive's value may hold: schedulers read directives with their own parsers, which
#: do not all understand shell quoting, so other characters are refused rather than quoted.
VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
_WORD = r"[A-Za-z0-9_@%+=:,./][A-Za-z0-9_@%+=:,./-]*"  # a VALUE that does not start like -x
_OPTION = re.compile(rf"(?:--(?P<long>[a-z][a-z-]*)(?:=(?P<lvalue>{_WORD}))?"
                     rf"|-(?P<short>[A-Za-z])(?: (?P<svalue>{_WORD}))?)\Z")


def sbatch_long(prefix: str) -> str:
    """The sbatch long option ``--prefix`` is, as ``getopt_long`` resolves it: itself when whole,
    else the one option it begins; ValueError when it begins none or several (sbatch refuses
    those too)."""
    if prefix in SBATCH_LONG:
        return prefix
    matches = [name for name in SBATCH_LONG if name.startswith(prefix)]
    if not matches:
        raise ValueError(f"names --{prefix}, which is not an sbatch option (Slurm 22.05)")
    if len(matches) > 1:
        raise ValueError(f"names --{prefix}, which sbatch reads as any of --"
                         + ", --".join(matches[:6]) + (", ..." if len(matches) > 6 else "")
                         + ": write the option whole")
    return matches[0]


def _meanings(match: re.Match[str]) -> list[tuple[str, str]]:
    """What the option means to the schedulers that read it, as (what it is, name to check)."""
    if match["long"]:
        name = sbatch_long(match["long"])
        return [(f"--{name}" if name == match["long"] else f"--{match['long']} (sbatch reads "
                 f"--{name})", name)]
    letter = match["short"]
    if letter == "l":  # PBS resources: -l name=value[,name=value ...], names whole
        return [(f"-l {name}", name.lower()) for name in
                (pair.partition("=")[0] for pair in (match["svalue"] or "").split(","))]
    meanings = [(f"-{letter} (sbatch --{long})", long) for long in [SBATCH_SHORT.get(letter)]
                if long]
    return meanings + [(f"-{letter} (qsub: {what})", what) for what in [QSUB_SHORT.get(letter)]
                       if what]


def scheduler_option(value: object) -> str:
    """``value`` as one extra scheduler option for a job's preamble, or ValueError saying why
    not: not one option with a safe value, an option neither scheduler has, an ambiguous
    prefix, or an option the tool sets itself or that changes who or what the job runs."""
    text = str(value)
    match = _OPTION.match(text)
    if not match:
        raise ValueError("takes one scheduler option such as --constraint=hbm or -l "
                         "place=scatter, on one line (letters, digits and _ @ % + = : , . / - "
                         "in its value, which does not start with -)")
    if match["short"] == "l" and not match["svalue"]:
        raise ValueError("takes -l with its resources (-l place=scatter)")
    meanings = _meanings(match)
    if not meanings:
        raise ValueError(f"names -{match['short']}, which is neither an sbatch nor a qsub option")
    reasons = [reason for reason in map(_refusal, meanings) if reason]
    if reasons:
        raise ValueError("; ".join(dict.fromkeys(reasons)))
    return text


def _refusal(meaning: tuple[str, str]) -> str:
    """Why the tool does not let a directive have this meaning ("" where it may)."""
    shown, name = meaning
    if name in _DANGEROUS:
        return (f"refuses {shown}: it would change who the job runs as, what it runs or what "
                "reaches its processes")
    if name not in _OWN:
        return ""
    own = _OWN[name]
    return f"names {shown}, which the tool sets" + (
        f": use {own}" if own else " itself (the script, its output, its name and what sbatch "
        "or qsub prints are the tool's)")
