"""Conda environment specs: the pip list a venv build installs, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError, Problems
from containers.inputs.envspec import load_env_spec


def test_env_spec_with_extra_index_url_lines(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_text(
        "name: pytorch\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.11\n  - pip\n"
        "  - pip:\n    - --extra-index-url https://wheels.example.org/rocm6.2\n"
        "    - torch==2.5.1+rocm6.2\n    - deepspeed\n")
    env = load_env_spec(spec)
    assert env.requirements_txt() == ("--extra-index-url https://wheels.example.org/rocm6.2\n"
                                      "torch==2.5.1+rocm6.2\ndeepspeed\n")
    env.check_venv_compatible()  # python and pip only: fine for the venv builder


def test_conda_package_refused_on_venv_path(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_text("dependencies:\n  - python=3.11\n  - conda-forge::mpi4py>=3\n  - pip\n")
    env = load_env_spec(spec)
    with pytest.raises(ConfigError, match=r"env.yml:3: dependencies: 'conda-forge::mpi4py>=3' is a "
                                          r"Conda package.*builder: cotainr"):
        env.check_venv_compatible()


def test_env_spec_that_is_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_bytes(b"dependencies:\n  - pip:\n    - torch\xff\n")
    with pytest.raises(ConfigError, match=rf"^{spec}:3: not UTF-8 text"):
        load_env_spec(spec)


def _spec(tmp_path: Path, *entries: str) -> Path:
    spec = tmp_path / "env.yml"
    spec.write_text("dependencies:\n  - pip\n  - pip:\n"
                    + "".join(f"    - {entry!r}\n" for entry in entries))
    return spec


INDEX = "https://wheels.example.org/rocm6.3"


@pytest.mark.parametrize("entry, message", [
    ("--index-url https://mirror.example/simple", "--index-url replaces the package index"),
    ("-i https://mirror.example/simple", "--index-url replaces the package index"),
    ("--extra-index-url http://wheels.example.org/rocm6.3",
     "--extra-index-url 'http://wheels.example.org/rocm6.3' is not an https URL"),
    ("--extra-index-url https://user:token@wheels.example.org/x", "is not an https URL"),
    ("--extra-index-url https://elsewhere.example/simple",
     "--extra-index-url https://elsewhere.example/simple is not allowed: list it under "
     "pip_extra_index_urls"),
    ("--trusted-host wheels.example.org", "--trusted-host turns off TLS checks"),
    ("-e ../src", "--editable installs from a source tree"),
    ("-r /etc/requirements.txt", "--requirement reads another file"),
    ("-c constraints.txt", "--constraint reads another file"),
    ("--find-links /srv/wheels", "--find-links reads packages from a folder"),
    ("-f=/srv/wheels", "--find-links reads packages"),
    ("--no-index", "--no-index turns off"),
    ("--use-feature=truststore", "--use-feature is not an option an env spec may set"),
    ("torch @ http://wheels.example.org/torch.whl", "is not https or holds credentials"),
    ("git+http://git.example.org/pkg.git", "is not https or holds credentials"),
    # the @ of a URL's user part is not PEP 508's "name @ URL": parsed as a URL, refused
    ("git+ssh://git@host.example/x", "is not https or holds credentials"),
    ("https://user:pw@host.example/t.whl", "is not https or holds credentials"),
    ("pkg @ https://user:pw@host.example/t.whl", "is not https or holds credentials"),
    ("pkg @ git@host.example:x/y.git", "names a source that is not an https URL"),
    ("pkg[extra]@git+ssh://git@host.example/x", "is not https or holds credentials"),
    ("./wheels/torch.whl", "installs from a local path"),
    ("pkg @ file:///srv/pkg.whl", "installs from a local path"),
    # not requirements at all: refused by check and --dry-run, not inside %post
    ("<script>alert(1)</script>", "is not a requirement pip can read"),
    ("foo bar baz", "is not a requirement pip can read"),
    ("numpy===", "is not a requirement pip can read"),
])
def test_pip_options_that_change_package_sources_are_refused(tmp_path: Path, entry: str,
                                                              message: str) -> None:
    spec = _spec(tmp_path, "numpy", entry)
    with pytest.raises(ConfigError) as info:
        load_env_spec(spec).check_pip_options([INDEX])
    assert str(info.value).startswith(f"{spec}:5: dependencies.pip: ")
    assert message in str(info.value)


def test_pip_options_allowed_and_every_refusal_at_once(tmp_path: Path) -> None:
    fine = load_env_spec(_spec(tmp_path, f"--extra-index-url {INDEX}/", f"--extra-index-url={INDEX}",
                               "torch==2.7.1+rocm6.3", "--pre", "--prefer-binary",
                               "numpy==2.1 --hash=sha256:abc", "deepspeed @ https://x.example/d.whl",
                               "pkg; python_version < '3.13'"))
    fine.check_pip_options([INDEX])  # an allowed https index, safe options, https references
    assert fine.requirements_txt().splitlines()[0] == f"--extra-index-url {INDEX}/"  # verbatim
    bad = load_env_spec(_spec(tmp_path, "--trusted-host x", "numpy", "-i https://m.example/s"))
    with pytest.raises(Problems) as info:
        bad.check_pip_options()
    assert [line.split(": ", 2)[0] for line in str(info.value).splitlines()[:2]] == \
        [f"{bad.path}:4", f"{bad.path}:6"]
    assert str(info.value).splitlines()[-1] == "2 problems found"


def test_torch_pin_and_installs(tmp_path: Path) -> None:
    env = load_env_spec(_spec(tmp_path, "--extra-index-url https://x.example/r",
                              "torch==2.5.1+rocm6.2", "DeepSpeed>=0.16"))
    assert env.torch_pin() == ((2, 5), 5)
    assert env.installs("deepspeed") and not env.installs("torchvision")
    assert load_env_spec(_spec(tmp_path, "torch")).torch_pin() is None  # unpinned: unknown
    assert load_env_spec(_spec(tmp_path, "torch>=2.6")).torch_pin() == ((2, 6), 4)


@pytest.mark.parametrize("entry, floor", [
    ("torch==2.7.1+rocm6.3", (2, 7)), ("torch===2.7.1+rocm6.3", (2, 7)), ("Torch==v2.1", (2, 1)),
    ("torch~=2.5.0", (2, 5)), ("torch==2.7.*", (2, 7)), ("pytorch>=2.4", (2, 4)),
    ("torch>=2.4,<2.8", (2, 4)), ("torch<2.8,>=2.4", (2, 4)),  # the old reader saw only the first
    ("torch==2.6.0a0+ecf3bae", (2, 6)), ("torch==2.1.0 --hash=sha256:" + "0" * 64, (2, 1)),
    ("torch<2.8", None), ("torch>=2", None), ("torchvision==0.20.1", None),
])
def test_torch_pin_reads_each_pip_form(tmp_path: Path, entry: str, floor) -> None:
    found = load_env_spec(_spec(tmp_path, entry)).torch_pin()
    assert (found[0] if found else None) == floor


def test_torch_pin_reads_a_conda_pin(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    for entry, floor in [("pytorch=2.5.1=py3.11_cuda", (2, 5)),
                         ("conda-forge::pytorch>=2.1", (2, 1)), ("pytorch==2.3", (2, 3)),
                         ("pytorch", None), ("pytorch=2.*", None)]:
        spec.write_text(f"dependencies:\n  - {entry}\n")
        found = load_env_spec(spec).torch_pin()
        assert (found[0] if found else None) == floor, entry


@pytest.mark.parametrize("entry", ["-e git+https://host.example/x.git#egg=x",
                                   "--editable=git+https://host.example/x.git#egg=x"])
def test_an_editable_vcs_install_is_refused_for_what_it_is(tmp_path: Path, entry: str) -> None:
    """Not "a source tree outside the image" (that is ``-e .``): an editable clone."""
    with pytest.raises(ConfigError) as info:
        load_env_spec(_spec(tmp_path, entry)).check_pip_options()
    assert "is an editable install of a checkout pip clones" in str(info.value)
    assert "source tree outside the image" not in str(info.value)


# --------------------------------------------------------------------- Conda channels, prefix
def _conda(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "env.yml"
    spec.write_text(text + "dependencies:\n  - python=3.11\n")
    return spec


@pytest.mark.parametrize("channel, message", [
    ("http://conda.example.org/main", "is not an https URL without credentials"),
    ("https://user:pw@conda.example.org/main", "is not an https URL without credentials"),
    ("ftp://conda.example.org/main", "is not an https URL without credentials"),
    ("file://otherhost/srv/channel", "is not a folder of the build host"),
])
def test_a_channel_packages_could_be_swapped_on_is_refused(tmp_path: Path, channel: str,
                                                          message: str) -> None:
    spec = _conda(tmp_path, f"channels:\n  - conda-forge\n  - {channel}\n")
    with pytest.raises(ConfigError) as info:
        load_env_spec(spec).check_channels()
    assert str(info.value).startswith(f"{spec}:3: channels: channel {channel!r} ")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_channel_named_in_a_dependency_is_checked_too(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_text("dependencies:\n  - http://conda.example.org/main::numpy\n")
    with pytest.raises(ConfigError, match=r":2: channels: channel 'http://conda.example.org/main'"):
        load_env_spec(spec).check_channels()


def test_named_https_and_local_channels_pass_and_local_ones_are_listed(tmp_path: Path) -> None:
    env = load_env_spec(_conda(tmp_path, "channels:\n  - conda-forge\n  - https://c.example/x\n"
                                         "  - file:///srv/channel\n"))
    env.check_channels()
    assert env.local_channels() == [("file:///srv/channel", 4)]


def test_a_prefix_is_reported_as_ignored(tmp_path: Path) -> None:
    env = load_env_spec(_conda(tmp_path, "prefix: /etc/evil\n"))
    assert str(env.prefix_warning()).startswith(f"{env.path}:1: prefix: is ignored: cotainr ")
    assert load_env_spec(_conda(tmp_path, "")).prefix_warning() is None
