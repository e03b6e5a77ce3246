"""``posym scores --model DIR --text FILE`` / ``--ids FILE``: a researcher's own sequences scored from
the CLI (SPEC §3, docs/llm.md "Scoring your own sequences"): texts tokenized with the model folder's
tokenizer (its start token included), token ids in three line forms, mixed lengths grouped, blocks,
the start-token exclusion, and one-line errors before anything is loaded or written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.errors import PosymError
from posym.heads.scores import scores_blocks_fast, scores_fast
from posym.model import save_model
from posym.tasks.sequences import check_sequences, group_by_length, read_id_sequences, read_text_lines
from family_models import build_family
from tiny_tokenizer import start_token_tokenizer

TEXTS = ["a b c d e", "f g h", "1 2 3 4 5 6 7", "x y z", "b a b a b a"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _tokenizer():
    return start_token_tokenizer()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(folder with a tiny Llama and its tokenizer, the model, the tokenizer)."""
    tok = _tokenizer()
    d = tmp_path_factory.mktemp("models") / "tiny-llama"
    model = build_family("llama", vocab_size=len(tok))
    save_model(model, d)
    tok.save_pretrained(d)
    return d, model, tok


def _one_line_error(capsys) -> str:
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1, err
    return err[0]


def _expected(model, seqs, **kw) -> pd.DataFrame:
    """Each sequence scored alone, as rows per (prompt, layer, head)."""
    frames = []
    for i, s in enumerate(seqs):
        fn = scores_blocks_fast if "blocks" in kw else scores_fast
        df = fn(model, torch.tensor([s]), **kw).to_frame(mean_over_prompts=False)
        frames.append(df.assign(prompt=i))
    return pd.concat(frames, ignore_index=True)


