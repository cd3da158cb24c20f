"""Site profiles: ``sites/<site>.yaml``, every fact about WHERE images run. Nested as ReFrame
nests a system; each key one typed field, from which checks and the JSON Schema follow."""
from __future__ import annotations

import fnmatch
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Callable, Collection, Iterable, Literal, Mapping

from pydantic import (BeforeValidator, ConfigDict, Field, PrivateAttr, Strict, ValidationInfo,
                      WithJsonSchema, field_validator, model_validator)
from pydantic.json_schema import SkipJsonSchema

from containers import walltime
from containers.errors import ConfigError
from containers.inputs import references as refs
from containers.inputs.directives import scheduler_option
from containers.inputs.names import Gpu
from containers.inputs.references import Reference, parse_reference, select
from containers.inputs.schema import (Bool, GpuKind, Part, Str, input_files, is_env_name, pick,
                                      problem_at, refuse, suggest, validate_model)
from containers.inputs.yamlsource import load_yaml_file

GpuRequest = Literal["gpus-per-node", "gres"]
#: A host variable in a site value (``$VAR``, ``${VAR}``), or ``$$``: a ``$`` for the container.
HOST_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\$))")


# ------------------------------------------------------------------------- value types
def _time(value: object) -> int:
    """A Slurm time limit in seconds; YAML reads an unquoted 12:00:00 as base-60 seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError('write the time in quotes (max_time: "12:00:00"): YAML reads an '
                         "unquoted 12:00:00 as a number")
    if not isinstance(value, str):
        raise ValueError(f"must be a time in quotes, got {type(value).__name__}")
    return walltime.parse(value)


def _env_value(value: object) -> str:
    if not isinstance(value, (str, int, float, bool)):
        raise ValueError("must be a scalar value (a string or a number)")
    problem = code_in_value(str(value))
    if problem:
        raise ValueError(problem)
    return str(value)


def _pattern(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"is not a valid regular expression: {exc}"
    return None


Count = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
Names = tuple[Str, ...]
Time = Annotated[int, BeforeValidator(_time), WithJsonSchema(
    {"type": "string", "description": "HH:MM:SS, D-HH:MM:SS or MM:SS, in quotes"})]
Bind = Annotated[str, Strict(), refuse(lambda bind: bind_problem(bind))]
EnvName = Annotated[str, refuse(lambda name: None if is_env_name(name) else (
    f"'{name}' is not an environment variable name (letters, digits and _, not starting with "
    "a digit)"))]
EnvValue = Annotated[str, BeforeValidator(_env_value), WithJsonSchema(
    {"type": ["string", "number", "boolean"]})]
Env = dict[EnvName, EnvValue]
Version = Annotated[str, Strict(), refuse(lambda value: None if re.match(
    r"\s*\d+(?:\.\d+)*", value) else f"'{value}' is not a version (digits and dots)")]
Mask = Annotated[str, Strict(), refuse(lambda value: None if re.fullmatch(
    r"0x[0-9a-fA-F]+", value) else f"'{value}' is not a hexadecimal CPU mask (0x…)")]
Doc = Field


def after(field: str, problem: Callable[[Any, dict[str, Any]], str | None]) -> Any:
    """Check ``field`` by ``problem(value, data)`` against the fields declared before it."""
    def check(cls: type, value: Any, info: ValidationInfo) -> Any:
        reason = problem(value, info.data)
        if reason:
            raise ValueError(reason)
        return value
    return field_validator(field)(check)


def _arch_problem(arch: str | None, data: dict[str, Any]) -> str | None:
    kind = data.get("kind", Gpu.NONE)
    if arch is not None and (kind.arch is None or not kind.arch.match(arch)):
        return f"'{arch}' is not a {kind} GPU architecture (sm_NN for cuda, gfxNNN for rocm)"
    if arch is not None and "arch_source" in data and not data["arch_source"]:
        return "a GPU architecture needs arch_source: the page that states it"
    return None


# ------------------------------------------------------------------------------- the parts
class Gpus(Part):
    """The GPUs of a node: kind, model, count, architecture, and how jobs ask for them."""

    kind: GpuKind = Doc(Gpu.NONE, description="GPU vendor stack: cuda (--nv), rocm (--rocm) or "
                        "none (CPU ranks)")
    model: Str | None = Doc(None, description="GPU model (a reference may name it)")
    per_node: Count = Doc(0, validate_default=True, description="GPUs (ROCm: GCDs) per node")
    max_per_job: Count = Doc(0, description="GPUs one job may hold (0: no site-wide limit)")
    arch_source: Str | None = Doc(None, description="where the architecture is documented")
    arch: Str | None = Doc(None, description="CUDA compute capability (sm_80) or gfx target "
                                             "(gfx90a) the image's kernels must cover")
    gres_type: Str | None = Doc(None, description="the GPU type in --gres=gpu:<type>:N")
    request: GpuRequest = Doc("gpus-per-node", description="how Slurm jobs ask for GPUs: "
                              "--gpus-per-node=N or --gres=gpu:<gres_type>:N")

    _some_gpus = after("per_node", lambda count, data: "a GPU site needs gpus.per_node > 0"
                       if data.get("kind", Gpu.NONE) != Gpu.NONE and count <= 0 else None)
    _arch_known = after("arch", _arch_problem)
    _gres_needs_type = after("request", lambda request, data: (
        "request gres needs gres_type (the GPU type in --gres=gpu:<type>:N, e.g. v100)"
        if request == "gres" and not data.get("gres_type") else None))


class Limits(Part):
    """What one job may ask for, as documented (None: not documented, not checked)."""

    max_time: Time | None = Doc(None, description="longest wall time")
    max_nodes: Positive | None = Doc(None, description="most nodes per job")
    max_gpus: Positive | None = Doc(None, description="most GPUs per job (all its nodes)")
    _name: str = PrivateAttr("")

    @property
    def name(self) -> str:
        return self._name


class Partition(Limits):
    """One partition (queue) of a site and its documented limits."""

    default_time: Time | None = Doc(None, validate_default=False,
                                    description="wall time of a job that names none")
    gpus_per_node: Count | None = Doc(None, description="this partition's nodes' GPUs, where "
                                      "they differ from the site's (0: CPU nodes)")
    cores_per_node: Positive | None = Doc(None, description="this partition's nodes' cores")
    whole_nodes: Bool = Doc(False, description="jobs get (and are billed for) whole nodes")
    gpu_request: GpuRequest | None = Doc(None, description="gpus.request for this partition")
    gres_type: Str | None = Doc(None, description="gpus.gres_type for this partition")
    allocatable_gb: Positive | None = Doc(None, description="memory a job can be given on "
                                          "one node, in GB as Slurm's G and PBS's GB count "
                                          "(1024^3 bytes): less than the node has")
    allocatable_source: Str | None = Doc(None, validate_default=True, description="the page "
                                         "that states allocatable_gb (or that none is "
                                         "published, and why the figure is safe)")
    shared_nodes: Bool = Doc(False, description="jobs share nodes and get only the memory they "
                             "ask for (PBS: mem= in select): a job asks allocatable_gb with all "
                             "of a node's GPUs, else their share")

    _within_max = after("default_time", lambda time, data: "is longer than max_time" if (
        time is not None and data.get("max_time") is not None and time > data["max_time"])
        else None)
    _allocatable_cited = after("allocatable_source", lambda source, data: (
        "allocatable_gb needs allocatable_source (the page that states it)"
        if data.get("allocatable_gb") and not source else None))
    _shared_asks = after("shared_nodes", lambda shared, data: (
        "a partition of shared nodes needs allocatable_gb: its jobs ask for their memory"
        if shared and not data.get("allocatable_gb") else
        "a partition cannot have both whole_nodes and shared_nodes"
        if shared and data.get("whole_nodes") else None))

    def gpu_share(self, gpus_per_node: int) -> int | None:
        """GB per GPU that keeps a job on a whole node within what a node allocates."""
        if self.allocatable_gb is None or gpus_per_node <= 0:
            return None
        return self.allocatable_gb // gpus_per_node


class Qos(Limits):
    """A quality of service (Slurm ``--qos``) and its limits; a job over one is refused."""

    max_jobs: Positive | None = Doc(None, description="running jobs per user (shown, not "
                                                      "checked: the scheduler counts them)")
    source: Str = Doc(description="the page that documents these limits")


class Memory(Part):
    """The memory batch jobs ask for, where the site wants it asked for."""

    per_gpu_gb: Count = Doc(0, description="GB per GPU a job requests (0: the scheduler's "
                                           "default); where a site bills requested memory, "
                                           "the share of a node its GPUs are")
    default: Str | None = Doc(None, description="what a job gets when it asks for none, as "
                                                "documented (shown)")
    source: Str | None = Doc(None, validate_default=True,
                             description="the page these figures come from")

    _needs_source = after("source", lambda source, data: (
        "memory figures need their source (the page that states them)"
        if not source and (data.get("per_gpu_gb") or data.get("default")) else None))


class Transport(Part):
    """The network a run across nodes must use, its proof, and what it needs."""

    name: Str | None = Doc(None, description="the transport's name in verdicts")
    expect: Annotated[str, Strict(), refuse(_pattern)] | None = Doc(
        None, description="regular expression a run's NCCL/RCCL log must match (the proof)")
    net: Annotated[str, Strict(), refuse(lambda net: None if net.strip() == net != "" else (
        "must name the network (NCCL_NET compares it exactly: no empty value, no spaces at its "
        "ends)"))] | None = Doc(
        None, description="NCCL_NET for every run it applies to: fail instead of TCP sockets")
    from_nodes: Positive = Doc(1, description="it applies to runs of at least this many nodes")
    modules: Names = Doc((), description="host modules a multi-node job loads first")
    binds: tuple[Bind, ...] = Doc((), description="binds of a multi-node run (SRC[:DST[:OPTS]])")
    env: Env = Doc({}, description="variables of a multi-node run, and of any run it applies to "
                   "(the network's own: a --transport socket job sends none; $$: a $ for the "
                   "container)")
    host_stack: Bool = Doc(False, description="the network plugin and libfabric come from the "
                           "host: a run it applies to needs binds that bring them in (a job "
                           "without them is refused, never written)")
    unavailable: Str | None = Doc(None, description="why a container cannot use this transport "
                                  "here (no network plugin published for containers), with "
                                  "its source: a job it applies to is refused, naming this, "
                                  "unless it opts into TCP sockets (invoke job --transport "
                                  "socket)")
    _degraded: str | None = PrivateAttr(None)  # set by --transport socket, never by a profile

    _named = after("expect", lambda expect, data: "a transport needs both name and expect "
                   "(its proof)" if bool(expect) != bool(data.get("name")) else None)

    def applies(self, nodes: int) -> bool:
        """Whether a run on ``nodes`` nodes must use (and prove) this transport."""
        return bool(self.expect) and nodes >= self.from_nodes

    @property
    def degraded(self) -> str | None:
        """What a transport chosen instead of the site's lacks (verdicts name it)."""
        return self._degraded


