"""``invoke job --workload run -- CMD``: a user's own command as a batch job, launched as the
site's smoke jobs are, with the device gate first and a ``verdict.json`` at the end. The image's
own Python judges (``jobs/runverdict.py``): no venv, pip or package index on nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from containers.batch.script import command, ref, stop_if, word
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.run.command import CommandRun
from containers.records import JobRecord

VERDICT_SCRIPT = "runverdict.py"


def run_lines(planned: CommandRun, *, site: Site, settings: Settings, record: dict,
              nodes: int) -> list[str]:
    """A run job's body after its rendezvous: record, gate, command, verdict."""
    workload = planned.workload
    out_dir = str(workload.out_dir)
    log = word(out_dir + "/run.log")
    workdir = record.get("workdir")
    lines = [*([f"cd {word(workdir)}"] if workdir else []),
             *folder_lines(workload.out_dir), "",
             "# What the verdict reads besides the log: the job and its command",
             f"cat > {word(out_dir + '/job.json')} <<'JOB'", JobRecord.of(record).as_json(),
             "JOB", "",
             "status=0", "gate=none"]
    if planned.gate:
        lines += ["# The device gate: every node's ranks must see a GPU of the site's kind",
                  "gate=pass",
                  command(planned.gate) + f" 2>&1 | tee {log} || gate=fail", ""]
    lines += ['if [[ $gate != fail ]]; then',
              "    " + command(workload.argv) + f" 2>&1 | tee -a {log} || status=$?",
              "fi", ""]
    verdict = [f"{settings.jobs_mount}/{VERDICT_SCRIPT}", "--out", settings.results_mount,
               "--exit-status", ref("status"), "--gate", ref("gate"),
               "--expect-gpu", site.gpus.kind, "--ranks", str(workload.ranks)]
    if site.transport.applies(nodes) and site.transport.expect:
        verdict += ["--transport-name", site.transport.name or "the site's network",
                    "--transport-expect", site.transport.expect,
                    *(["--transport-degraded", site.transport.degraded]
                      if site.transport.degraded else [])]
    binds = (f"{settings.jobs_dir}:{settings.jobs_mount}:ro",
             f"{out_dir}:{settings.results_mount}")
    return [*lines,
            "# The verdict, by the image's own Python (no venv, pip or package index on the "
            "node);",
            "# the job's exit status is the verdict's (0, 2 for the gate, else the command's).",
            "exec " + command(workload.launch.runtime.exec_argv(
                image=workload.image, command=["python3", *verdict], binds=binds))]


def folder_lines(out_dir: Path) -> list[str]:
    """The job's results folder made new, or the job stopped: it is another job's."""
    folder = str(out_dir)
    refusal = (f"job: FAIL: the results folder {folder} exists: it holds another job's "
               "results (job ids repeat after a cluster restart), which this job does not "
               "overwrite; write the script again (invoke job) and submit that")
    return [f"mkdir -p {word(str(out_dir.parent))}", *stop_if(f"! mkdir {word(folder)}",
                                                                word(refusal)),
            f"echo {word('results: ' + folder)}"]


def run_record(record: dict, words: Sequence[str], workdir: str | None = None) -> dict:
    return {**record, "command": list(words), **({"workdir": workdir} if workdir else {})}
