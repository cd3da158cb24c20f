"""recipes/scripts/install-python-packages.sh run for real on this host, as ``%post`` runs it in
an image (the same POSIX sh, the build context as the tool stages it): uv's resolution keeps
the env spec's own index for the install, and the venv holds exactly the resolution."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

from containers.host.sources import host_pip_config
from containers.image.cache import package_cache_dir
from tests.fixtures import ROOT

SCRIPT = ROOT / "recipes" / "scripts" / "install-python-packages.sh"


def local_index(folder: Path, name: str, version: str) -> str:
    """A PEP 503 index holding one pure-Python wheel that no public index has."""
    module = name.replace("-", "_")
    wheel = folder / "files" / f"{module}-{version}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    info = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": f"VERSION = {version!r}\n",
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


def test_uv_installs_from_the_env_specs_own_index(tmp_path: Path) -> None:
    """The env spec names an extra index (``--extra-index-url``, as lumi-rocm's does for
    ROCm's torch): the resolution's pins keep it, so the install finds the file there too."""
    ctx = tmp_path / "context"
    ctx.mkdir()
    shutil.copy(SCRIPT, ctx)
    pip = host_pip_config()
    (ctx / "pip.conf").write_text(pip.pip_conf(cert_path=pip.cert))
    (ctx / "uv.toml").write_text(pip.uv_toml())
    # the user's package cache, as a build of theirs would bind it: uv fetched once
    (ctx / "pip-cache-dir").write_text(f"{package_cache_dir(None) / 'pip'}\n")
    index = local_index(tmp_path / "site", "containers-fixture-only-here", "1.0")
    (ctx / "requirements.txt").write_text(
        f"--extra-index-url {index}\ncontainers-fixture-only-here==1.0\n")
    venv = tmp_path / "venv"
    done = subprocess.run(["sh", str(ctx / SCRIPT.name), str(venv)], capture_output=True,
                          text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "installer: uv 0.13.9" in log
    assert (venv / "pip-freeze.txt").read_text() == "containers-fixture-only-here==1.0\n"
    assert not list(venv.rglob("__pycache__"))
