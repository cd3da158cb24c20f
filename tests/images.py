"""Session fixtures for integration tests: the real CPU image, built once and reused.

The build goes through the tool itself (``app.build``), so the same code path users run is what
the suite exercises; when the inputs are unchanged (a second session) it is a no-op.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from containers import app
from containers.runtime import find_runtime

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def real_project() -> app.Project:
    return app.Project.load(ROOT, {})


@pytest.fixture(scope="session")
def real_runtime():
    # No skip: ./setup.sh installs Apptainer, and a suite that silently skips the real runtime
    # would pass without testing anything that matters.
    return find_runtime("auto")


@pytest.fixture(scope="session")
def cpu_image(real_project: app.Project, real_runtime) -> Path:
    """The CPU image (and debian-base), built by the tool if its inputs changed."""
    lines: list[str] = []
    app.build(real_project, target="cpu", say=lines.append)
    image = real_project.settings.image_path("cpu")
    assert image.is_file(), "\n".join(lines[-40:])
    return image
