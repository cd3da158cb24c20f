"""Integration: ``invoke publish`` / ``invoke verify`` with the real CPU image, real Apptainer
(sign, verify, exec), real Lmod and real processes killed midway.

The project is a copy of the inputs whose ``local`` site has a bind and an awkward environment
value, so the module file's binds and quoting are exercised for real. Its results folder is
shared by the module: the first publish runs the checks (apptainer test + a 2-rank smoke), later
publishes of the same image reuse that passing verdict, as a site admin's would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from containers.app.project import Project
from containers.app.publishing import publish, verify
from containers.errors import ConfigError, ImageMissing, StateError, UsageError, VerdictFailed
from containers.inputs.settings import load_settings
from containers.publish import catalogue as cat
from containers.publish.modulefile import lua_string, render_modulefile
from containers.publish.publisher import COPY_DELAY_ENV
from containers.publish.signing import key_fingerprints, newpair_argv, parse_key_list, signers
from tests.fixtures import ROOT
from tests.publish import htmlcheck
from tests.publish.standin import NASTY, module_spec as _spec

pytestmark = [pytest.mark.apptainer]

GREETING = 'it\'s "quoted", a\\b ]] end'
BIND_DEST = "/mnt/published-data"
PROBE = ('import os, torch; print("TORCH", torch.__version__); '
         'print("GREETING=" + os.environ["GREETING"]); '
         f'print(open("{BIND_DEST}/hello").read().strip())')
LMOD_INITS = (f"{os.environ.get('LMOD_PKG', '/usr/share/lmod/lmod')}/init/bash",
              "/usr/share/lmod/lmod/init/bash")


def _make_project(root: Path, images_dir: Path, *, extra: dict | None = None) -> Project:
    """A copy of the project inputs + tasks.py with its own invoke.yaml, loaded in-process too."""
    for folder in ("recipes", "envs", "sites", "jobs"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tasks.py", root / "tasks.py")
    config = {"images_dir": str(images_dir), "results_dir": str(root / "results"),
              "tmp_dir": str(root / "work"), **(extra or {})}
    (root / "invoke.yaml").write_text(yaml.safe_dump({"containers": config}))
    return Project(root=root, settings=load_settings(root, config))


@pytest.fixture(scope="module")
def keyring(tmp_path_factory, real_runtime) -> Path:
    """A throwaway passphrase-less keypair (no network: never pushed)."""
    keys = tmp_path_factory.mktemp("keys") / "keyring"
    # passphrase-less, never pushed to a key server: the recipe the error message gives
    made = subprocess.run([*newpair_argv(real_runtime, name="Test Site Admin",
                                         email="admin@example.org", comment="containers tests"),
                           "--bit-length=2048"],
                          env={**os.environ, **real_runtime.keyring_env(keys)}, check=True,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert "Enter" not in made.stdout + made.stderr, "the recipe prompted"
    return keys


@pytest.fixture(scope="module")
def site_project(tmp_path_factory, real_project, cpu_image, keyring) -> Project:
    root = tmp_path_factory.mktemp("site-project")
    data = root / "shared-data"
    data.mkdir()
    (data / "hello").write_text("hello from the site\n")
    project = _make_project(root, real_project.settings.images_dir,
                            extra={"sign_keysdir": str(keyring)})
    local = root / "sites" / "local.yaml"
    profile = yaml.safe_load(local.read_text())
    profile.update(binds=[f"{data}:{BIND_DEST}"], env={"GREETING": GREETING})
    local.write_text(yaml.safe_dump(profile))
    return project


@pytest.fixture(scope="module")
def published(site_project, tmp_path_factory) -> dict:
    """Two signed versions of the CPU image; the first publish runs the checks."""
    dest = tmp_path_factory.mktemp("published") / "containers"
    lines: list[str] = []
    started = time.monotonic()
    first = publish(site_project, target="cpu", dest=dest, version="1.0", sign=True,
                    say=lines.append)
    second = publish(site_project, target="cpu", dest=dest, version="2.0", sign=True,
                     say=lines.append)
    return {"dest": dest, "first": first, "second": second, "lines": lines,
            "seconds": time.monotonic() - started}


def _invoke(project: Project, *args: str, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=project.root,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _start(project: Project, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "invoke", *args], cwd=project.root,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _published_files(dest: Path) -> list[str]:
    """What ``dest/cpu`` holds, less the SBOMs, which are checked to be there exactly when the
    build wrote one (a build before SBOMs has none: each version's entry then names none)."""
    names = sorted(p.name for p in (dest / "cpu").iterdir())
    built_sbom = (ROOT / "images" / "cpu.sif.cdx.json").is_file()
    for name in names:
        if name.endswith(".sif"):
            assert (f"{name}.cdx.json" in names) == built_sbom, (name, names)
    return [n for n in names if not n.endswith(".cdx.json")]


def _catalogue(dest: Path) -> dict:
    return json.loads((dest / "catalogue.json").read_text())


# ----------------------------------------------------------------------------------- publish
def test_publish_runs_the_checks_once_and_catalogues_both_versions(published,
                                                                   site_project) -> None:
    dest, first, second = published["dest"], published["first"], published["second"]
    lines = published["lines"]
    provenance = json.loads(site_project.settings.provenance_path("cpu").read_text())
    # checks: run for the first publish (no verdict yet), reused for the second
    assert first["checks"]["smoke"]["run_now"] is True and first["checks"]["smoke"]["passed"]
    assert first["checks"]["smoke"]["ranks"] == 2
    # The catalogue names the stack the proof ran on, and what it ran on.
    assert first["checks"]["smoke"]["device_kind"] == "cpu"
    assert first["checks"]["smoke"]["stack"]["build"] == "cpu"
    assert first["checks"]["smoke"]["stack"]["runtime"].startswith("apptainer ")
    assert first["checks"]["smoke"]["performance_failed"] is False
    assert first["checks"]["apptainer_test"] == {**first["checks"]["apptainer_test"],
                                                 "passed": True, "how": "run now"}
    assert second["checks"]["smoke"]["run_now"] is False
    assert second["checks"]["smoke"]["verdict"] == first["checks"]["smoke"]["verdict"]
    assert sum(l.startswith("checks: ") and l.endswith(f" test {provenance['image']}")
               for l in lines) == 1, "apptainer test ran once, for the first publish"
    # catalogue
    data = _catalogue(dest)
    assert data["targets"]["cpu"]["latest"] == "2.0"
    assert [e["version"] for e in data["targets"]["cpu"]["versions"]] == ["1.0", "2.0"]
    entry = data["targets"]["cpu"]["versions"][1]
    assert entry == second
    assert entry["file"] == "cpu/2.0.sif" and entry["module"] == "modules/cpu/2.0.lua"
    assert entry["provenance"]["inputs_hash"] == provenance["inputs_hash"]
    assert entry["provenance"]["sha256"] == provenance["sha256"]
    assert entry["provenance"]["pip_freeze"] == provenance["pip_freeze"]
    assert entry["signed"] is True and entry["forced"] is False
    assert entry["checks"]["skipped"] is False and entry["published_by"]


def _signing_key(real_runtime, keyring):
    return parse_key_list(subprocess.run(real_runtime.key_list_argv(secret=True), check=True,
                                         env={**os.environ, **real_runtime.keyring_env(keyring)},
                                         capture_output=True, text=True).stdout, keyring)[0]


def test_publish_signs_checksums_and_links_the_image(published, site_project, keyring,
                                                     real_runtime) -> None:
    dest = published["dest"]
    provenance = json.loads(site_project.settings.provenance_path("cpu").read_text())
    entry = _catalogue(dest)["targets"]["cpu"]["versions"][1]
    key = _signing_key(real_runtime, keyring)
    assert entry["key_fingerprint"] == key.fingerprint
    # files: image (signed, so not the build's bytes), checksum, latest, module, wrapper, key
    sif = dest / "cpu" / "2.0.sif"
    assert entry["sha256"] != provenance["sha256"] and entry["size_bytes"] == sif.stat().st_size
    check = subprocess.run(["sha256sum", "-c", "1.0.sif.sha256", "2.0.sif.sha256"],
                           cwd=dest / "cpu", capture_output=True, text=True)
    assert check.returncode == 0 and "2.0.sif: OK" in check.stdout, check.stdout + check.stderr
    assert os.readlink(dest / "cpu" / "latest") == "2.0.sif"
    assert os.readlink(dest / "modules" / "cpu" / "default") == "2.0.lua"
    assert signers(real_runtime, sif, keysdir=keyring) == {key.fingerprint}
    assert key_fingerprints(dest / entry["public_key"]) == [key.fingerprint]
    assert _published_files(dest) == [
        "1.0.sif", "1.0.sif.sha256", "2.0.diff.html", "2.0.diff.json", "2.0.sif",
        "2.0.sif.sha256", "bin", "latest"]


def test_publish_writes_the_page_and_permissions_verify_accepts(published, site_project,
                                                                keyring, real_runtime) -> None:
    dest = published["dest"]
    entry = _catalogue(dest)["targets"]["cpu"]["versions"][1]
    key = _signing_key(real_runtime, keyring)
    # the page: the signing key's fingerprint, and links to the files publish wrote
    page = (dest / "index.html").read_text()
    assert f'href="{entry["public_key"]}"' in page and 'href="cpu/1.0.sif.sha256"' in page
    assert f"signed by key {key.fingerprint}" in htmlcheck.text_of(page)
    assert htmlcheck.problems(dest / "index.html", dest) == []
    # permissions: world-readable defaults, nothing world-writable
    for path in [dest, *dest.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o7777
        wanted = 0o755 if path.is_dir() or path.name == "cpu-exec" else 0o644
        assert mode == wanted, f"{path}: {mode:04o}"
    # and verify agrees, from the command line
    result = _invoke(site_project, "verify", "--dest", str(dest))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 published image(s)" in result.stdout and "FAILED" not in result.stdout


def test_module_loads_with_real_lmod(published) -> None:
    init = next((p for p in LMOD_INITS if Path(p).is_file()), None)
    assert init, "Lmod is not installed (./setup.sh installs Debian's lmod)"
    dest = published["dest"]
    script = f"""
source {init}
module use {dest / 'modules'}
module load cpu
echo "SIF=$SIF"
echo "CONTAINER_IMAGE=$CONTAINER_IMAGE"
echo "SINGULARITY_BIND=$SINGULARITY_BIND"
echo "APPTAINER_BIND=$APPTAINER_BIND"
printf 'SENV=%s\\n' "$SINGULARITYENV_GREETING"
printf 'AENV=%s\\n' "$APPTAINERENV_GREETING"
cpu-exec python -c '{PROBE}'
module swap cpu cpu/1.0
echo "OLD=$SIF"
module unload cpu
echo "UNLOADED=${{SIF:-none}} $(command -v cpu-exec || echo gone)"
"""
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = dict(l.split("=", 1) for l in result.stdout.splitlines() if "=" in l)
    sif = str(dest / "cpu" / "2.0.sif")
    assert out["SIF"] == sif and out["CONTAINER_IMAGE"] == sif
    assert out["SINGULARITY_BIND"].endswith(f":{BIND_DEST}") and \
        out["APPTAINER_BIND"] == out["SINGULARITY_BIND"]
    assert out["SENV"] == GREETING and out["AENV"] == GREETING
    assert "TORCH 2.13.0+cpu" in result.stdout
    assert out["GREETING"] == GREETING, "the site environment reaches the container intact"
    assert "hello from the site" in result.stdout, "the site bind is in place"
    assert out["OLD"] == str(dest / "cpu" / "1.0.sif")
    assert out["UNLOADED"] == "none gone"


def test_lua_quoting_round_trips_through_real_lua(tmp_path: Path) -> None:
    lua = shutil.which("lua") or shutil.which("lua5.3") or shutil.which("lua5.4")
    assert lua, "no Lua interpreter (Debian's lmod brings one)"
    text = render_modulefile(_spec(image=f"/x/{NASTY}"))
    stubs = ("local function out(...) for _, v in ipairs({...}) do "
             "io.write(#v, ':', v) end io.write(';') end\n"
             "function setenv(k, v) out('setenv', k, v) end\n"
             "function pushenv(k, v) out('pushenv', k, v) end\n"
             "function prepend_path(k, v) out('prepend', k, v) end\n"
             "function help(t) out('help', t) end\n"
             "function whatis(t) out('whatis', t) end\n"
             "function family(t) out('family', t) end\n")
    (tmp_path / "m.lua").write_text(stubs + text)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_BIND")}  # no user binds
    result = subprocess.run([lua, str(tmp_path / "m.lua")], capture_output=True, timeout=30,
                            env=env)
    assert result.returncode == 0, result.stderr
    calls, call, data, pos = [], [], result.stdout, 0
    while pos < len(data):  # length-prefixed values, ';' after each call
        if data[pos:pos + 1] == b";":
            calls.append(call)
            call, pos = [], pos + 1
            continue
        colon = data.index(b":", pos)
        size = int(data[pos:colon])
        call.append(data[colon + 1:colon + 1 + size].decode())
        pos = colon + 1 + size
    assert ["setenv", "SIF", f"/x/{NASTY}"] in calls
    assert ["pushenv", "APPTAINERENV_WEIRD", NASTY] in calls
    assert ["pushenv", "SINGULARITY_BIND", "/var/spool/slurmd,/opt/cray,/pfs:/pfs:ro"] in calls
    assert any(c[0] == "whatis" and c[1] == f"Description: desc {NASTY}" for c in calls)
    assert lua_string(NASTY) in text


def test_corrupt_byte_fails_verify_naming_the_file(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    publish(site_project, target="cpu", dest=dest, version="1.0", sign=True, say=lambda l: None)
    publish(site_project, target="cpu", dest=dest, version="1.1", say=lambda l: None)
    sif = dest / "cpu" / "1.0.sif"
    with open(sif, "r+b") as handle:
        handle.seek(sif.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = _invoke(site_project, "verify", "--dest", str(dest))
    assert result.returncode == 2, result.stdout + result.stderr
    error = result.stderr.strip()
    assert error.startswith(f"error: verify found 2 problem(s) in {dest}")
    assert f"{sif}: sha256" in error and "does not match the catalogue" in error
    assert f"{sif}: signature check failed" in error and "integrity" in error
    assert "1.1.sif" not in error, "the intact image is not blamed"
    assert "FAILED" in result.stdout
    only_cpu = _invoke(site_project, "verify", "--dest", str(dest), "--target", "cpu")
    assert only_cpu.returncode == 2 and f"{sif}: sha256" in only_cpu.stderr


def test_verify_names_consistency_problems(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    publish(site_project, target="cpu", dest=dest, version="1.0", say=lambda l: None)
    shutil.copy(dest / "cpu" / "1.0.sif", dest / "cpu" / "stray.sif")
    (dest / "modules" / "cpu" / "1.0.lua").unlink()
    with pytest.raises(VerdictFailed) as failure:
        verify(site_project, dest=dest, say=lambda l: None)
    message = str(failure.value)
    assert "cpu/stray.sif: not in the catalogue" in message
    assert "modules/cpu/1.0.lua: missing" in message
    with pytest.raises(StateError, match="stray.sif exists but is not in the catalogue"):
        publish(site_project, target="cpu", dest=dest, version="stray", say=lambda l: None)
    (dest / "catalogue.json").write_text("{")
    with pytest.raises(VerdictFailed, match="catalogue is not valid JSON"):
        verify(site_project, dest=dest, say=lambda l: None)
    with pytest.raises(StateError, match="catalogue is not valid JSON"):
        publish(site_project, target="cpu", dest=dest, version="2.0", say=lambda l: None)


def test_interrupted_publish_leaves_nothing_under_final_names(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    publish(site_project, target="cpu", dest=dest, version="1.0", say=lambda l: None)
    before = (dest / "catalogue.json").read_bytes()
    proc = _start(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                  "--version", "2.0", env={COPY_DELAY_ENV: "0.3"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("copying "):
            break
    temps = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the temp copy exists and is partly written
        temps = [p for p in (dest / "cpu").glob(".2.0.sif.*.partial") if p.stat().st_size > 0]
        if temps:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert temps, "".join(seen)
    assert temps[0].stat().st_size < (dest / "cpu" / "1.0.sif").stat().st_size
    assert not (dest / "cpu" / "2.0.sif").exists()
    assert not (dest / "cpu" / "2.0.sif.sha256").exists()
    assert not (dest / "modules" / "cpu" / "2.0.lua").exists()
    assert (dest / "catalogue.json").read_bytes() == before
    assert os.readlink(dest / "cpu" / "latest") == "1.0.sif"
    lines: list[str] = []
    verify(site_project, dest=dest, say=lines.append)  # the leftover is not a problem
    assert any(l.startswith(f"note: {temps[0]}") for l in lines)
    lines.clear()
    publish(site_project, target="cpu", dest=dest, version="2.0", say=lines.append)
    assert f"removing leftover of an interrupted publish: {temps[0]}" in lines
    assert not list((dest / "cpu").glob(".*"))
    assert [e.version for e in cat.entries(_catalogue(dest), "cpu")] == ["1.0", "2.0"]
    verify(site_project, dest=dest, say=lambda l: None)


def test_parallel_publishes_are_serialised(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    env = {COPY_DELAY_ENV: "0.05"}  # ~2 s of copying each, so the two overlap
    procs = [_start(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                    "--version", version, env=env) for version in ("a", "b")]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(outputs)
    assert any("waiting for another publish to finish" in out for out in outputs), outputs
    data = _catalogue(dest)
    assert sorted(e.version for e in cat.entries(data, "cpu")) == ["a", "b"]
    assert os.readlink(dest / "cpu" / "latest") == f"{data['targets']['cpu']['latest']}.sif"
    verify(site_project, dest=dest, say=lambda l: None)


def test_prune_keeps_newest_and_latest(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    for version in ("1", "2"):
        publish(site_project, target="cpu", dest=dest, version=version, say=lambda l: None)
    result = _invoke(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                     "--version", "3", "--keep", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pruning cpu 1 (--keep 1)" in result.stdout
    assert "pruning cpu 2 (--keep 1)" in result.stdout
    data = _catalogue(dest)
    assert [e.version for e in cat.entries(data, "cpu")] == ["3"]
    assert _published_files(dest) == ["3.diff.html", "3.diff.json", "3.sif", "3.sif.sha256",
                                      "bin", "latest"]
    assert sorted(p.name for p in (dest / "modules" / "cpu").iterdir()) == ["3.lua", "default"]
    verify(site_project, dest=dest, say=lambda l: None)


def test_existing_version_needs_force_and_force_is_recorded(site_project, tmp_path) -> None:
    dest = tmp_path / "pub"
    first = publish(site_project, target="cpu", dest=dest, version="1.0", say=lambda l: None)
    result = _invoke(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                     "--version", "1.0")
    assert result.returncode == 1
    assert result.stderr.strip() == (f"error: cpu 1.0 is already published "
                                      f"({dest}/cpu/1.0.sif); give another --version, or "
                                      "--force to replace it")
    again = publish(site_project, target="cpu", dest=dest, version="1.0", force=True,
                    sign=True, say=lambda l: None)
    assert again["forced"] is True and again["replaced_sha256"] == first["sha256"]
    assert again["sha256"] != first["sha256"]  # now signed
    assert len(cat.entries(_catalogue(dest), "cpu")) == 1
    bad = _invoke(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                  "--version", "../evil")
    assert bad.returncode == 1 and bad.stderr.startswith("error: --version") \
        and "'../evil'" in bad.stderr and len(bad.stderr.splitlines()) == 1
    nogroup = _invoke(site_project, "publish", "--target", "cpu", "--dest", str(dest),
                      "--version", "9", "--group", "no-such-group-here")
    assert nogroup.returncode == 1
    assert "group 'no-such-group-here' does not exist on this machine" in nogroup.stderr
    assert not (dest / "cpu" / "9.sif").exists()


def test_group_only_permissions(site_project, tmp_path) -> None:
    import grp

    group = grp.getgrnam("users")
    project = Project(root=site_project.root, settings=load_settings(
        site_project.root, {"results_dir": str(site_project.settings.results_dir),
                            "images_dir": str(site_project.settings.images_dir),
                            "publish_world_readable": False}))
    dest = tmp_path / "pub"
    publish(project, target="cpu", dest=dest, version="1.0", group="users", say=lambda l: None)
    for path in [dest, *dest.rglob("*")]:
        if path.is_symlink():
            continue
        info = path.stat()
        wanted = 0o750 if path.is_dir() or path.name == "cpu-exec" else 0o640
        assert (info.st_mode & 0o7777, info.st_gid) == (wanted, group.gr_gid), path
    verify(project, dest=dest, say=lambda l: None)


# ---------------------------------------------------------------------------------- refusals
def test_skip_checks_is_loud_and_recorded(tmp_path, real_project, cpu_image) -> None:
    project = _make_project(tmp_path / "project", real_project.settings.images_dir)
    lines: list[str] = []
    entry = publish(project, target="cpu", dest=tmp_path / "pub", version="1.0",
                    skip_checks=True, say=lines.append)
    assert any(l.startswith("WARNING: --skip-checks: cpu is published WITHOUT") for l in lines)
    assert entry["checks"] == {"skipped": True, "apptainer_test": None, "smoke": None}
    assert cat.find(_catalogue(tmp_path / "pub"), "cpu", "1.0").checks.skipped is True
    assert not (project.settings.results_dir / "smoke").exists(), "no checks were run"


def test_failing_smoke_refuses_to_publish(tmp_path, real_project, cpu_image) -> None:
    """No verdict for the image, so publish runs the checks; the benchmark fails: refused."""
    project = _make_project(tmp_path / "project", real_project.settings.images_dir)
    (project.root / "jobs" / "allreduce.py").write_text(
        "import sys\nprint('benchmark broken on purpose', flush=True)\nsys.exit(3)\n")
    dest = tmp_path / "pub"
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failure:
        publish(project, target="cpu", dest=dest, version="1.0", say=lines.append)
    assert str(failure.value).startswith("not publishing cpu: smoke FAILED for cpu (2 ranks)")
    assert any("no passing smoke verdict" in l for l in lines)
    assert not dest.exists() or not any(dest.rglob("*.sif"))
    verdicts = list((project.settings.results_dir / "smoke").glob("*/verdict.json"))
    assert len(verdicts) == 1 and json.loads(verdicts[0].read_text())["passed"] is False


def test_unbuilt_or_unknown_target_is_a_clear_error(site_project, tmp_path) -> None:
    with pytest.raises(UsageError, match="unknown target 'cpuu'"):
        publish(site_project, target="cpuu", dest=tmp_path, say=lambda l: None)
    empty = _make_project(tmp_path / "project", tmp_path / "no-images")
    with pytest.raises(ImageMissing, match="is not built; run: invoke build --target cpu"):
        publish(empty, target="cpu", dest=tmp_path / "pub", say=lambda l: None)


def test_signing_key_problems_are_clear_and_publish_nothing(site_project, real_runtime,
                                                            tmp_path) -> None:
    def project_with(keysdir: Path) -> Project:
        settings = load_settings(site_project.root, {
            "results_dir": str(site_project.settings.results_dir),
            "images_dir": str(site_project.settings.images_dir), "sign_keysdir": str(keysdir)})
        return Project(root=site_project.root, settings=settings)

    dest = tmp_path / "pub"
    with pytest.raises(ConfigError, match=r"no secret key #0 in the keyring .*key newpair"
                                          r".* --comment="):
        publish(project_with(tmp_path / "empty-keyring"), target="cpu", dest=dest, sign=True,
                version="1.0", say=lambda l: None)
    assert not dest.exists(), "refused before anything was written"
    locked = tmp_path / "locked-keyring"
    subprocess.run([real_runtime.binary, "key", "newpair", "--name=Locked",
                    "--email=l@example.org", "--password=secret", "--push=false",
                    "--bit-length=1024"],
                   env={**os.environ, **real_runtime.keyring_env(locked)}, check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    with pytest.raises(ConfigError, match="secret key #0 has a passphrase"):
        publish(project_with(locked), target="cpu", dest=dest, sign=True, version="1.0",
                say=lambda l: None)
    assert not (dest / "cpu").exists(), "rolled back: no image, no temp, no folder it made"
    assert not (dest / "catalogue.json").exists()


def test_publish_with_only_apptainer_keysdir_signs_and_verifies(
        site_project, keyring, real_runtime, tmp_path, monkeypatch) -> None:
    """``containers.sign_keysdir`` unset: the keyring is the one Apptainer reads by itself
    (``APPTAINER_KEYSDIR``), for the key listed, the signature and the public key exported;
    a HOME whose ``~/.apptainer/keys`` is empty shows nothing is looked up there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("APPTAINER_KEYSDIR", str(keyring))
    for name in ("SINGULARITY_SYPGPDIR", "APPTAINER_CONFIGDIR", "SINGULARITY_CONFIGDIR"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(site_project.root, {
        "results_dir": str(site_project.settings.results_dir),
        "images_dir": str(site_project.settings.images_dir)})
    assert settings.sign_keysdir is None
    project = Project(root=site_project.root, settings=settings)
    dest = tmp_path / "pub"
    lines: list[str] = []
    entry = publish(project, target="cpu", dest=dest, version="1.0", sign=True,
                    skip_checks=True, say=lines.append)
    key = parse_key_list(subprocess.run(real_runtime.key_list_argv(secret=True), check=True,
                                        capture_output=True, text=True).stdout, keyring)[0]
    assert entry["signed"] is True and entry["key_fingerprint"] == key.fingerprint
    assert key_fingerprints(dest / entry["public_key"]) == [key.fingerprint]
    assert signers(real_runtime, dest / "cpu" / "1.0.sif", keysdir=keyring) == {key.fingerprint}
    verify(project, dest=dest, say=lambda l: None)
    assert not (tmp_path / "home" / ".apptainer" / "keys" / "pgp-secret").exists()
