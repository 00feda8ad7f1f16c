"""runbook.collection_deps (`runbook setup-collections`): a collection unpacked from an ansible
wheel into a site-packages directory, staged then moved in place; members that would land
outside it refused; what is installed left alone. The wheels here are small real zip files laid
out as the `ansible` wheel is (ansible_collections/NS/NAME/…); the real wheel's install is
tests/integration/test_shipped.py's."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runbook import collection_deps
from runbook.collection_deps import CollectionInstallError
from runbook.errors import UsageError

MANIFEST = "ansible_collections/kubernetes/core/MANIFEST.json"


def make_wheel(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def ansible_wheel(tmp_path: Path, version: str = "6.2.0") -> Path:
    return make_wheel(tmp_path / "ansible-12.3.0-py3-none-any.whl", {
        MANIFEST: json.dumps({"collection_info": {"version": version}}),
        "ansible_collections/kubernetes/core/plugins/modules/k8s_drain.py": "# module\n",
        "ansible_collections/community/general/MANIFEST.json": "{}",
        "ansible/__init__.py": "",
    })  # fmt: skip


def test_the_collection_is_unpacked_alone_into_site_packages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (state,) = collection_deps.install(site=site, wheel=ansible_wheel(tmp_path))
    assert (state.name, state.version, state.installed_now) == ("kubernetes.core", "6.2.0", True)
    core = site / "ansible_collections" / "kubernetes" / "core"
    assert state.path == core
    assert (core / "plugins" / "modules" / "k8s_drain.py").read_text() == "# module\n"
    # nothing else of the wheel, and no staging directory left beside it
    assert sorted(p.name for p in (site / "ansible_collections").iterdir()) == ["kubernetes"]
    assert sorted(p.name for p in core.parent.iterdir()) == ["core"]
    assert state.line() == f"kubernetes.core 6.2.0: installed in {core}"


def test_an_installed_collection_is_left_as_it_is(tmp_path: Path) -> None:
    site = tmp_path / "site"
    collection_deps.install(site=site, wheel=ansible_wheel(tmp_path, "6.2.0"))
    (tmp_path / "other").mkdir()
    newer = ansible_wheel(tmp_path / "other", "9.9.9")
    (state,) = collection_deps.install(site=site, wheel=newer)
    assert (state.version, state.installed_now) == ("6.2.0", False)
    assert "already installed" in state.line()


def test_a_broken_copy_without_its_manifest_is_replaced(tmp_path: Path) -> None:
    site = tmp_path / "site"
    broken = site / "ansible_collections" / "kubernetes" / "core"
    broken.mkdir(parents=True)
    (broken / "half-written.py").write_text("")
    assert collection_deps.states(site)[0].version is None
    (state,) = collection_deps.install(site=site, wheel=ansible_wheel(tmp_path))
    assert state.version == "6.2.0"
    assert not (broken / "half-written.py").exists()


@pytest.mark.parametrize("member", [
    "ansible_collections/kubernetes/core/../../../../evil.py",
    "ansible_collections/kubernetes/core/a\\..\\b.py",
])  # fmt: skip
def test_a_member_that_would_land_outside_the_collection_is_refused(
    tmp_path: Path, member: str
) -> None:
    wheel = make_wheel(tmp_path / "ansible-x.whl", {MANIFEST: "{}", member: "boom"})
    with pytest.raises(CollectionInstallError, match="refusing wheel member"):
        collection_deps.install(site=tmp_path / "site", wheel=wheel)
    assert not (tmp_path / "evil.py").exists()
    assert not (tmp_path / "site" / "ansible_collections" / "kubernetes" / "core").exists()


def test_a_wheel_without_the_collection_or_not_a_wheel_is_an_error(tmp_path: Path) -> None:
    empty = make_wheel(tmp_path / "ansible-x.whl", {"ansible/__init__.py": ""})
    with pytest.raises(CollectionInstallError, match=r"no collection kubernetes\.core"):
        collection_deps.install(site=tmp_path / "site", wheel=empty)
    garbage = tmp_path / "ansible-y.whl"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(CollectionInstallError, match="is not a wheel"):
        collection_deps.install(site=tmp_path / "site", wheel=garbage)
    with pytest.raises(UsageError, match="no such wheel"):
        collection_deps.install(site=tmp_path / "site", wheel=tmp_path / "missing.whl")


def runbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runbook", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_command_says_what_is_installed_and_refuses_a_missing_wheel_in_one_line() -> None:
    check = runbook("setup-collections", "--check")
    # this suite's venv has kubernetes.core (tests/run.sh installs it the same way)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("kubernetes.core ")
    assert "already installed in " in check.stdout
    as_json = runbook("setup-collections", "--check", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    (core,) = json.loads(as_json.stdout)["collections"]
    assert (core["name"], core["installed_now"]) == ("kubernetes.core", False)
    assert Path(core["path"], "MANIFEST.json").is_file()
    missing = runbook("setup-collections", "--wheel", "/nonexistent/ansible-1.whl")
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0, missing.stderr
    assert "no such wheel: /nonexistent/ansible-1.whl" in missing.stderr
    assert "Traceback" not in missing.stderr
