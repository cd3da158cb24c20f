"""An image's software bill of materials: CycloneDX JSON, written by every build beside its record.

Made with cyclonedx-python-lib, so the file is the standard's; its packages come from the
image's probe, and its properties trace it back to the build record."""

from __future__ import annotations

import importlib
import threading
from pathlib import PurePath
from typing import Mapping

from cyclonedx.model import Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL

from containers.errors import StateError

SCHEMA = SchemaVersion.V1_6
PROPERTY_PREFIX = "containers:"
#: Apptainer's label naming what a ``Bootstrap: localimage`` / ``docker`` build started from.
FROM_LABEL = "org.label-schema.usage.singularity.deffile.from"


def _deb(package: Mapping, distro: str, os_id: str) -> Component:
    name, version = str(package["name"]), str(package.get("version") or "")
    qualifiers = {"arch": str(package.get("arch") or ""), "distro": distro}
    return Component(name=name, version=version, type=ComponentType.LIBRARY,
                     bom_ref=f"deb:{name}",
                     purl=PackageURL("deb", os_id, name, version,
                                     {k: v for k, v in qualifiers.items() if v}))


def _pip(package: Mapping) -> Component:
    name, version = str(package["name"]), str(package.get("version") or "")
    return Component(name=name, version=version, type=ComponentType.LIBRARY,
                     bom_ref=f"pip:{name.lower()}",
                     purl=PackageURL("pypi", None, name.lower().replace("_", "-"), version))


def make(facts: Mapping, record: Mapping) -> Bom:
    os_info = facts.get("os") or {}
    os_id = str(os_info.get("id") or "linux")
    distro = f"{os_id}-{os_info.get('version_id')}" if os_info.get("version_id") else os_id
    labels = record.get("labels") or facts.get("labels") or {}
    inputs = record.get("inputs") or {}
    bom = Bom()
    properties = [Property(name=PROPERTY_PREFIX + key, value=str(value)) for key, value in (
        ("inputs_hash", record.get("inputs_hash")), ("arch", facts.get("arch")),
        ("tool_version", record.get("tool_version")),
        ("git_revision", record.get("git_revision")), ("build_date", record.get("build_date")),
        ("glibc", facts.get("glibc")), ("python", facts.get("python"))) if value]
    bom.metadata.component = Component(
        name=str(record.get("target") or "image"), type=ComponentType.CONTAINER,
        version=str(record.get("inputs_hash") or "")[:16] or None, bom_ref="image",
        properties=properties)
    base = inputs.get("base") or labels.get(FROM_LABEL)
    if base:
        bom.components.add(Component(
            name=PurePath(str(labels.get(FROM_LABEL) or "base")).name,
            type=ComponentType.CONTAINER,
            bom_ref="base-image", description="the image this one was built from",
            properties=[Property(name=PROPERTY_PREFIX + "base", value=str(base))]))
    for package in facts.get("debian_packages") or []:
        bom.components.add(_deb(package, distro, os_id))
    for package in facts.get("pip_packages") or []:
        bom.components.add(_pip(package))
    # The image holds every component (no finer graph is known: say so, not less).
    bom.register_dependency(bom.metadata.component, list(bom.components))
    return bom


def render(bom: Bom) -> str:
    """The BOM as CycloneDX 1.6 JSON, validated first (a :class:`StateError` if not)."""
    text = JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
    problem = validate(text)
    if problem:
        raise StateError(f"the SBOM does not validate against CycloneDX {SCHEMA.to_version()}: "
                         f"{problem}")
    return text


#: The schema validator's module: importing it builds jsonschema's format grammars (1.5 s here).
VALIDATOR = "cyclonedx.validation.json"


def preload() -> None:
    """Import the validator in the background while the build runs: off its critical path."""
    threading.Thread(target=importlib.import_module, args=(VALIDATOR,), daemon=True).start()


def validate(text: str) -> str | None:
    """None when ``text`` is valid CycloneDX 1.6 JSON, else the first problem (one line)."""
    error = importlib.import_module(VALIDATOR).JsonStrictValidator(SCHEMA).validate_str(text)
    return None if error is None else str(error).splitlines()[0][:300]
