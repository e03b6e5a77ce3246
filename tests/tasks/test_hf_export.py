"""``posym data export --format hf``: the tasks as ``datasets`` folders (issue 38 point 2; SPEC §1, §1.4, §1.5).

The pandas tests read the Parquet files and the card and always run (pyarrow is in ``[dev]``); the
round-trip tests load the folder with ``datasets.load_dataset`` offline (``datasets`` is in ``[dev]``; they
skip without it) and are ``medium`` (importing ``datasets`` takes seconds).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from posym.cli import main
from posym.tasks import SPLITS, make_split
from posym.tasks import hf_export
from posym.tasks.prompts import candidates, make_sample

pytest.importorskip("pyarrow")


def _card(root):
    import yaml

    text = (root / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def _assert_task_split(df: pd.DataFrame, task: str, split: str, n: int, seed: int, extra: int) -> None:
    b = make_split(task, split, seed=seed, n=n, extra_tokens=extra)
    assert len(df) == n
    np.testing.assert_array_equal(np.stack(df["input_ids"].to_numpy()), b.input_ids)
    np.testing.assert_array_equal(df["label_id"].to_numpy(), b.labels)
    np.testing.assert_array_equal(df["hops"].to_numpy(), b.hops)
    np.testing.assert_array_equal(df["answer_pos"].to_numpy(), b.answer_pos)
    np.testing.assert_array_equal(df["index"].to_numpy(), b.index)
    table = b.vocab.token_array()
    assert [list(t) for t in df["tokens"]] == table[b.input_ids].tolist()
    assert df["label"].tolist() == table[b.labels].tolist()
    assert set(df["task"]) == {task}


@pytest.mark.parametrize("task, extra", [("number", 0), ("letter", 0), ("letter", 5)])
def test_task_files_and_card(task, extra, tmp_path, monkeypatch):
    monkeypatch.setattr(hf_export, "_CHUNK", 7)  # several chunks per split
    root = tmp_path / "ds"
    files = hf_export.write_task_dataset(root, task, 30, seed=2, extra_tokens=extra)
    assert sorted(files) == sorted(hf_export.task_files(root))
    for split in SPLITS:
        df = pd.read_parquet(root / hf_export.split_file(split))
        assert list(df.columns) == list(hf_export.TASK_FEATURES)
        _assert_task_split(df, task, split, 30, 2, extra)
    meta, body = _card(root)
    (config,) = meta["configs"]
    assert config["config_name"] == "default"
    assert config["data_files"] == [{"split": s, "path": hf_export.split_file(s)} for s in SPLITS]
    assert [f["name"] for f in meta["dataset_info"]["features"]] == list(hf_export.TASK_FEATURES)
    assert {"name": "tokens", "sequence": "string"} in meta["dataset_info"]["features"]
    assert [(s["name"], s["num_examples"]) for s in meta["dataset_info"]["splits"]] == [(s, 30) for s in SPLITS]
    assert ("SPEC §1.4" if extra else "SPEC §1\"") in body
    assert f"| extra_tokens | `{extra}` |" in body and "| seed | `2` |" in body
    assert '| split_sizes | `{"train": 30, "val": 30, "test": 30}` |' in body
    vocab = json.loads((root / "vocab.json").read_text())
    assert vocab["<PAD>"] == 0 and list(vocab.values()) == list(range(len(vocab)))


def test_split_sizes_are_capped():
    assert hf_export.split_sizes(5_000) == {"train": 5_000, "val": 2_400, "test": 5_000}


def test_prompt_files_and_card(tmp_path):
    root = tmp_path / "llm"
    hf_export.write_prompt_dataset(root, "letter", [12, 30], runs=2, n=3)
    for length in (12, 30):
        df = pd.read_parquet(root / hf_export.split_file(f"L{length}"))
        assert list(df.columns) == list(hf_export.PROMPT_FEATURES)
        samples = [make_sample("letter", length, r, i) for r in range(2) for i in range(3)]
        assert df["sequence"].tolist() == [s.sequence for s in samples]
        assert df["answer"].tolist() == [s.answer for s in samples]
        assert [list(c) for c in df["choices"]] == [candidates(s) for s in samples]
        assert df[["run", "index"]].values.tolist() == [[r, i] for r in range(2) for i in range(3)]
        assert (df["length"] == length).all()
    meta, body = _card(root)
    assert [d["split"] for d in meta["configs"][0]["data_files"]] == ["L12", "L30"]
    assert "SPEC §1.5" in body and "| runs | `2` |" in body


def _load(root, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="datasets is not installed (not in [dev])")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    return datasets.load_dataset(str(root), cache_dir=str(tmp_path / "cache"))


@pytest.mark.medium  # importing datasets takes seconds
@pytest.mark.parametrize("task, extra", [("number", 0), ("letter", 3)])
def test_load_dataset_round_trip(task, extra, tmp_path, monkeypatch):
    root = tmp_path / "ds"
    assert main(["data", "export", "--task", task, "--n", "25", "--seed", "1", "--extra-tokens", str(extra),
                 "--format", "hf", "--out", str(root)]) == 0
    ds = _load(root, tmp_path, monkeypatch)
    assert list(ds) == list(SPLITS)
    for split in SPLITS:
        assert list(ds[split].features) == list(hf_export.TASK_FEATURES)
        _assert_task_split(ds[split].to_pandas(), task, split, 25, 1, extra)


@pytest.mark.medium
def test_load_dataset_round_trip_llm_prompts(tmp_path, monkeypatch):
    root = tmp_path / "llm"
    assert main(["data", "export", "--task", "number", "--format", "hf", "--llm", "--lengths", "12,16",
                 "--runs", "2", "--n", "4", "--out", str(root)]) == 0
    ds = _load(root, tmp_path, monkeypatch)
    assert list(ds) == ["L12", "L16"]
    for length in (12, 16):
        rows = ds[f"L{length}"]
        samples = [make_sample("number", length, r, i) for r in range(2) for i in range(4)]
        assert rows["tokens"] == [list(s.tokens) for s in samples]
        assert rows["answer"] == [s.answer for s in samples]
        assert rows["answer_pos"] == [s.answer_pos for s in samples]


@pytest.mark.parametrize("argv, message", [
    (["--format", "parquet"], "invalid choice: 'parquet'"),
    (["--format", "hf", "--split", "val"], "writes every split"),
    (["--format", "hf", "--llm", "--extra-tokens", "4"], "does not apply to the LLM prompts"),
    (["--format", "hf", "--lengths", "12"], "--lengths goes with --llm"),
    (["--llm"], "go with --format hf"),
    (["--format", "hf", "--n", "0"], "n must be an integer >= 1"),
    (["--format", "hf", "--llm", "--lengths", "0"], "--lengths: values must be >= 1"),
])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["data", "export", "--task", "number", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_existing_output_needs_force(tmp_path, capsys):
    out = tmp_path / "ds"

    def argv(n, dest, *more):
        return ["data", "export", "--task", "letter", "--n", str(n), "--format", "hf", "--out", str(dest), *more]

    assert main(argv(4, out)) == 0
    card = (out / "README.md").read_text()
    assert main(argv(6, out)) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (out / "README.md").read_text() == card
    assert len(pd.read_parquet(out / hf_export.split_file("val"))) == 4
    assert main(argv(6, out, "--force")) == 0
    assert len(pd.read_parquet(out / hf_export.split_file("val"))) == 6
    file = tmp_path / "x.jsonl"
    file.write_text("keep\n")
    assert main(argv(4, file)) == 2
    assert "is a file" in capsys.readouterr().err and file.read_text() == "keep\n"
