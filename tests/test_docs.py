"""The documentation site: it builds with MkDocs in strict mode (a warning fails), works offline
with search, and its generated reference misses no task, flag, input field, site, module or error
family of the code (``scripts/docs_reference.py`` makes it; these tests read the built HTML)."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures import ROOT

DOCS = ROOT / "docs"
#: Pages other parts of the project write; the nav must hold each (a short page until then).
OWNED_ELSEWHERE = ("launchers.md", "architecture.md", "your-own-inputs.md", "release-gate.md",
                   "adding-a-site.md", "cuda-images.md")


def _generator():
    spec = importlib.util.spec_from_file_location("docs_reference",
                                                  ROOT / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator():
    return _generator()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The docs built as CI builds them: ``mkdocs build --strict`` into a temp folder."""
    out = tmp_path_factory.mktemp("site")
    # as CI runs it: the hook makes the checkout importable itself (no PYTHONPATH); and without
    # the theme's banner about its future
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def text_of(page: Path) -> str:
    """A built page's text: tags removed, entities decoded (so `--gpus` reads as written)."""
    return text_of_html(page.read_text())


def text_of_html(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_docs_build_strict_with_offline_search(site) -> None:
    assert (site / "index.html").is_file()
    # the offline plugin: search works from file:// (the index as a script, not fetched)
    assert (site / "search" / "search_index.js").is_file()
    index = (site / "index.html").read_text()
    assert "fonts.googleapis.com" not in index  # nothing fetched from elsewhere when read
    assert 'href="getting-started.html"' in index  # links that work from disk


#: A placeholder a page quotes (``recipes/<target>.yaml``, ``--gres=gpu:v100:<N>``).
PLACEHOLDER = re.compile(r"<([A-Za-z][^<>\n]*)>")
GENERATED_PAGES = {"tasks": "reference/tasks.html", "inputs": "reference/inputs.html",
                   "sites": "reference/sites.html", "layout": "reference/layout.html",
                   "errors": "troubleshooting.html"}


@pytest.mark.parametrize("block", sorted(GENERATED_PAGES))
def test_no_generated_page_loses_a_placeholder(site, generator, block) -> None:
    """What a generated block quotes in prose is escaped: a ``<target>`` outside a code span
    would reach the browser as an unknown tag and vanish from the page."""
    quoted = set(PLACEHOLDER.findall(html.unescape(generator.GENERATORS[block]())))
    text = text_of(site / GENERATED_PAGES[block])
    assert not sorted(name for name in quoted if f"<{name}>" not in text)


@pytest.mark.parametrize("block", sorted(GENERATED_PAGES))
def test_no_generated_heading_loses_a_placeholder(site, generator, block) -> None:
    """A heading keeps its placeholders too (the recipe schema's title, "recipe manifest
    (recipes/<target>.yaml)", once read "recipes/.yaml" in the page and its table of contents):
    each heading's own text is compared, since the same word elsewhere on the page hides a loss."""
    written = [html.unescape(line.lstrip("#").strip()) for line in
               generator.GENERATORS[block]().splitlines() if re.match(r"#+ ", line)]
    built = re.findall(r"<h([1-6])[^>]*>(.*?)</h\1>", (site / GENERATED_PAGES[block]).read_text(),
                       re.S)
    shown = " ".join(text_of_html(inner) for _, inner in built)
    lost = [heading for heading in written for name in PLACEHOLDER.findall(heading)
            if f"<{name}>" not in shown]
    assert not lost


def test_committed_reference_pages_are_current(generator) -> None:
    """The generated blocks are committed filled, so the reference reads whole on a code host;
    a change to a task's help, a field, a site fact or a module's docstring must refill them."""
    assert generator.pages(), "no page holds a generated block"
    stale = [page.relative_to(ROOT).as_posix() for page in generator.pages()
             if generator.fill(page.read_text()) != page.read_text()]
    assert not stale, f"run: python scripts/docs_reference.py --write ({', '.join(stale)})"


def test_a_filled_block_is_refilled_not_repeated(generator) -> None:
    once = generator.fill("# T\n\n<!-- generated: errors -->\n")
    assert once.count("<!-- end generated: errors -->") == 1
    assert generator.fill(once) == once
    assert generator.fill(once.replace("| `", "| `Stale", 1)) == once


def test_prose_escapes_outside_code_spans_only(generator) -> None:
    assert generator.prose("recipes/<target>.yaml, `<target>` & ``a `<b>` c``") == \
        "recipes/&lt;target&gt;.yaml, `<target>` &amp; ``a `<b>` c``"
    assert generator.cell("--gres=gpu:v100:<N> | x") == "--gres=gpu:v100:&lt;N&gt; \\| x"


def test_search_works_offline_in_a_real_browser(site, tmp_path) -> None:
    """The built site opened from disk in headless Chromium with every network request refused
    answers a search (``?q=`` opens the search with that query): the search worker runs from
    our own stand-in (docs/assets/javascripts), no script is fetched from a CDN."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (./setup.sh test installs it)")
    for page in site.rglob("*.html"):
        assert "unpkg.com" not in page.read_text(), page
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=10000",
            "--dump-dom", (site / "index.html").as_uri() + "?q=apptainer"]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'class="md-search-result__meta">(\d+) matching documents?<', dom)
    assert found and int(found.group(1)) > 5, dom[-2000:]
    assert "md-search-result__item" in dom


def test_nav_holds_every_page(site) -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = set(re.findall(r"[\w/.-]+\.md", json.dumps(nav)))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == listed
    assert set(OWNED_ELSEWHERE) <= listed


def test_every_task_and_flag_is_in_the_reference(site, generator) -> None:
    text = text_of(site / "reference" / "tasks.html")
    flags = generator.task_flags()
    assert "local-slurm" in flags and "smoke" in flags
    for task, rows in flags.items():
        assert f"invoke {task}" in text, task
        for flag, _ in rows:
            assert flag in text, f"{task} {flag}"


def _fields_of(generator) -> set[str]:
    """Every key name the loaders declare and every key the project's own input files use."""
    names: set[str] = set()
    for path in (ROOT / "schemas").glob("*.json"):
        names |= {row[0].strip("`").split(".")[-1] for row in
                  generator.schema_rows(json.loads(path.read_text()))}
    for folder in ("sites", "recipes"):
        for path in (ROOT / folder).glob("*.yaml"):
            names |= set(yaml.safe_load(path.read_text()) or {})
    return names


def test_every_input_field_is_in_the_reference(site, generator) -> None:
    text = text_of(site / "reference" / "inputs.html")
    missing = sorted(name for name in _fields_of(generator)
                     if not re.search(rf"(^|[.`\s]){re.escape(name)}($|[`\s])", text, re.M))
    assert not missing


def test_every_site_fact_and_its_source_is_in_the_reference(site) -> None:
    text = text_of(site / "reference" / "sites.html")
    for path in (ROOT / "sites").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        assert f"sites/{path.name}" in text
        for key in data:
            assert key in text, f"{path.name}: {key}"
    # a source cited in a comment of a profile reaches the page
    assert "olivia_job_types.md: max 32 GPUs per job" in text


def test_layout_lists_every_module(site, generator) -> None:
    text = text_of(site / "reference" / "layout.html")
    modules = generator.modules()
    assert len(modules) > 70
    for path in modules:
        assert path.as_posix() in text, path


def test_first_sentence_of_a_docstring() -> None:
    first = _generator().first_sentence
    assert first("``invoke build``: plan a target. Then more.\n\nDetails.") == \
        "`invoke build`: plan a target."
    assert first(None) == ""


def test_troubleshooting_covers_every_error_family(site, generator) -> None:
    page = (DOCS / "troubleshooting.md").read_text()
    built = text_of(site / "troubleshooting.html")
    for kind in generator.error_families():
        assert f"### {kind.__name__}\n" in page, kind.__name__  # a message and a fix each
        assert kind.__name__ in built


def test_a_schema_file_is_rendered_when_one_appears(generator) -> None:
    rows = generator.schema_rows({"properties": {
        "scheduler": {"type": "string", "enum": ["slurm", "pbs"], "description": "which"},
        "transport": {"type": "object", "required": ["name"],
                      "properties": {"name": {"type": "string"}}}}})
    assert ("`scheduler`", "string", "", "", "`slurm`, `pbs`", "which") in rows
    assert rows[-1][0] == "`transport.name`"


def test_an_unknown_generated_block_fails_the_build(generator) -> None:
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        generator.fill("<!-- generated: nope -->")


def _anchor(heading: str) -> str:
    """A heading's anchor as MkDocs and code hosts make it (lower case, punctuation dropped)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")


def test_readme_links_open_pages_with_their_text() -> None:
    """The README is read where the repository is read: each of its links opens a file there
    that holds its text (a generated block committed filled, not a marker alone), and a link to
    a section names one of the page's headings."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) > 10, local
    for link in local:
        path, _, anchor = link.partition("#")
        text = (ROOT / path).read_text()
        assert len(re.sub(r"<!--.*?-->", "", text, flags=re.S).split()) > 100, link
        for block in re.findall(r"<!-- generated: (\w+) -->", text):
            assert f"<!-- end generated: {block} -->" in text, f"{link}: {block} is not filled"
        headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
        assert not anchor or anchor in headings, link


def test_readme_is_a_few_screens() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 12_000
    for command in ("./setup.sh smoke", "./setup.sh test"):
        assert command in readme
    assert "./setup.sh test" in (ROOT / ".ci" / "run").read_text()