Word = Annotated[str, Strict(), refuse(lambda value: None if re.fullmatch(
    r"[A-Za-z0-9_]+", value) else f"'{value}' is not a word (letters, digits, _): a job name "
    "is a directive value")]


class Job(Part):
    """The site's own words in its batch jobs, each with its source in the profile."""

    step_options: Names = Doc((), description="options the site's launcher adds to every job "
                                              "step (Cray PALS: --cpu-bind none)")
    short_names: dict[Word, Word] = Doc({}, description="shorter words for job names a "
                                                        "scheduler limits in length")
    build_unset: tuple[EnvName, ...] = Doc((), description="variables a build job unsets (a "
                                           "site module's binds the new image lacks)")
    directives: Names = Doc((), description="scheduler options every job carries, as the "
                            "site's documentation writes them (-C gpu, --constraint=gpu&hbm80g)")
    gpu_directives: Names = Doc((), description="scheduler options every job that asks for "
                                "GPUs carries (after directives)")


class Detect(Part):
    """How ``invoke smoke`` recognises the site it runs on."""

    env: Names = Doc((), description="NAME or NAME=VALUE in the environment")
    hostname: Names = Doc((), description="host-name patterns (fnmatch)")


class Range(Part):
    """A version range a site's nodes support; null bounds are not judged (said so)."""

    min: Version | None = None
    max: Version | None = None
    source: Str = Doc(description="the page that states the range (or says none is published)")


