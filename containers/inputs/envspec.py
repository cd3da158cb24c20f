"""Conda environment specs (standard ``environment.yml``) as the image's package list.

The same file serves both builders: cotainr installs it whole with Conda; the Apptainer venv path
installs only its ``pip:`` list on the base image's Python, so Conda packages beyond ``python`` and
``pip`` are refused there with a clear message instead of being dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import Field, check_mapping, line_of
from containers.inputs.yamlsource import load_yaml_text, read_input_text

FIELDS = (
    Field("name"), Field("channels", "str_list", default=[]),
    Field("dependencies", "list", required=True), Field("variables", "str_map", default={}),
    Field("prefix"),
)
#: Conda packages the venv builder gets from the base image itself.
VENV_PROVIDED = frozenset({"python", "pip"})


@dataclass(frozen=True)
class CondaDep:
    spec: str
    line: int | None

    @property
    def name(self) -> str:
        bare = self.spec.split("::")[-1]
        return re.split(r"[=<>!~\s\[]", bare, maxsplit=1)[0].lower()


@dataclass(frozen=True)
class EnvSpec:
    path: Path
    name: str | None
    channels: tuple[str, ...]
    conda: tuple[CondaDep, ...]
    pip: tuple[str, ...]
    text: str

    def requirements_txt(self) -> str:
        """The ``pip:`` list as a requirements file; option lines (``--extra-index-url``) kept."""
        return "".join(line + "\n" for line in self.pip)

    def check_venv_compatible(self) -> None:
        """Refuse Conda-only packages on the venv path, naming the first one and its line."""
        for dep in self.conda:
            if dep.name not in VENV_PROVIDED:
                raise ConfigError(
                    f"'{dep.spec}' is a Conda package; the apptainer (venv) builder installs only "
                    f"the pip: list on the base image's python. Move it under pip:, or build this "
                    f"target with builder: cotainr", path=self.path, line=dep.line,
                    key="dependencies")


def load_env_spec(path: Path) -> EnvSpec:
    """Read once (:func:`read_input_text`: a regular UTF-8 file of bounded size), so the text
    hashed is the text checked; newlines as text mode reads them, as the inputs hash always
    has."""
    text = read_input_text(path).replace("\r\n", "\n").replace("\r", "\n")
    data = load_yaml_text(text, path=path)
    values = check_mapping(data, FIELDS, what="environment spec", path=path)
    deps = data["dependencies"]
    conda: list[CondaDep] = []
    pip: list[str] = []
    for index, item in enumerate(deps):
        line = line_of(deps, index)
        if isinstance(item, str):
            conda.append(CondaDep(item.strip(), line))
        elif isinstance(item, dict) and list(item) == ["pip"]:
            entries = item["pip"]
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                raise ConfigError("pip: must be a list of requirement strings", path=path,
                                  line=line, key="dependencies.pip")
            pip.extend(e.strip() for e in entries)
        else:
            raise ConfigError("each dependency must be a Conda spec string or a 'pip:' list",
                              path=path, line=line, key="dependencies")
    return EnvSpec(path=path, name=values["name"], channels=tuple(values["channels"]),
                   conda=tuple(conda), pip=tuple(pip), text=text)
