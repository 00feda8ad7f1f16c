"""The bundles under tests/bundles are stored once (tests/tools/bundles.py): the files most
synthetic bundles share live in _base, each such bundle keeps only its own files and an
overlay.yaml naming its base. Composed, every bundle must be exactly the evidence recorded in
tests/bundles/_composed.sha256 (file set, bytes and modes: the digests of the bundles as they
were before the shared files moved to _base), so a change to a shared file cannot silently
change the bundles built on it, nor an edit a real-* bundle's verbatim output; the verdicts of
the composed bundles are held to each bundle's expected.yaml by test_bundle_corpus.py."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.tools import bundles

NAMES = bundles.names()
OVERLAYS = [n for n in NAMES if bundles.overlay(n) is not None]
REWRITE = "python -m tests.tools.bundles digests > tests/bundles/_composed.sha256"


def test_every_bundle_has_a_recorded_digest_and_every_digest_a_bundle() -> None:
    recorded = bundles.recorded_digests()
    assert sorted(recorded) == NAMES, f"after adding or removing a bundle: {REWRITE}"


@pytest.mark.parametrize("name", NAMES)
def test_the_composed_bundle_is_the_recorded_evidence(name: str) -> None:
    composed = bundles.path(name)
    assert bundles.evidence_digest(composed) == bundles.recorded_digests()[name], (
        f"{name} composes to other files, bytes or modes than recorded; if that change is "
        f"meant (and no real-* bundle's verbatim output changed), review it and run: {REWRITE}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_fresh_copy_is_the_shared_copy_file_for_file(name: str, tmp_path: Path) -> None:
    fresh = bundles.materialize(name, tmp_path / name)

    assert bundles.tree_digest(fresh) == bundles.tree_digest(bundles.path(name))
    assert not (fresh / bundles.MANIFEST).exists()
    for relative, source in bundles.sources(name).items():
        copied = fresh / relative
        assert copied.read_bytes() == source.read_bytes(), relative
        assert os.stat(copied).st_mode & 0o7777 == os.stat(source).st_mode & 0o7777, relative


def test_the_synthetic_bundles_are_overlays_and_the_real_ones_plain_directories() -> None:
    assert "healthy" in OVERLAYS and len(OVERLAYS) >= 20
    real = [n for n in NAMES if n.startswith("real-")]
    assert real and not set(real) & set(OVERLAYS)
    assert not [n for n in NAMES if n.startswith("_")]


@pytest.mark.parametrize("name", OVERLAYS)
def test_an_overlay_keeps_only_what_differs_from_its_base(name: str) -> None:
    """No file of an overlay repeats its base's file byte for byte (the copy belongs in the
    base), and everything it leaves out is there to be left out."""
    manifest = bundles.overlay(name)
    assert manifest is not None
    base = bundles.sources(manifest.base)
    own = {
        p.relative_to(bundles.SOURCE / name).as_posix(): p
        for p in (bundles.SOURCE / name).rglob("*")
        if p.is_file() and p.name != bundles.MANIFEST
    }
    repeated = [r for r, p in own.items() if r in base and base[r].read_bytes() == p.read_bytes()]
    assert repeated == [], f"{name} repeats {manifest.base}: delete these from {name}/"
    assert len(set(manifest.without)) == len(manifest.without)
    assert not set(manifest.without) & set(own), "a file both left out and given"
    assert "expected.yaml" in own, "every bundle states the verdict it must give"


def test_every_shared_file_is_used_by_several_bundles() -> None:
    """_base holds what bundles share: a file no more than one bundle takes from it belongs in
    that bundle."""
    takers: Counter[str] = Counter()
    shared = bundles.sources("_base")
    for name in NAMES:
        for relative, source in bundles.sources(name).items():
            if source == shared.get(relative):
                takers[relative] += 1
    assert sorted(r for r in shared if takers[r] < 2) == []


def test_a_bad_overlay_is_refused_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "_base").mkdir()
    (tmp_path / "_base" / "a.txt").write_text("a\n")
    for name, manifest in {
        "cycle-a": "base: cycle-b\n",
        "cycle-b": "base: cycle-a\n",
        "stale": "base: _base\nwithout: [b.txt]\n",
        "nowhere": "base: _gone\n",
        "typo": "base: _base\nwithuot: [a.txt]\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / bundles.MANIFEST).write_text(manifest)
    monkeypatch.setattr(bundles, "SOURCE", tmp_path)

    with pytest.raises(ValueError, match="overlay cycle: cycle-a -> cycle-b -> cycle-a"):
        bundles.sources("cycle-a")
    with pytest.raises(ValueError, match=r"without: 'b\.txt' is not a file of _base"):
        bundles.sources("stale")
    with pytest.raises(ValueError, match=r"no bundle directory .*_gone \(the base of nowhere\)"):
        bundles.sources("nowhere")
    with pytest.raises(ValueError, match=r"unknown keys \['withuot'\]"):
        bundles.sources("typo")
    with pytest.raises(FileExistsError):
        bundles.materialize("stale", tmp_path / "_base")
