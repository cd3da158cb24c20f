"""Registers the shared fixtures, which live in named files under ``tests/fixtures/``:
``data`` (plain data), ``images`` (the real CPU image, built once per session), ``slurm`` (a real
two-node Slurm cluster on this machine). See ``tests/README.md``."""

pytest_plugins = ["tests.fixtures.data", "tests.fixtures.images", "tests.fixtures.slurm",
                  "tests.fixtures.disks"]