class Driver(Part):
    value: Str | None = None
    source: Str


class Nccl(Range):
    plugin: Str | None = Doc(None, description="the network plugin the site's NCCL/RCCL loads")
    dynamic: Bool = Doc(True, description="the site's NCCL/RCCL must replace the image's, so "
                                          "torch must load it as a shared library")


class Fit(Part):
    """What the site's nodes provide for an image to fit (:mod:`containers.image.sitefit`)."""

    driver: Driver | None = None
    rocm: Range | None = None
    cuda: Range | None = None
    glibc: Range | None = None
    nccl: Nccl | None = None


class Squashfs(Part):
    """The squashfs compressions the site's runtime mounts; publish refuses any other."""

    reads: Annotated[tuple[Literal["gzip", "lzma", "lzo", "xz", "lz4", "zstd"], ...],
                     refuse(lambda reads: None if reads else (
                         "must name at least one compression (a runtime that reads none "
                         "mounts no image; leave squashfs out for gzip)"))] = Doc(
        ("gzip",), description="compressions the site's runtime reads")
    source: Str | None = Doc(None, description="where that is documented or measured")


def _partition_names(value: object) -> object:
    """The older form, a list of names, as a mapping of names to no limits."""
    if not isinstance(value, list):
        return value
    if not all(isinstance(name, str) for name in value):
        raise ValueError("must be a list of partition names or a mapping of names to limits")
    return {name: {} for name in value}


