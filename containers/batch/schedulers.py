"""Batch schedulers (Slurm, PBS Pro): each owns its preamble, output path, submit command, job
id and state queries, and names its rendezvous (:mod:`containers.run.rendezvous`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from containers.batch.script import word
from containers.errors import CommandFailed, ConfigError, UsageError
from containers.inputs.directives import VALUE
from containers.inputs.flags import JOB_ID
from containers.inputs.flags import directive as directive_flag
from containers.inputs.sites import Site
from containers.run.rendezvous import RENDEZVOUS, SchedulerRendezvous

#: Runs one state query's argv: its output, None when it failed.
Ask = Callable[[list[str]], "str | None"]


@dataclass(frozen=True)
class Resources:
    """What a job asks for: each scheduler renders its preamble from this alone."""

    name: str
    time: str
    partition: str | None
    account: str | None
    output: str
    #: The size: one task on one node unless the job says more.
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int | None = None
    gpus_per_node: int = 0
    exclusive: bool = False
    mem_per_gpu_gb: int = 0
    #: GB per node, asked where the partition's nodes are shared (wins over ``mem_per_gpu_gb``).
    mem_per_node_gb: int = 0
    #: Slurm: ``gpus-per-node`` (``--gpus-per-node=N``) or ``gres`` (``--gres=gpu:TYPE:N``).
    gpu_request: str = "gpus-per-node"
    gres_type: str | None = None
    #: ``--qos``, ``--reservation`` (Slurm) and the extra lines: the profile's ``job.directives``
    #: (and ``gpu_directives`` on a job with GPUs), then ``--directive``.
    qos: str | None = None
    reservation: str | None = None
    directives: tuple[str, ...] = ()


def directive(value: object, what: str) -> str:
    """``value`` as a directive word; refused when a scheduler's parser could misread it."""
    text = str(value)
    if not VALUE.match(text):
        raise ConfigError(f"{what} '{text}' has characters a batch directive cannot carry "
                          "(letters, digits and _ @ % + = : , . / - only)")
    return word(text)  # shlex.quote, which leaves such a value as it is


class Scheduler:
    name = ""
    submit_command = ""
    submit_options: tuple[str, ...] = ()
    #: The longest job name the scheduler takes (None: no limit).
    name_length: int | None = None
    #: The output file in the job's output folder, or "" where the scheduler names it itself.
    output_file = ""
    #: The variables its submit command reads an account from, where no flag or setting names one.
    account_vars: tuple[str, ...] = ()
    #: The commands (the job id follows) that tell a job's state, tried in order until one answers.
    state_commands: tuple[tuple[str, ...], ...] = ()
    #: Where an answer of :attr:`state_commands` says when the scheduler accepted the job.
    submit_time: re.Pattern[str]
    #: What its tools say when its server cannot be reached: no answer, as a timeout is.
    unreachable: re.Pattern[str]

    @property
    def rendezvous(self) -> SchedulerRendezvous:
        return RENDEZVOUS[self.name]

    def preamble(self, res: Resources) -> list[str]:
        raise NotImplementedError

    def extra(self, text: str) -> str:
        """A ``--directive`` or profile ``job.directives`` line, by this scheduler's grammar."""
        return directive_flag(self.name)("--directive", text)

    def job_name(self, name: str, short_names: Mapping[str, str] | None = None) -> str:
        """The name the scheduler is given for ``name``, shortened where it limits length."""
        return short_name(name, self.name_length, short_names or {}) if self.name_length else name

    def output_dir(self, folder: Path, name: str) -> str:
        return f"{folder}/{self.output_file.format(name=name)}"

    def output_folder(self, res: Resources) -> Path:
        """The folder the job's output goes into (Slurm names a file in it, PBS the folder)."""
        return Path(res.output.rpartition("/")[0])

    def output_of(self, res: Resources, job_id: str) -> str:
        raise NotImplementedError

    def submit_argv(self, script: Path) -> list[str]:
        return [self.submit_command, *self.submit_options, str(script)]

    def parse_job_id(self, stdout: str) -> str:
        """The id in the submit command's last line, checked: it becomes an argv word."""
        text = stdout.strip().splitlines()[-1].strip() if stdout.strip() else ""
        if not text:
            raise CommandFailed(f"{self.submit_command} printed no job id", output=[stdout])
        try:
            return JOB_ID.parse(self.id_part(text))
        except ValueError:
            raise CommandFailed(f"{self.submit_command} printed {text[:80]!r}, which is not a "
                                "job id", output=[stdout]) from None

    def id_part(self, line: str) -> str:
        return line

    def parse_state(self, text: str) -> str | None:  # from a state command's output
        raise NotImplementedError

    def parse_submitted(self, text: str) -> str | None:
        found = self.submit_time.search(text)
        return next((group for group in found.groups() if group), None) if found else None

    def job_state(self, job_id: str, ask: Ask, *, submitted: str | None = None) -> str | None:
        """The job's state, or None (one of its id submitted at another time is another)."""
        for words in self.state_commands:
            text = ask([*words, job_id])
            state = self.parse_state(text) if text else None
            if state:
                said = self.parse_submitted(text or "")
                return None if submitted and said and said != submitted else state
        return None

    def submitted_at(self, job_id: str, ask: Ask) -> str | None:
        """The submit time of a job just submitted, for the jobs index (see :meth:`job_state`)."""
        text = ask([*self.state_commands[0], job_id])
        return self.parse_submitted(text) if text else None


