"""The package cache builds share: how a plan reaches it (binds, the staged marker, the
debootstrap shim, cotainr's environment), that it never changes an inputs hash, where it is,
whose it may be, and pruning it while builds hold it."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.image import cache as package_cache
from containers.image import cache as cache_module
from containers.image.cache import PackageCache, cache_problem, gather_cache, in_use, prune, usage
from containers.image.plan import plan_build
from tests.fixtures.data import load_targets
from tests.fixtures.disks import Ways
from tests.image.test_plan import data_host


def cached_host(runtime, root: Path, **changes):
    return data_host(runtime, package_cache=PackageCache(root=root / "packages"),
                     debootstrap="/usr/sbin/debootstrap", **changes)


def test_cpu_build_binds_pip_cache_and_stages_its_marker(data_root, data_settings, data_runtime,
                                                         tmp_path: Path) -> None:
    targets = load_targets(data_root)
    with_cache = plan_build(targets, "cpu", settings=data_settings,
                            host=cached_host(data_runtime, tmp_path))
    base, cpu = with_cache.steps
    pip_dir = tmp_path / "packages" / "pip"
    mount = "/var/cache/containers-pip"  # not /mnt, where users bind their own (a channel)
    assert cpu.build_argv[-6:-2] == ["--bind", "/srv/wheels", "--bind", f"{pip_dir}:{mount}"]
    assert cpu.staged[package_cache.PIP_MARKER] == f"{mount}\n"
    # %setup makes the mount point with the host paths', with the cache or without it
    assert f"HOST_PATHS=/srv/wheels:{mount}" in cpu.build_argv
    assert cpu.package_cache is not None and cpu.cache_use.startswith("pip (")
    assert "PATH" not in cpu.env  # localimage: no debootstrap in this build

    shim_dir = data_settings.tmp_dir / f"debian-base-{base.short_hash}" / "bin"
    assert base.links == {str(shim_dir / "debootstrap"): str(package_cache.SHIM)}
    assert base.env["PATH"] == f"{shim_dir}:$PATH"
    assert base.env["CONTAINERS_APT_CACHE"] == str(tmp_path / "packages" / "apt")
    assert base.env["CONTAINERS_DEBOOTSTRAP"] == "/usr/sbin/debootstrap"
    assert "--bind" not in base.build_argv and base.staged == {}
    assert base.cache_use.startswith("debootstrap --cache-dir=")

    without = plan_build(targets, "cpu", settings=data_settings, host=data_host(data_runtime))
    # The cache is host plumbing: the same inputs, hence the same images, either way.
    assert [s.inputs_hash for s in without.steps] == [s.inputs_hash for s in with_cache.steps]
    for step in without.steps:
        assert step.package_cache is None and step.cache_use == ""
        assert package_cache.PIP_MARKER not in step.staged and step.links == {}
        assert "--bind /tmp" not in " ".join(step.build_argv) and "PATH" not in step.env
        assert ":/mnt" not in " ".join(step.build_argv)
    assert f"HOST_PATHS=/srv/wheels:{mount}" in without.steps[-1].build_argv


def test_no_debootstrap_on_the_host_means_no_shim(data_root, data_settings, data_runtime,
                                                  tmp_path: Path) -> None:
    host = replace(cached_host(data_runtime, tmp_path), debootstrap=None)
    base, _ = plan_build(load_targets(data_root), "cpu", settings=data_settings, host=host).steps
    assert base.links == {} and "PATH" not in base.env and base.package_cache is None


@pytest.mark.parametrize("flavour, variable", [("apptainer", "APPTAINER_BIND"),
                                               ("singularity", "SINGULARITY_BIND")])
def test_cotainr_build_carries_pip_cache_through_its_environment(
        flavour, variable, data_root, data_settings, data_runtime, tmp_path: Path) -> None:
    runtime = replace(data_runtime, flavour=flavour, binary=flavour)
    host = cached_host(runtime, tmp_path)
    plan = plan_build(load_targets(data_root), "lumi-rocm", settings=data_settings, host=host)
    step = plan.steps[-1]
    assert step.target.builder == "cotainr"
    # /media: a folder every root has (cotainr's --writable exec cannot make one); not /mnt
    assert step.env[variable] == f"{tmp_path / 'packages' / 'pip'}:/media"
    assert step.env["SINGULARITY_BIND"] == step.env[variable]  # one value: Apptainer warns of two
    assert step.env["PIP_CACHE_DIR"] == "/media/pip"
    assert "not conda's" in step.cache_use
    plain = plan_build(load_targets(data_root), "lumi-rocm", settings=data_settings,
                       host=data_host(runtime)).steps[-1]
    assert variable not in plain.env and "PIP_CACHE_DIR" not in plain.env
    assert plain.inputs_hash == step.inputs_hash


@pytest.mark.parametrize("flavour", ["apptainer", "singularity"])
def test_cotainr_build_keeps_the_users_binds(flavour, data_root, data_settings, data_runtime,
                                             tmp_path: Path) -> None:
    """A user's own bind (cotainr's documented way to reach a local conda channel at /mnt) is
    kept before the cache's, under every name the runtime reads: Apptainer, given both
    APPTAINER_BIND and SINGULARITY_BIND, reads only the first."""
    runtime = replace(data_runtime, flavour=flavour, binary=flavour)
    cache = f"{tmp_path / 'packages' / 'pip'}:/media"
    for environ, users in (({"SINGULARITY_BIND": "/x:/mnt"}, "/x:/mnt"),
                           ({"APPTAINER_BIND": "/a", "SINGULARITY_BIND": "/s"},
                            "/a" if flavour == "apptainer" else "/s")):
        host = cached_host(runtime, tmp_path, environ=environ)
        step = plan_build(load_targets(data_root), "lumi-rocm", settings=data_settings,
                          host=host).steps[-1]
        names = ["APPTAINER_BIND", "SINGULARITY_BIND"] if flavour == "apptainer" \
            else ["SINGULARITY_BIND"]
        assert {k: v for k, v in step.env.items() if k.endswith("_BIND")} == \
            {name: f"{users},{cache}" for name in names}


def test_where_the_cache_is(tmp_path: Path) -> None:
    assert gather_cache(None, use=False) is None
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert gather_cache(None, use=True, environ=xdg).root == (
        tmp_path / "xdg" / "hpc-containers" / "packages")
    relative = {"XDG_CACHE_HOME": "not/absolute", "HOME": str(tmp_path)}
    assert package_cache.default_cache_dir(relative) == (
        Path("~/.cache").expanduser() / "hpc-containers")
    setting = gather_cache(tmp_path / "cache", use=True, environ=xdg)
    assert setting.root == tmp_path / "cache" / "packages"


def test_a_cache_bind_cannot_carry_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^invoke.yaml: containers.cache_dir: the package "
                                          r"cache .*a,b.* holds ','"):
        gather_cache(tmp_path / "a,b", use=True)


def test_a_cache_others_can_write_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "packages"
    (root / "pip").mkdir(parents=True)
    root.chmod(0o700)
    (root / "pip").chmod(0o700)
    assert cache_problem(tmp_path) == ""
    (root / "pip").chmod(0o777)
    assert cache_problem(tmp_path) == (f"{tmp_path} has packages/pip that is writable by its "
                                       "group or others (mode 777)")
    with pytest.raises(ConfigError, match=r"containers.cache_dir: the cache folder .* writable "
                                          r"by its group or others.*--no-cache"):
        gather_cache(tmp_path, use=True)
    (root / "pip").chmod(0o700)
    assert "owned by uid" in cache_problem(tmp_path, uid=os.getuid() + 1)
    (root / "apt").write_text("not a folder")
    assert cache_problem(tmp_path) == f"{tmp_path} has packages/apt that is a file, not a folder"


def test_in_use_makes_private_folders_and_usage_counts_files(tmp_path: Path) -> None:
    cache = PackageCache(root=tmp_path / "packages")
    with in_use(cache):
        for part in package_cache.PARTS:
            assert (cache.root / part).stat().st_mode & 0o777 == 0o700
        (cache.pip / "a").write_bytes(b"x" * 10)
        (cache.apt / "b.deb").write_bytes(b"y" * 5)
        (cache.apt / "link").symlink_to(cache.apt / "b.deb")
    assert usage(cache.root) == (15, 2)  # the lock and the link are not counted
    assert usage(tmp_path / "none") == (0, 0)
    with in_use(None):
        pass


def test_prune_waits_for_a_running_build_then_empties_the_cache(tmp_path: Path) -> None:
    cache = PackageCache(root=tmp_path / "packages")
    waited = threading.Event()
    result: list[tuple[int, int]] = []
    with in_use(cache):
        (cache.pip / "http").mkdir()
        (cache.pip / "http" / "entry").write_bytes(b"z" * 100)
        (cache.apt / "p.deb").write_bytes(b"d" * 20)
        pruner = threading.Thread(target=lambda: result.append(
            prune(cache.root, on_wait=waited.set)))
        pruner.start()
        assert waited.wait(10), "prune did not see the build's shared lock"
        time.sleep(0.2)
        assert not result and (cache.pip / "http" / "entry").exists()  # still waiting
    pruner.join(10)
    assert result == [(120, 2)]
    assert sorted(p.name for p in cache.root.iterdir()) == [package_cache.LOCK]
    assert prune(tmp_path / "never-made") == (0, 0)


def test_debootstrap_shim_runs_the_real_one_with_the_cache(tmp_path: Path) -> None:
    real = tmp_path / "debootstrap"
    real.write_text("#!/bin/sh\necho \"real: $*\"\n")
    real.chmod(0o755)
    env = {**os.environ, "CONTAINERS_APT_CACHE": str(tmp_path / "apt"),
           "CONTAINERS_DEBOOTSTRAP": str(real)}
    done = subprocess.run(["sh", str(package_cache.SHIM), "--variant=minbase", "bookworm", "/r",
                           "http://mirror.example/debian"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"real: --cache-dir={tmp_path / 'apt'} --variant=minbase bookworm /r "
        "http://mirror.example/debian")
    assert (tmp_path / "apt").is_dir()
    missing = subprocess.run(["sh", str(package_cache.SHIM)], capture_output=True, text=True,
                             env={"PATH": os.environ["PATH"]}, timeout=30)
    assert missing.returncode != 0 and "CONTAINERS_APT_CACHE" in missing.stderr


def test_kept_roots_are_keyed_by_the_base_image_content(
        data_root, data_settings, data_runtime, factory_project, tmp_path: Path) -> None:
    """cpu's kept root is named by every input but the env spec, its host folders, and its
    base's sha256, read from the base's record once the base is built: another env spec keeps
    the key, another base image (same inputs, other bytes) or definition changes it."""
    targets = load_targets(data_root)
    host = cached_host(data_runtime, tmp_path)
    cpu = plan_build(targets, "cpu", settings=data_settings, host=host).steps[-1]
    assert cpu.kept_root is not None
    assert f"kept root file systems ({tmp_path / 'packages' / 'roots'})" in cpu.cache_use
    assert cpu.kept_root.base_record == data_settings.images_dir / "debian-base.sif.json"
    assert cpu.kept_root.digest() is None  # the base is not built: no key
    record = cpu.kept_root.base_record
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"sha256": "' + "a" * 64 + '"}')
    key = cpu.kept_root.digest()
    assert key and len(key) == 32
    assert "env" not in cpu.kept_root.parts and "base" not in cpu.kept_root.parts
    assert cpu.kept_root.parts["host_paths"] == list(host.host_paths)
    changed = factory_project()  # the cpu env spec gains a package
    spec = changed / "envs" / "cpu.yml"
    spec.write_text(spec.read_text() + "      - six\n")
    cpu2 = plan_build(load_targets(changed), "cpu", settings=data_settings,
                      host=host).steps[-1]
    assert cpu2.inputs_hash != cpu.inputs_hash and cpu2.kept_root.digest() == key
    record.write_text('{"sha256": "' + "b" * 64 + '"}')
    assert cpu.kept_root.digest() not in (None, key)
    other = replace(cpu.kept_root, parts={**cpu.kept_root.parts, "definition": "x"})
    assert other.digest() != cpu.kept_root.digest()
    record.write_text("{not json")
    assert cpu.kept_root.digest() is None  # unreadable record: a full build, not a crash


#: A definition's final stage as a rebuild from a kept root replays it (cpu.def's).
REPLAYABLE = ('\n%files\n    "{{ BUILD_CONTEXT }}" /opt/build-context\n%post\n    set -eu\n'
              '    sh /opt/build-context/install-python-packages.sh "{{ VENV }}"\n'
              '    rm -rf /opt/build-context\n')


def test_only_a_base_named_by_content_and_a_replayable_post_get_a_kept_root(
        data_root, data_settings, data_runtime, tmp_path: Path) -> None:
    """rocm.def starts from a registry tag: what it names can change, so its root is never
    reused; a digest-pinned From may be, when its %files and %post are what a rebuild replays
    (anything more in them: always a full build)."""
    from containers.image.plan import kept_root_key
    from containers.inputs.definition import parse_definition
    targets = load_targets(data_root)
    host = cached_host(data_runtime, tmp_path)
    rocm = plan_build(targets, "lumi-rocm-def", settings=data_settings, host=host).steps[-1]
    assert rocm.kept_root is None
    assert "no kept root file system (the base, docker rocm/dev-ubuntu-24.04:" in rocm.cache_use
    assert "is not named by content)" in rocm.cache_use
    pinned = "Bootstrap: docker\nFrom: rocm/x@sha256:" + "c" * 64 + "\n"
    key, why = kept_root_key(parse_definition(pinned + REPLAYABLE), {"definition": "d",
                                                                     "env": "e"}, None)
    assert key is not None and why == "" and key.base_record is None and "env" not in key.parts
    more = parse_definition(pinned + REPLAYABLE + "    touch /x\n")
    assert kept_root_key(more, {}, None) == (
        None, "its %post does more than install the env spec into a venv")
    files = parse_definition(pinned + REPLAYABLE.replace("/opt/build-context\n%post",
                                                         "/opt/build-context\n    a /b\n%post"))
    assert kept_root_key(files, {}, None) == (None, "its %files is not the build context alone")
    tagged = parse_definition("Bootstrap: localimage\nFrom: /some/where.sif\n" + REPLAYABLE)
    assert kept_root_key(tagged, {}, tmp_path / "base.sif")[0] is None


# ------------------------------------------------------------- the cache folder itself
@pytest.mark.parametrize("spoil, why", [
    (lambda top: top.chmod(0o777), "writable by its group or others (mode 777)"),
    (lambda top: top.chmod(0o770), "writable by its group or others (mode 770)"),
    (lambda top: os.chown(top, os.getuid() + 1, -1), f"owned by uid {os.getuid() + 1}"),
])
def test_the_cache_folder_itself_is_checked_like_the_folders_below_it(tmp_path: Path, spoil,
                                                                      why) -> None:
    top = tmp_path / "C"
    top.mkdir(mode=0o700)
    spoil(top)
    for use in (True, False):  # --no-cache still hands the folder to Apptainer (its cache)
        with pytest.raises(ConfigError) as refused:
            gather_cache(top, use=use)
        message = str(refused.value)
        assert message.startswith(f"invoke.yaml: containers.cache_dir: the cache folder {top}")
        assert why in message and "\n" not in message
    assert not (top / "packages").exists()


def test_a_cache_folder_that_is_a_link_is_refused_and_nothing_is_made_there(
        tmp_path: Path) -> None:
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir(mode=0o700)
    top = tmp_path / "C"
    top.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=rf"^invoke.yaml: containers.cache_dir: the cache "
                                          rf"folder {top} is a link \(to {elsewhere}\)"):
        gather_cache(top, use=True)
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "real" / "packages").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"has packages that is a link"):
        gather_cache(tmp_path / "real", use=True)
    assert list(elsewhere.iterdir()) == []


def test_a_cache_folder_under_a_folder_anyone_may_rename_in_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "C").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="world-writable without the sticky bit"):
        gather_cache(shared / "C", use=True)
    shared.chmod(0o1777)  # /tmp's mode: only the owner renames an entry
    assert gather_cache(shared / "C", use=True).root == shared / "C" / "packages"


def test_a_cache_through_a_link_someone_else_controls_is_refused(tmp_path: Path) -> None:
    """The cache's root through another user's link in a sticky world-writable folder (they
    could re-point it at a cache of their own): refused; a site's own link is followed."""
    ways = Ways(tmp_path)
    with pytest.raises(ConfigError, match=f"{ways.link / 'C'}: {ways.refusals[ways.link]}"):
        gather_cache(ways.link / "C", use=True)
    ways.untouched()
    assert gather_cache(ways.site / "C", use=True).root == ways.site / "C" / "packages"


