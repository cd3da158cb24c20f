"""The CycloneDX SBOM made from an image's facts: packages named by purl, the build's inputs hash
as a property, and a document that is no CycloneDX refused by the validator."""

from __future__ import annotations

import json
import subprocess
import sys

from containers.image import sbom
from tests.fixtures import ROOT

FACTS = ROOT / "tests" / "fixtures" / "image_facts"


def _facts(name: str) -> dict:
    return json.loads((FACTS / f"{name}.json").read_text())


def test_sbom_of_facts_validates_and_names_packages_by_purl() -> None:
    text = sbom.render(sbom.make(_facts("lumi-rocm"), {"target": "lumi-rocm",
                                                       "inputs_hash": "ab" * 32}))
    assert sbom.validate(text) is None
    data = json.loads(text)
    purls = {c["name"]: c["purl"] for c in data["components"] if "purl" in c}
    assert purls["torch"] == "pkg:pypi/torch@2.9.0%2Brocm7.1"
    assert purls["libc6"].startswith("pkg:deb/ubuntu/libc6@2.39-0ubuntu8.4?arch=amd64")
    props = {p["name"]: p["value"] for p in data["metadata"]["component"]["properties"]}
    assert props["containers:inputs_hash"] == "ab" * 32
    assert sbom.validate(text.replace('"CycloneDX"', '"NotCycloneDX"')) is not None


def test_the_validator_is_imported_off_the_builds_path() -> None:
    """Importing it builds jsonschema's format grammars (1.5 s): a build starts without it and
    :func:`sbom.preload` brings it in the background."""
    code = ("import sys, time\nfrom containers.image import sbom\n"
            "assert sbom.VALIDATOR not in sys.modules\nsbom.preload()\n"
            "deadline = time.monotonic() + 60\n"
            "while sbom.VALIDATOR not in sys.modules and time.monotonic() < deadline:\n"
            "    time.sleep(0.05)\n"
            "assert sbom.VALIDATOR in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