class Slurm(Scheduler):
    name = "slurm"
    submit_command = "sbatch"
    submit_options = ("--parsable",)
    output_file = "{name}-%j.out"
    #: sbatch reads SBATCH_ACCOUNT itself; SLURM_ACCOUNT is the current allocation's.
    account_vars = ("SBATCH_ACCOUNT", "SLURM_ACCOUNT")
    #: ``scontrol``, then ``sacct`` once the controller has forgotten the job.
    state_commands = (("scontrol", "show", "job", "-o"),
                      ("sacct", "-n", "-X", "-P", "-o", "State,Submit", "-j"))
    submit_time = re.compile(r"\bSubmitTime=(\S+)|^[^|\n]*\|(\S+)\s*$", re.M)
    unreachable = re.compile("Unable to contact slurm controller", re.I)

    def preamble(self, res: Resources) -> list[str]:
        gres = res.gpu_request == "gres" and res.gpus_per_node
        options = [("job-name", res.name), ("nodes", res.nodes),
                   ("ntasks-per-node", res.tasks_per_node), ("cpus-per-task", res.cpus_per_task),
                   ("gpus-per-node", None if gres else res.gpus_per_node or None),
                   ("gres", f"gpu:{res.gres_type}:{res.gpus_per_node}" if gres else None),
                   ("mem", f"{res.mem_per_node_gb}G" if res.mem_per_node_gb else None),
                   ("mem-per-gpu", f"{res.mem_per_gpu_gb}G" if res.mem_per_gpu_gb
                    and res.gpus_per_node and not res.mem_per_node_gb else None),
                   ("time", res.time),
                   ("partition", res.partition), ("account", res.account),
                   ("qos", res.qos), ("reservation", res.reservation),
                   ("output", res.output)]
        lines = [f"#SBATCH --{key}={directive(value, '--' + key)}" for key, value in options
                 if value is not None]
        if res.exclusive:
            lines.append("#SBATCH --exclusive")
        return lines + [f"#SBATCH {self.extra(text)}" for text in res.directives]

    def output_of(self, res: Resources, job_id: str) -> str:
        return res.output.replace("%j", job_id)

    def id_part(self, line: str) -> str:
        """``--parsable`` prints ``ID[;CLUSTER]``: a cluster that is not a name spoils the id."""
        job_id, _, cluster = line.partition(";")
        return job_id if re.fullmatch(r"[A-Za-z0-9_-]*", cluster) else line

    def parse_state(self, text: str) -> str | None:
        found = re.search(r"\bJobState=(\w+)", text)
        if found:
            return found.group(1)
        words = text.split("|")[0].split()
        return words[0].upper() if words else None  # sacct: "CANCELLED by 0|…" -> CANCELLED