Partitions = Annotated[dict[str, Annotated[Partition, BeforeValidator(  # name: (no limits)
    lambda value: {} if value is None else value)]],
                       BeforeValidator(_partition_names,
                                       json_schema_input_type=dict[str, Partition] | list[str])]
ReferenceItem = Annotated[Reference, WithJsonSchema(refs.Entry.model_json_schema())]


# ---------------------------------------------------------------------------- the profile
class Profile(Part):
    """A site profile as written in ``sites/<site>.yaml``."""

    model_config = ConfigDict(title="hpc-containers site profile (sites/<site>.yaml)")

    description: Str = Doc(description="one line: the cluster, its GPUs and network")
    scheduler: Literal["none", "slurm", "pbs"] = Doc("none", description="batch scheduler")
    runtime: Literal["apptainer", "singularity"] = Doc("apptainer", description="the "
                                                       "container runtime jobs call")
    runtime_module: Str | None = Doc(None, description="the host module that provides the "
                                     "runtime on the nodes: every batch job loads it (after "
                                     "modules)")
    offered_runtimes: Names = Doc((), description="the container runtimes the site's nodes "
                                  "offer, as its documentation names them (podman-hpc, "
                                  "shifter, ...); empty: the runtime above")
    fakeroot: Bool = Doc(True, description="builds with %post or %app* sections can run here "
                                           "(--fakeroot)")
    account_required: Bool = Doc(False, description="the scheduler refuses jobs without one")
    gpus: Gpus = Doc(Gpus(), description="the GPUs of a node")
    cores_per_node: Count = Doc(0, description="usable CPU cores per node (physical cores)")
    threads_per_core: Positive = Doc(1, description="hardware threads per core (SMT): the "
                                     "scheduler counts each as a CPU (--cpus-per-task, PBS "
                                     "ncpus)")
    cpu_bind: tuple[Mask, ...] = Doc(
        (), description="one CPU mask per GPU of a node, in GPU order (srun mask_cpu)")
    memory: Memory = Doc(Memory(), description="memory jobs request")
    partitions: Partitions = Doc({}, description="partitions and their limits (or a list of "
                                                 "names)")
    default_partition: Str | None = Doc(None, description="where jobs go by default")
    build_partition: Str | None = Doc(None, description="where build jobs go (default: "
                                                        "default_partition)")
    qos: dict[str, Qos] = Doc({}, description="qualities of service and their limits")
    default_qos: Str | None = Doc(None, description="the QoS a job gets when it names none "
                                  "(one of qos): every job carries it and is checked against it")
    modules: Names = Doc((), description="host modules every batch job loads")
    job: Job = Doc(Job(), description="the site's own words in its batch jobs")
    launcher: Str = Doc("torchrun", description="one of containers.run.launchers.LAUNCHERS")
    torchrun: Str = Doc("torchrun", description="the torchrun command in the image")
    binds: tuple[Bind, ...] = Doc((), description="binds of every run (SRC[:DST[:OPTS]])")
    env: Env = Doc({}, description="variables of every run ($VAR: expanded on the host)")
    transport: Transport = Doc(Transport(), description="the network across nodes")
    references: tuple[ReferenceItem, ...] = Doc((), description="performance references")
    default_target: Str | None = Doc(None, description="the image this site runs by default")
    detect: Detect = Doc(Detect(), description="how to recognise the site")
    notes: Str | None = None
    fit: Fit = Doc(Fit(), description="what an image must fit here")
    squashfs: Squashfs = Doc(Squashfs(), description="the image compressions its runtime reads")

    @field_validator("partitions", "qos")
    @classmethod
    def _named(cls, value: dict[str, Limits], info: ValidationInfo) -> dict[str, Limits]:
        """Each its name; a partition asking gres names its type (or the site does)."""
        site_type = getattr(info.data.get("gpus"), "gres_type", None)
        for name, part in value.items():
            part._name = name
            if isinstance(part, Partition) and part.gpu_request == "gres" \
                    and not (part.gres_type or site_type):
                raise problem_at("gpu_request gres needs gres_type (the GPU type in "
                                 "--gres=gpu:<type>:N, e.g. v100)", name, "gpu_request")
        return value

    _one_mask_per_gpu = after("cpu_bind", lambda masks, data: (
        f"one CPU mask per GPU: {len(masks)} masks for {data['gpus'].per_node} GPUs"
        if masks and data.get("gpus") is not None and data["gpus"].kind != Gpu.NONE
        and len(masks) != data["gpus"].per_node else None))

    _runtime_offered = after("offered_runtimes", lambda offered, data: (
        f"the site offers {', '.join(offered)}, not {data.get('runtime', 'apptainer')}, which "
        "the tool's jobs run: name the module that provides it (runtime_module)"
        if offered and data.get("runtime", "apptainer") not in offered
        and not data.get("runtime_module") else None))

    @field_validator("job")
    @classmethod
    def _directives_read(cls, job: Job, info: ValidationInfo) -> Job:
        """Every line the profile requires is one the scheduler reads and the tool allows."""
        for key in ("directives", "gpu_directives"):
            for index, text in enumerate(getattr(job, key)):
                try:
                    scheduler_option(text, info.data.get("scheduler", "none"))
                except ValueError as exc:
                    raise problem_at(f"'{text}' {exc}", key, index) from None
        return job

    @field_validator("default_qos")
    @classmethod
    def _a_qos(cls, value: str | None, info: ValidationInfo) -> str | None:
        names = list(info.data.get("qos") or {})
        if value is not None and info.data.get("scheduler") != "slurm":
            raise ValueError("only Slurm sites have a QoS (PBS: a queue is a partition)")
        if value is not None and value not in names:
            raise ValueError(f"'{value}' is not one of qos{suggest(value, names)}")
        return value

    @field_validator("default_partition", "build_partition")
    @classmethod
    def _a_partition(cls, value: str | None, info: ValidationInfo) -> str | None:
        names = _raw_names(info)
        if value is not None and value not in names:
            raise ValueError(f"'{value}' is not one of the partitions{suggest(value, names)}")
        return value

    @model_validator(mode="after")
    def _memory_fits(self) -> Profile:
        """``per_gpu_gb`` x a node's GPUs must fit each partition's nodes (else held or refused)."""
        per_gpu = self.memory.per_gpu_gb
        if not per_gpu or self.gpus.kind == Gpu.NONE:
            return self
        for name, part in self.partitions.items():
            gpus = self.gpus_in(part)
            share = part.gpu_share(gpus)
            if gpus and share is None:
                raise problem_at(f"partition {name} has GPUs but no allocatable_gb, so "
                                 f"memory.per_gpu_gb ({per_gpu}) cannot be checked against "
                                 "what its nodes allocate: add the figure and its "
                                 "allocatable_source", "partitions", name)
            if share is not None and per_gpu > share:
                raise problem_at(f"{per_gpu} GB per GPU x {gpus} GPUs = {per_gpu * gpus} GB is "
                                 f"more than a node of partition {name} allocates "
                                 f"({part.allocatable_gb} GB: {part.allocatable_source}); at "
                                 f"most {share} per GPU", "memory", "per_gpu_gb")
        return self

    def gpus_in(self, partition: Partition) -> int:
        if self.gpus.kind == Gpu.NONE:
            return 0
        return self.gpus.per_node if partition.gpus_per_node is None else partition.gpus_per_node

    @field_validator("references", mode="before")
    @classmethod
    def _parse_references(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, list):
            raise ValueError("must be a list of references")
        parsed = []
        for index, item in enumerate(value):
            try:
                parsed.append(parse_reference(item, path=None, index=index))
            except ConfigError as exc:
                raise problem_at(exc.detail, index,
                                 *(exc.key or "").split("].", 1)[-1:]) from exc
        return tuple(parsed)

    @field_validator("references")
    @classmethod
    def _references_apply(cls, value: tuple[Reference, ...], info: ValidationInfo
                          ) -> tuple[Reference, ...]:
        """A reference that can never apply would silently turn the performance gate off."""
        names, gpus = _raw_names(info), info.data.get("gpus")
        for index, ref in enumerate(value):
            if ref.partition != "*" and ref.partition not in names:
                raise problem_at(f"partition '{ref.partition}' is not one of the site's "
                                 f"partitions{suggest(ref.partition, names)} (or * for any), "
                                 "so this reference would never apply", index, "partition")
            if gpus is not None and gpus.kind != Gpu.NONE and 0 < gpus.per_node \
                    < ref.ranks_per_node:
                raise problem_at(f"ranks_per_node {ref.ranks_per_node} is more than the site's "
                                 f"{gpus.per_node} GPUs per node (one rank per GPU), so this "
                                 "reference would never apply", index, "ranks_per_node")
        return value


