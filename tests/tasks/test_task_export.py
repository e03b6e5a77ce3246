"""JSONL export / read-back and the human-readable display."""

from __future__ import annotations

import numpy as np
import pytest

from posym.errors import PosymError
from posym.tasks import (NUMBER_VOCAB, TaskBatch, export_jsonl, format_examples, generate, make_split,
                         read_jsonl, solve)
from posym.tasks import export as export_mod


@pytest.mark.parametrize("task", ["number", "letter"])
def test_export_roundtrip(task, tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "_EXPORT_CHUNK", 64)  # several chunks
    path = tmp_path / "sub" / f"{task}.jsonl"
    out = export_jsonl(task, "test", 300, path, seed=3, extra_tokens=2)
    assert out == path
    recs = read_jsonl(path)
    b = make_split(task, "test", seed=3, n=300, extra_tokens=2)
    assert len(recs) == 300
    vocab = b.vocab
    for r, rec in enumerate(recs):
        assert set(rec) == {"task", "index", "tokens", "label", "hops", "answer_pos"}
        assert rec["task"] == task and rec["index"] == r
        assert rec["tokens"] == b.tokens(r) and len(rec["tokens"]) == 19
        assert rec["label"] == vocab.tokens[b.labels[r]]
        assert (rec["hops"], rec["answer_pos"]) == (int(b.hops[r]), int(b.answer_pos[r]))
        assert solve(task, rec["tokens"]) == (rec["label"], rec["hops"], rec["answer_pos"])


def test_export_refuses_overwrite(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("keep\n")
    with pytest.raises(PosymError):
        export_jsonl("number", "val", 5, path)
    assert path.read_text() == "keep\n"
    export_jsonl("number", "val", 5, path, force=True)
    assert len(read_jsonl(path)) == 5
    assert not list(tmp_path.glob("*.tmp"))


def test_export_validates_before_writing(tmp_path):
    path = tmp_path / "y.jsonl"
    for kw in [dict(split="dev"), dict(n=10**6), dict(hops=8), dict(extra_tokens=-1), dict(task="nope")]:
        args = dict(task="letter", split="val", n=5) | kw
        with pytest.raises(PosymError):
            export_jsonl(args.pop("task"), args.pop("split"), args.pop("n"), path, **args)
        assert not path.exists()
    with pytest.raises(PosymError):
        read_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(PosymError):
        read_jsonl(bad)


def _spec_number_batch(extra=0):
    toks = "n h n v h y r s 6 3 2 7 7 8 4 7 2".split()
    ids = NUMBER_VOCAB.encode(["a"] * extra + toks)[None, :]
    return TaskBatch(task="number", input_ids=ids, labels=NUMBER_VOCAB.encode(["n"]), hops=np.array([4]),
                     answer_pos=np.array([2 + extra]), index=np.array([0]), extra_tokens=extra)


def test_format_spec_example():
    assert format_examples(_spec_number_batch()) == "n h n v h y r s | 6 3 2 7 7 8 4 7 | 2 -> n (4 hops, answer at 2)"
    assert format_examples(_spec_number_batch(2)).startswith("a a | n h n v h y r s | 6 3 2 7 7 8 4 7 | 2 -> n")


def test_format_examples_generated():
    b = generate("letter", 10, 0, extra_tokens=100)
    text = format_examples(b, k=3)
    lines = text.splitlines()
    assert len(lines) == 3
    for r, line in enumerate(lines):
        assert line.count(" | ") == 3 and "more" in line  # long extra segment abbreviated
        assert line.endswith(f"-> {b.label_token(r)} ({b.hops[r]} hop{'s' if b.hops[r] != 1 else ''}, "
                             f"answer at {b.answer_pos[r]})")
    assert format_examples(b, k=0) == ""


def test_export_ids_round_trip_through_the_vocabulary_file(tmp_path):
    """``data export --ids``: the ids of every record decode, through the vocabulary file written beside
    the export, to its token strings (``<PAD>`` = 0)."""
    import json

    from posym.cli import main
    from posym.runs.layout import vocab_path

    for task in ("number", "letter"):
        out = tmp_path / f"{task}.jsonl"
        assert main(["data", "export", "--task", task, "--n", "20", "--ids", "--out", str(out)]) == 0
        vocab = json.loads(vocab_path(out).read_text())
        assert vocab["<PAD>"] == 0 and sorted(vocab.values()) == list(range(len(vocab)))
        token_of = {i: t for t, i in vocab.items()}
        rows = read_jsonl(out)
        assert len(rows) == 20
        for r in rows:
            assert [token_of[i] for i in r["input_ids"]] == r["tokens"]
            assert token_of[r["label_id"]] == r["label"]


def test_export_without_ids_writes_strings_only(tmp_path):
    out = export_jsonl("number", "val", 3, tmp_path / "x.jsonl")
    assert all("input_ids" not in r for r in read_jsonl(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.jsonl"]


def test_export_to_a_folder_names_the_folder(tmp_path):
    for force in (False, True):
        with pytest.raises(PosymError, match="is a folder; give a file path"):
            export_jsonl("number", "val", 3, tmp_path, force=force)


@pytest.mark.parametrize("ids", [False, True])
def test_the_export_verb_refuses_the_root_folder_in_one_line(ids):
    """``posym data export --out /`` was a ValueError traceback (the vocabulary's name beside "/" is empty)."""
    from posym.verbs.data import export

    with pytest.raises(PosymError, match="/ is a folder; give a file path"):
        export("number", "val", 2, "/", ids=ids)


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    """A write error (here: no space) names the export's path, which the write itself does not."""
    import errno
    import builtins

    real_open = builtins.open

    class Full:
        def __init__(self, *a, **k):
            self.fh = real_open(*a, **k)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def writelines(self, lines):
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(export_mod, "open", Full, raising=False)
    with pytest.raises(OSError) as e:
        export_jsonl("number", "val", 3, tmp_path / "x.jsonl")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "x.jsonl")
    assert not list(tmp_path.iterdir())  # no partial file, no .tmp