class Pbs(Scheduler):
    """PBS Pro (Derecho): ``select`` chunks, one per node; output into a folder (PBS names the
    file ``<job name>.o<job number>``); PBS starts jobs in the home folder, hence the ``cd``."""

    name = "pbs"
    submit_command = "qsub"
    #: PBS_MAXJOBNAME (src/include/pbs_ifl.h): 236 in PBS Pro 18 (PBSPro/pbspro, 2018), 230 in
    #: OpenPBS since its job sequence numbers grew (openpbs/openpbs): the smaller. (Old servers'
    #: 15 characters are PBS_MAXQUEUENAME, a queue's name.)
    name_length = 230
    state_commands = (("qstat", "-x", "-f"),)
    submit_time = re.compile(r"^\s*ctime\s*=\s*(.+?)\s*$", re.M)
    unreachable = re.compile("cannot connect to server", re.I)
    #: qstat's one-letter job states, in words.
    STATES = {"Q": "PENDING", "H": "HELD", "W": "WAITING", "R": "RUNNING", "E": "EXITING",
              "B": "RUNNING", "F": "FINISHED", "X": "FINISHED", "M": "MOVED", "S": "SUSPENDED"}

    def preamble(self, res: Resources) -> list[str]:
        chunk = f"select={res.nodes}"
        if res.cpus_per_task:
            chunk += f":ncpus={res.tasks_per_node * res.cpus_per_task}"
        if res.gpus_per_node:
            chunk += f":ngpus={res.gpus_per_node}"
        memory = res.mem_per_node_gb or res.mem_per_gpu_gb * res.gpus_per_node
        if memory:
            chunk += f":mem={memory}GB"
        for flag, value in (("--qos", res.qos), ("--reservation", res.reservation)):
            if value is not None:
                raise UsageError(f"PBS has no {flag[2:]} directive (a reservation is a queue: "
                                 "--partition RESV); leave it out", flag=flag)
        options = [("-N ", self.job_name(res.name), "job name"), ("-A ", res.account, "--account"),
                   ("-q ", res.partition, "--partition"), ("-l ", chunk, "select"),
                   ("-l walltime=", res.time, "--time")]
        return [*(f"#PBS {key}{directive(value, what)}" for key, value, what in options
                  if value is not None),
                "#PBS -j oe", f"#PBS -o {directive(res.output, 'output folder')}",
                *(f"#PBS {self.extra(text)}" for text in res.directives)]

    def output_of(self, res: Resources, job_id: str) -> str:
        return f"{res.output}{self.job_name(res.name)}.o{job_id.split('.')[0]}"

    def parse_state(self, text: str) -> str | None:
        found = re.search(r"^\s*job_state\s*=\s*(\w)", text, flags=re.M)
        return self.STATES.get(found.group(1), found.group(1)) if found else None


def short_name(name: str, length: int, short_names: Mapping[str, str]) -> str:
    """``name`` within ``length`` characters, every word still recognisable."""
    if len(name) <= length:
        return name
    words = [short_names.get(w, w) for w in name.split("-")]
    while len("-".join(words)) > length:
        longest = max(range(len(words)), key=lambda i: len(words[i]))
        if len(words[longest]) <= 3:
            break
        words[longest] = words[longest][:-1]
    short = "-".join(words)
    if len(short) > length:  # too many words: keep the first ones whole
        short = "-".join(w for i, w in enumerate(words)
                         if len("-".join(words[:i + 1])) <= length)
    return short


SCHEDULERS: dict[str, Scheduler] = {"slurm": Slurm(), "pbs": Pbs()}


def scheduler_of(site: Site, hint: str = "") -> Scheduler:
    """The site's scheduler; ``scheduler: none`` is refused in one line (``hint``)."""
    if site.scheduler not in SCHEDULERS:
        raise ConfigError(f"site {site.name} has no batch scheduler (scheduler: "
                          f"{site.scheduler}){hint}", path=site.path,
                          line=site.lines.get("scheduler"), key="scheduler")
    return SCHEDULERS[site.scheduler]