def _raw_names(info: ValidationInfo) -> list[str]:
    """The partition names the profile gives, even where a partition's limits are wrong."""
    raw = (info.context or {}).get("raw")
    value = raw.get("partitions") if isinstance(raw, dict) else None
    if isinstance(value, dict):
        return [str(name) for name in value]
    return [name for name in value if isinstance(name, str)] if isinstance(value, list) else []


class Site(Profile):
    """A profile as loaded: its parts, name (the file's stem), path and key lines."""

    name: SkipJsonSchema[str] = ""
    path: SkipJsonSchema[Path] = Path()
    lines: SkipJsonSchema[dict[str, int]] = Field(default_factory=dict, repr=False)

    def partition(self, name: str | None) -> Partition:
        """``name``'s limits; a partition the profile does not describe has none."""
        if (name or "") in self.partitions:
            return self.partitions[name or ""]
        unknown = Partition()
        unknown._name = name or ""
        return unknown

    def job_variables(self, *, multinode: bool) -> dict[str, list[str]]:
        """Host variables a job checks after its modules load, each with the keys naming it."""
        scopes = [("binds", self.binds), ("env", self.env.values())]
        if multinode:
            scopes += [("transport.binds", self.transport.binds),
                       ("transport.env", self.transport.env.values())]
        found: dict[str, list[str]] = {}
        for key, texts in scopes:  # each scope once, each name once per scope
            for name in host_variables(texts):
                found.setdefault(name, []).append(key)
        return found

    def mem_per_gpu_gb(self, partition: Partition) -> int:
        """The memory a job on ``partition`` asks per GPU, capped by what its nodes allocate."""
        share = partition.gpu_share(self.gpus_in(partition))
        per_gpu = self.memory.per_gpu_gb
        return min(per_gpu, share) if per_gpu and share is not None else per_gpu

    @property
    def cpus_per_node(self) -> int:
        """Each hardware thread of each core, as the scheduler counts CPUs."""
        return self.cores_per_node * self.threads_per_core

    @property
    def job_modules(self) -> tuple[str, ...]:
        """The host modules every batch job loads: the site's, then its runtime's."""
        extra = self.runtime_module
        return (*self.modules, *([extra] if extra and extra not in self.modules else []))

    def matches(self, environ: Mapping[str, str], hostname: str) -> bool:
        """Whether a ``detect`` rule holds; a site with no rules never matches."""
        for rule in self.detect.env:
            name, sep, wanted = rule.partition("=")
            if name in environ and (not sep or environ[name] == wanted):
                return True
        return any(fnmatch.fnmatch(hostname, pattern) for pattern in self.detect.hostname)

    def reference(self, *, partition: str | None, nodes: int, ranks_per_node: int,
                  measured: Collection[int] = (), op: str = "all_reduce") -> Reference | None:
        """The reference of collective ``op`` for a run of this shape."""
        return select(self.references, partition=partition, nodes=nodes,
                      ranks_per_node=ranks_per_node, gpu_model=self.gpus.model,
                      measured=measured, op=op)