def test_a_shared_cache_for_a_group_only_when_set_up_on_purpose(tmp_path: Path) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    top = tmp_path / "C"
    top.mkdir()
    os.chmod(top, 0o770)
    with pytest.raises(ConfigError, match="writable by its group or others"):
        gather_cache(top, use=True)  # no cache_group: a group-writable cache is refused
    with pytest.raises(ConfigError, match=r"set-group-ID .*chmod g\+s"):
        gather_cache(top, use=True, group=group)  # without g+s new files lose the group
    os.chmod(top, 0o2770)
    cache = gather_cache(top, use=True, group=group)
    with in_use(cache):
        for folder in (cache.root, cache.pip, cache.apt):
            info = folder.stat()
            assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o2770, os.getgid())
    os.chmod(cache.pip, 0o2777)
    with pytest.raises(ConfigError, match="writable by others"):
        gather_cache(top, use=True, group=group)
    with pytest.raises(ConfigError, match="containers.cache_group: no group 'no-such-group'"):
        gather_cache(top, use=True, group="no-such-group")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_under_another_users_folder_is_refused(tmp_path: Path) -> None:
    """Its owner may rename what is in it, sticky bit or not."""
    theirs = tmp_path / "theirs"
    (theirs / "C").mkdir(parents=True, mode=0o700)
    theirs.chmod(0o1755)
    os.chown(theirs, 65534, -1)
    with pytest.raises(ConfigError, match=rf"{theirs}, owned by uid 65534 \(who could put"):
        gather_cache(theirs / "C", use=True)
    os.chown(theirs, os.getuid(), -1)
    assert gather_cache(theirs / "C", use=True).root == theirs / "C" / "packages"


def test_a_cache_folder_under_a_group_writable_folder_is_only_the_cache_groups(
        tmp_path: Path) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    project = tmp_path / "project"
    (project / "C").mkdir(parents=True, mode=0o700)
    project.chmod(0o2770)
    with pytest.raises(ConfigError, match=rf"{project}, writable by group {os.getgid()} without "
                                          "the sticky bit"):
        gather_cache(project / "C", use=True)
    (project / "C").chmod(0o2770)  # a group's cache in that group's project folder
    assert gather_cache(project / "C", use=True, group=group) is not None


def test_a_build_does_not_count_the_cache(tmp_path: Path, monkeypatch, data_root,
                                          data_settings, data_runtime) -> None:
    """Neither the plan nor a build walks the cache's files (seconds on a big cache, three times
    a build before): ``invoke cache`` shows its size."""
    walked = []
    monkeypatch.setattr(cache_module, "usage", lambda folder: walked.append(folder) or (0, 0))
    cache = gather_cache(tmp_path / "cache", use=True)
    host = cached_host(data_runtime, tmp_path)
    plan_build(load_targets(data_root), "cpu", settings=data_settings, host=host)
    assert walked == [] and cache.root == tmp_path / "cache" / "packages"