def test_text_is_tokenized_with_the_model_tokenizer_and_equals_ids(llama, tmp_path, capsys):
    d, model, tok = llama
    seqs = [tok(t)["input_ids"] for t in TEXTS]
    assert all(s[0] == tok.bos_token_id for s in seqs) and len({len(s) for s in seqs}) == 4  # mixed lengths
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:2]) + "\n\n" + "\n".join(TEXTS[2:]) + "\n")  # a blank line
    assert main(["scores", "--model", str(d), "--text", str(tmp_path / "texts.txt"), "--per-prompt",
                 "--swap-exclude", "none", "--out", str(tmp_path / "text.csv")]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert f"5 sequences of {tmp_path / 'texts.txt'}, token swaps" in printed and "swap-exclude: none" in printed
    got = pd.read_csv(tmp_path / "text.csv")
    exp = _expected(model, seqs)
    key = ["prompt", "layer", "head", "tau"]
    got, exp = got.sort_values(key, ignore_index=True), exp.sort_values(key, ignore_index=True)
    assert list(got["query_pos"]) == list(exp["query_pos"])  # each sequence's own last token
    # load_llm's attention implementation (sdpa) moves the hidden states by float32 rounding only
    np.testing.assert_allclose(got[["s_pos", "s_sym", "entropy", "swap_mass"]].to_numpy(),
                               exp[["s_pos", "s_sym", "entropy", "swap_mass"]].to_numpy(), atol=1e-5)
    # the same ids given three ways score the same means
    lines = [json.dumps(seqs[0]), json.dumps({"input_ids": seqs[1], "label_id": 3}),
             *(" ".join(map(str, s)) for s in seqs[2:])]
    (tmp_path / "ids.txt").write_text("\n".join(lines) + "\n")
    for src, out in (("--text", "texts.txt"), ("--ids", "ids.txt")):
        assert main(["scores", "--model", str(d), src, str(tmp_path / out), "--out", str(tmp_path / f"{out}.csv")]) == 0
    a, b = pd.read_csv(tmp_path / "texts.txt.csv"), pd.read_csv(tmp_path / "ids.txt.csv")
    pd.testing.assert_frame_equal(a, b)
    assert (a["n_prompts"] == 5).all()
    # a real LLM's own sequences keep the start token out of the swaps by default (docs/llm.md)
    assert "swap-exclude: bos" in capsys.readouterr().out
    unexcluded = pd.read_csv(tmp_path / "text.csv").groupby(["layer", "head", "tau"])["swap_mass"].mean().to_numpy()
    assert (a["swap_mass"].to_numpy() <= unexcluded + 1e-9).all() and (a["swap_mass"].to_numpy() < unexcluded).any()
    excl = _expected(model, seqs, exclude_keys=(0,))
    mean = excl.groupby(["layer", "head", "tau"], as_index=False)[["s_pos", "s_sym"]].mean()
    np.testing.assert_allclose(a[["s_pos", "s_sym"]].to_numpy(), mean[["s_pos", "s_sym"]].to_numpy(), atol=1e-5)


def test_ids_need_no_tokenizer_blocks_and_start_token_exclusion(tmp_path, capsys):
    model = build_family("llama", vocab_size=40)
    d = tmp_path / "bare"
    save_model(model, d)  # no tokenizer: token ids still score
    rng = np.random.default_rng(0)
    seqs = [[1, *rng.integers(3, 40, 12).tolist()] for _ in range(3)] + [[1, *rng.integers(3, 40, 16).tolist()]]
    (tmp_path / "ids.txt").write_text("\n".join(" ".join(map(str, s)) for s in seqs))
    assert main(["scores", "--model", str(d), "--ids", str(tmp_path / "ids.txt"), "--blocks", "4", "--per-prompt",
                 "--swap-exclude", "none", "--out", str(tmp_path / "b.csv")]) == 0, capsys.readouterr().err
    got = pd.read_csv(tmp_path / "b.csv").sort_values(["prompt", "layer", "head"], ignore_index=True)
    exp = _expected(model, seqs, blocks=4).sort_values(["prompt", "layer", "head"], ignore_index=True)
    np.testing.assert_allclose(got[["s_pos", "s_sym"]].to_numpy(), exp[["s_pos", "s_sym"]].to_numpy(), atol=1e-9)
    assert main(["scores", "--model", str(d), "--ids", str(tmp_path / "ids.txt"), "--swap-exclude", "bos",
                 "--per-prompt", "--out", str(tmp_path / "x.csv")]) == 0, capsys.readouterr().err
    assert "swap-exclude: bos" in capsys.readouterr().out
    got = pd.read_csv(tmp_path / "x.csv").sort_values(["prompt", "layer", "head"], ignore_index=True)
    exp = _expected(model, seqs, exclude_keys=(0,)).sort_values(["prompt", "layer", "head"], ignore_index=True)
    np.testing.assert_allclose(got[["s_pos", "s_sym", "swap_mass"]].to_numpy(),
                               exp[["s_pos", "s_sym", "swap_mass"]].to_numpy(), atol=1e-9)
    plain = _expected(model, seqs).sort_values(["prompt", "layer", "head"], ignore_index=True)
    assert not np.allclose(got["swap_mass"], plain["swap_mass"])  # the start token's attention left out


@pytest.mark.parametrize("content, args, message", [
    ("1 2 3 4\n5 6 99 7\n", [], "sequence 2 holds token id 99, outside the model's vocabulary of 40 ids"),
    ("1 2 3 4\n5 six 7\n", [], ":2: 'six' is not a token id"),
    ("[1, 2, 3]\n[4, 5]\n", ["--swap-exclude", "none"], "sequence 2 has 2 token(s); the scores need at least 3"),
    # the default --swap-exclude bos keeps the start token out: 4 tokens, refused before the model loads
    ("[1, 2, 3, 4]\n[4, 5, 6]\n", [], "sequence 2 has 3 token(s); the scores need at least 4 (two swappable keys "
                                      "and the query, and the 1 key(s) --swap-exclude keeps out of the swaps)"),
    ('{"tokens": ["a"]}\n', [], ":1: a JSON object needs an 'input_ids' list"),
    ("[1, 2.5, 3]\n", [], ":1: expected a non-empty list of integer token ids"),
    ("\n\n", [], "holds no sequence"),
    ("1 2 3 4\n", ["--task", "number"], "--text / --ids score one model: give --model MODEL, not --task"),
    ("1 2 3 4\n", ["--swap-exclude", "last"], "unknown --swap-exclude 'last'"),
    ("1 2 3 4 5\n", ["--blocks", "3"], "cannot hold 3 blocks"),
])
def test_ids_errors_are_one_line_and_write_nothing(tmp_path, capsys, content, args, message):
    d = tmp_path / "bare"
    save_model(build_family("llama", vocab_size=40), d)
    (tmp_path / "ids.txt").write_text(content)
    out = tmp_path / "s.csv"
    assert main(["scores", "--model", str(d), "--ids", str(tmp_path / "ids.txt"), *args, "--out", str(out)]) == 2
    assert message in _one_line_error(capsys)
    assert not out.exists()


def test_text_errors_are_one_line(llama, tmp_path, capsys):
    d, _, _ = llama
    bare = tmp_path / "bare"
    save_model(build_family("llama", vocab_size=40), bare)
    (tmp_path / "t.txt").write_text("a b c\n")
    out = tmp_path / "s.csv"
    assert main(["scores", "--model", str(bare), "--text", str(tmp_path / "t.txt"), "--out", str(out)]) == 2
    assert "has no tokenizer, and --text is tokenized with the model's own; give token ids with --ids" in (
        _one_line_error(capsys))
    assert main(["scores", "--model", str(tmp_path / "nope"), "--text", str(tmp_path / "t.txt"), "--out", str(out)]) == 2
    assert "no such model folder" in _one_line_error(capsys)
    assert main(["scores", "--model", str(d), "--text", str(tmp_path / "t.txt"), "--ids", str(tmp_path / "t.txt")]) == 2
    assert "not allowed with argument" in _one_line_error(capsys)
    assert main(["scores", "--series", str(d), "--text", str(tmp_path / "t.txt"), "--out", str(out)]) == 2
    assert "give --model MODEL, not --series" in _one_line_error(capsys)
    (tmp_path / "short.txt").write_text("a b c\nz\n")  # "<s> z": two tokens
    assert main(["scores", "--model", str(d), "--text", str(tmp_path / "short.txt"), "--out", str(out)]) == 2
    assert "sequence 2 has 2 token(s)" in _one_line_error(capsys)
    assert main(["scores", "--model", str(d), "--blocks", "4", "--out", str(out)]) == 2
    assert "--blocks applies to --text / --ids" in _one_line_error(capsys)
    assert not out.exists()


def test_sequence_readers(tmp_path):
    p = tmp_path / "ids.jsonl"
    p.write_text('[5, 6, 7]\n\n{"input_ids": [1, 2, 3, 4]}\n 8 9 10 11 \n')
    seqs = read_id_sequences(p)
    assert seqs == [(5, 6, 7), (1, 2, 3, 4), (8, 9, 10, 11)]
    assert group_by_length(seqs) == {3: [0], 4: [1, 2]}
    (tmp_path / "t.txt").write_text("one text\r\n\n  another  \n")
    assert read_text_lines(tmp_path / "t.txt") == ["one text", "  another  "]
    with pytest.raises(PosymError, match="sequence 1 holds token id -1"):
        check_sequences([(-1, 2, 3)], 10)
    with pytest.raises(PosymError, match="does not exist"):
        read_id_sequences(tmp_path / "nope.txt")