def load_site(path: Path) -> Site:
    """The profile at ``path``, read and checked once: every problem at file, line and key."""
    data = load_yaml_file(path)
    profile = validate_model(Profile, data, path=path, what="site profile")
    return Site.model_construct(**dict(profile), name=path.stem, path=path,
                                lines=_key_lines(data))


def _key_lines(data: Any, prefix: str = "") -> dict[str, int]:
    """The line of every key, nested ones as ``gpus.per_node``, for checks after loading."""
    lines: dict[str, int] = {}
    if hasattr(data, "line_of"):
        for key, value in data.items():
            lines[prefix + key] = data.line_of(key)
            if isinstance(value, dict):
                lines.update(_key_lines(value, f"{prefix}{key}."))
    return lines


#: What Apptainer runs as code when it evaluates an environment value (``--env``,
#: ``APPTAINERENV_*``): ``$(``, ``$((`` and backticks; ``$NAME`` only reads a variable.
_CODE = re.compile(r"\$\(|`")


def code_in_value(value: str) -> str | None:
    """Why an environment value cannot reach the container as written, else None."""
    for char, name in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if char in value:
            return f"holds {name}, which would cut the value short: write it on one line"
    if _CODE.search(value.replace("$$", "$")):
        return ("holds command substitution ($(...) or `...`), which Apptainer runs when the "
                "container starts; write the value itself (a $NAME variable is fine)")
    return None


