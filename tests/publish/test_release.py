"""The diff of two images' facts and the catalogue page, on plain data (the release gate's busbw
comparison: test_gate.py; the real images: test_release_image.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from containers.publish import diff as diffing
from containers.publish.page import render_page
from tests.fixtures import ROOT
from tests.publish.test_gate import smoke, summary

FACTS = json.loads((ROOT / "tests" / "fixtures" / "image_facts" / "lumi-rocm.json").read_text())


def test_diff_names_added_removed_changed_packages_and_stack() -> None:
    new = copy.deepcopy(FACTS)
    new["pip_packages"] = [{"name": "torch", "version": "2.9.1+rocm7.1"},
                           {"name": "numpy", "version": "2.1.0"}]
    new["torch"]["version"] = "2.9.1+rocm7.1"
    result = diffing.diff(diffing.side("old", FACTS, size=10, smoke=summary(100.0)),
                          diffing.side("new", new, size=12, smoke=None))
    assert result["packages"] == {"added": {"pip:numpy": "2.1.0"},
                                  "removed": {"pip:deepspeed": "0.17.1"},
                                  "changed": {"pip:torch": ["2.9.0+rocm7.1", "2.9.1+rocm7.1"]}}
    assert result["stack"] == {"torch": ["2.9.0+rocm7.1", "2.9.1+rocm7.1"],
                               "deepspeed": ["0.17.1", None]}
    text = "\n".join(diffing.lines(result))
    assert "+ pip:numpy 2.1.0" in text and "smoke (new): no verdict" in text


def test_page_is_self_contained_escaped_and_lists_every_version(tmp_path: Path) -> None:
    entry = {"target": "lumi-rocm", "size_bytes": 1 << 30, "signed": False,
             "published": "2026-11-25", "published_by": "admin@<host>",
             "checks": {"smoke": smoke(100.0)}, "stack": {"torch": "2.9.0", "build": "rocm"},
             "sbom_file": "lumi-rocm/1.sif.cdx.json"}
    second = {**entry, "version": "2", "checks": {"smoke": smoke(90.0)},
              "diff_file": "lumi-rocm/2.diff.json",
              "gate": {"accepted": {"why": "driver <update>", "by": "admin", "date": "now",
                                    "problems": ["busbw fell"]}}}
    catalogue = {"updated": "now", "targets": {"lumi-rocm": {
        "latest": "2", "versions": [{**entry, "version": "1"}, second]}}}
    page = render_page(catalogue, tmp_path)
    assert "<script" not in page.lower()
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert links and not [l for l in links if re.match(r"[a-z]+://", l)
                          or l.startswith("//")], links
    assert any(l.startswith("data:image/png;base64,") for l in links)
    # who published or accepted (a user and host) stays in catalogue.json
    assert "admin@" not in page and "driver &lt;update&gt;" in page
    assert page.index('id="lumi-rocm@2"') < page.index('id="lumi-rocm@1"')
