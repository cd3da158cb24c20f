"""recipes/scripts/install-python-packages.sh run for real on this host, as ``%post`` runs it in
an image (the same POSIX sh, the build context as the tool stages it): uv's resolution keeps
the env spec's own index for the install, the venv holds exactly the resolution, and its
bytecode is compiled once, as a clean build's would be after a rebuild over it."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from containers.host.sources import host_pip_config
from containers.image.cache import package_cache_dir
from tests.fixtures import ROOT

SCRIPT = ROOT / "recipes" / "scripts" / "install-python-packages.sh"


def local_index(folder: Path, name: str, version: str, extra: tuple[str, ...] = ()) -> str:
    """A PEP 503 index holding one pure-Python wheel that no public index has (with the
    ``extra`` modules in its package)."""
    module = name.replace("-", "_")
    wheel = folder / "files" / f"{module}-{version}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    info = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": f"VERSION = {version!r}\n",
             **{f"{module}/{extra}.py": f"NAME = {extra!r}\n" for extra in extra},
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (folder / "simple" / name).mkdir(parents=True)
    (folder / "simple" / name / "index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    return (folder / "simple").as_uri()


def _context(tmp_path: Path, requirements: str) -> Path:
    """The build context as the tool stages it for ``requirements``."""
    ctx = tmp_path / "context"
    ctx.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, ctx)
    pip = host_pip_config()
    (ctx / "pip.conf").write_text(pip.pip_conf(cert_path=pip.cert))
    (ctx / "uv.toml").write_text(pip.uv_toml())
    # the user's package cache, as a build of theirs would bind it: uv fetched once
    (ctx / "pip-cache-dir").write_text(f"{package_cache_dir(None) / 'pip'}\n")
    (ctx / "requirements.txt").write_text(requirements)
    return ctx


def _install(ctx: Path, venv: Path) -> str:
    done = subprocess.run(["sh", str(ctx / SCRIPT.name), str(venv)], capture_output=True,
                          text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    return log


def test_uv_installs_from_the_env_specs_own_index(tmp_path: Path) -> None:
    """The env spec names an extra index (``--extra-index-url``, as lumi-rocm's does for
    ROCm's torch): the resolution's pins keep it, so the install finds the file there too."""
    index = local_index(tmp_path / "site", "containers-fixture-only-here", "1.0")
    ctx = _context(tmp_path, f"--extra-index-url {index}\ncontainers-fixture-only-here==1.0\n")
    venv = tmp_path / "venv"
    log = _install(ctx, venv)
    assert "installer: uv 0.13.9" in log
    assert (venv / "pip-freeze.txt").read_text() == "containers-fixture-only-here==1.0\n"


def _bytecode(venv: Path) -> dict[str, bytes]:
    """Each module of the venv (relative path) and the header of its pyc beside it (this
    session's own pycs go elsewhere: PYTHONPYCACHEPREFIX), and each pyc."""
    tag = sys.implementation.cache_tag
    found = {str(pyc.relative_to(venv)): b"pyc" for pyc in venv.rglob("*.pyc")}
    for source in venv.rglob("*.py"):
        pyc = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        found[str(source.relative_to(venv))] = pyc.read_bytes()[:16] if pyc.exists() else b""
    return found


def test_the_bytecode_of_a_rebuilt_venv_is_a_clean_builds(tmp_path: Path) -> None:
    """Every module gets an unchecked hash-based pyc of its source (PEP 552: no build time in it); run
    again over the venv after a package changed (a rebuild from a kept root), the venv holds
    the pycs a clean build's does; a source changed in place is compiled again."""
    name = "containers-fixture-only-here"
    old = local_index(tmp_path / "old", name, "1.0", extra=("gone", "sub/deep"))
    new = local_index(tmp_path / "new", name, "2.0")
    ctx = _context(tmp_path, f"--extra-index-url {old}\n{name}==1.0\n")
    venv = tmp_path / "venv"
    _install(ctx, venv)
    first = _bytecode(venv)
    modules = {path: head for path, head in first.items() if path.endswith(".py")}
    assert modules and all(head[4:8] == b"\x01\0\0\0" for head in modules.values()), first
    assert [path for path in first if re.search(r"only_here/(sub/)?__pycache__/(gone|deep)", path)]
    (ctx / "requirements.txt").write_text(f"--extra-index-url {new}\n{name}==2.0\n")
    _install(ctx, venv)
    clean = tmp_path / "clean"
    _install(_context(tmp_path / "c", f"--extra-index-url {new}\n{name}==2.0\n"), clean)
    rebuilt = _bytecode(venv)
    assert rebuilt == _bytecode(clean), set(rebuilt.items()) ^ set(_bytecode(clean).items())
    [init] = venv.glob("lib/python3*/site-packages/containers_fixture_only_here/__init__.py")
    init.write_text("VERSION = 'changed in place'\n")
    assert "bytecode: 1 modules compiled" in _install(ctx, venv)
    assert _bytecode(venv)[str(init.relative_to(venv))][8:] == importlib.util.source_hash(
        init.read_bytes()), "a stale pyc was kept"