def host_variables(texts: Iterable[str]) -> list[str]:
    """The host variables ``texts`` name (``$$`` is the container's ``$``), each once."""
    names = (match.group(1) or match.group(2) for text in texts
             for match in HOST_VAR.finditer(text))
    return list(dict.fromkeys(name for name in names if name))


def expand(value: str, environ: Mapping[str, str], *, strict: bool) -> str:
    """``$VAR`` from ``environ`` (unset kept unless ``strict``); ``$$``: the container's ``$``."""
    def replace(match: re.Match) -> str:
        if match.group(3):
            return "$"
        name = match.group(1) or match.group(2)
        if name in environ:
            return environ[name]
        if strict:
            raise ConfigError(f"'{value}' needs ${name}, which is not set here (inside a job "
                              f"allocation it is)", key=name)
        return match.group(0)

    expanded = HOST_VAR.sub(replace, value)
    # code from a host variable reaches the container too (NUL: a batch script's job variable)
    problem = code_in_value(expanded.replace("\0", "")) if expanded != value else None
    if problem:
        raise ConfigError(f"'{value}' expands to a value that {problem}")
    return expanded


#: Apptainer's bind options (``SRC:DST:OPTS``).
BIND_OPTIONS = ("ro", "rw")


def bind_problem(bind: str) -> str | None:
    """Why ``bind`` is not one ``SRC[:DST[:OPTS]]`` (a comma makes Apptainer read two)."""
    if "," in bind:
        return f"'{bind}' has a comma: one bind per item (a comma starts another bind)"
    parts = bind.split(":")
    if len(parts) > 3 or not all(parts[:2]):
        return f"'{bind}' is not SRC, SRC:DST or SRC:DST:OPTS"
    if len(parts) == 3 and parts[2] not in BIND_OPTIONS:
        return f"'{bind}': bind options must be {' or '.join(BIND_OPTIONS)} (got '{parts[2]}')"
    return None


def load_sites(root: Path) -> dict[str, Site]:
    """Every site profile, each file's name checked (it becomes part of scripts and paths)."""
    return {p.stem: load_site(p) for p in input_files(root / "sites", kind="site", root=root)}


def get_site(sites: dict[str, Site], name: str) -> Site:
    return pick(sites, name, what="site", flag="--site")


def detect_site(sites: dict[str, Site], environ: Mapping[str, str] | None = None,
                hostname: str | None = None) -> Site | None:
    environ = os.environ if environ is None else environ
    hostname = socket.gethostname() if hostname is None else hostname
    return next((s for s in sites.values() if s.matches(environ, hostname)), None)
