"""The log-likelihood ("choice") protocol (SPEC §1.5, Paper A Table 3): candidate formatting, the
cached batched scorer against the cache-free reference on a tiny random Llama (``tiny_dirs`` in
conftest.py), chance levels, cache keys shared with the generate protocol, the CLI flag."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.lengthgen.hf_llm import HFChoice, answer_continuations
from posym.lengthgen.llm_eval import (
    _check_context,
    default_llm_out,
    load_cache,
    run_protocol,
    summarize,
    table_markdown,
)
from posym.model.llm import load_llm
from posym.tasks.prompts import (
    PromptSample,
    build_messages,
    candidates,
    sample_chance_level,
    make_sample,
    solve_sequence,
)

GRID = dict(tasks=("number", "letter"), lengths=(4, 12, 30), runs=2, n=4, progress=False)


class OracleScorer:
    """Scores the solution of every prompt highest (0), every other candidate -1."""

    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, prompts, answers):
        out = []
        for msgs, cands in zip(prompts, answers):
            self.asked.append(msgs[-1]["content"])
            ans = solve_sequence(msgs[-1]["content"])
            out.append([0.0 if c == ans else -1.0 for c in cands])
        return out


def _prompts(samples, extra=()):
    return [build_messages(s) for s in samples], [candidates(s) + list(extra) for s in samples]


@pytest.mark.parametrize("flavour", ["chat", "plain", "nosys"])
def test_candidate_continuations(tiny_dirs, flavour):
    _, tok = load_llm(tiny_dirs[flavour])
    msgs = build_messages(make_sample("letter", 8, 0, 0))
    got = answer_continuations(tok, msgs, ["c2", "a b"])
    # the answer as the worked examples' answers start (after "Output:" in the plain rendering)
    assert got == ([" c2", " a b"] if flavour == "plain" else ["c2", "a b"])


@pytest.mark.parametrize("flavour", ["chat", "plain"])
def test_cached_batched_scores_equal_reference(tiny_dirs, flavour):
    lm, tok = load_llm(tiny_dirs[flavour])
    samples = [make_sample("number", 6, 0, 0), make_sample("letter", 20, 1, 3), make_sample("number", 40, 2, 1)]
    # candidates of 1 to 3 tokens; "a b c" and "a b d" share their input row ("a b")
    prompts, cands = _prompts(samples, extra=("a b c", "a b d", "a b", "x y"))
    scorer = HFChoice(lm, tok)
    fast, ref = scorer(prompts, cands), scorer.reference(prompts, cands)
    chunked = HFChoice(lm, tok, max_cache_bytes=1)(prompts, cands)  # one candidate per forward
    assert [len(r) for r in fast] == [len(c) for c in cands]
    for f, r, c in zip(fast, ref, chunked):
        assert f == pytest.approx(r, abs=1e-4) and f == pytest.approx(c, abs=1e-5)
        assert all(x < 0 for x in f) and len(set(f)) > 1  # real log-probs that depend on the candidate
    prompt, conts = scorer.encode(prompts[0], cands[0])
    assert len({len(c) for c in conts}) == 3  # padding really exercised


def test_chance_level_of_a_hand_made_sample_and_tables():
    s = PromptSample("number", 5, 0, 0, ("b", "a", "b", "c", "a", "3"), "b", 2)
    assert candidates(s) == ["b", "a", "c"] and sample_chance_level(s) == pytest.approx(1 / 3)
    recs = [{"task": "number", "length": 5, "run": r, "index": i, "correct": c, "chance": ch}
            for r, i, c, ch in ((0, 0, True, 1 / 3), (0, 1, False, 1 / 5), (1, 0, True, 1 / 2), (1, 1, True, 1 / 4))]
    runs, table = summarize(recs)
    assert runs["chance"].tolist() == pytest.approx([(1 / 3 + 1 / 5) / 2, (1 / 2 + 1 / 4) / 2])
    assert table.loc[0, "chance"] == pytest.approx((1 / 3 + 1 / 5 + 1 / 2 + 1 / 4) / 4)
    assert table.loc[0, "mean"] == pytest.approx(0.75)
    md = table_markdown(table)
    assert "| number | 0.75 (0.35) |" in md and "| number chance | 0.32 |" in md and "chance = mean" in md
    assert "chance" not in summarize([{k: v for k, v in r.items() if k != "chance"} for r in recs])[1]


def test_choice_protocol_records_and_chance(tmp_path):
    oracle = OracleScorer()
    res = run_protocol(oracle, "m", tmp_path, **GRID, protocol="choice", batch_size=3)
    assert res.protocol == "choice" and res.n_new == 2 * 3 * 2 * 4 and (res.table["mean"] == 1.0).all()
    for (task, length), g in res.table.groupby(["task", "length"]):
        expect = sum(sample_chance_level(make_sample(task, length, r, i)) for r in range(2) for i in range(4)) / 8
        assert g["chance"].iloc[0] == pytest.approx(expect)
    t = pd.read_csv(tmp_path / "llm_table.csv")
    assert {"chance", "protocol", "model"} <= set(t.columns) and (t["protocol"] == "choice").all()
    assert "chance" in pd.read_csv(tmp_path / "llm_runs.csv").columns
    assert "m — choice protocol" in (tmp_path / "llm_table.md").read_text()
    rec = json.loads((tmp_path / "answers.jsonl").read_text().splitlines()[0])
    assert rec["protocol"] == "choice" and rec["target_rank"] == 1 and rec["correct"]
    assert len(rec["logprobs"]) == rec["n_candidates"] and rec["chance"] == pytest.approx(1 / rec["n_candidates"])
    # ties go to the first candidate in window order; a wrong number of scores is refused
    flat = run_protocol(lambda p, a: [[0.0] * len(c) for c in a], "flat", tmp_path / "flat", **GRID,
                        protocol="choice")
    recs = load_cache(tmp_path / "flat" / "answers.jsonl").values()
    assert all(r["prediction"] == candidates(make_sample(r["task"], r["length"], r["run"], r["index"]))[0]
               for r in recs)
    assert flat.table["mean"].between(0, 1).all()
    with pytest.raises(PosymError, match="log-probs for"):
        run_protocol(lambda p, a: [[0.0] for _ in a], "short", tmp_path / "bad", **GRID, protocol="choice")
    with pytest.raises(PosymError, match="unknown protocol"):
        run_protocol(oracle, "m", tmp_path, **GRID, protocol="vote")


def test_cache_keys_of_the_two_protocols_do_not_collide(tmp_path):
    asked: list[str] = []

    def generate(prompts):
        asked.extend(m[-1]["content"] for m in prompts)
        return [solve_sequence(m[-1]["content"]) for m in prompts]

    run_protocol(generate, "m", tmp_path / "g", **GRID)
    # the tables of one folder have one protocol (check_out): the choice run gets the generate cache copied
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "answers.jsonl").write_bytes((tmp_path / "g" / "answers.jsonl").read_bytes())
    tmp_path = tmp_path / "c"
    choice = OracleScorer()
    run_protocol(choice, "m", tmp_path, **GRID, protocol="choice")
    assert len(asked) == len(choice.asked) == 48  # the choice protocol reuses nothing of generate
    assert len(load_cache(tmp_path / "answers.jsonl")) == 96
    again = OracleScorer()
    res = run_protocol(again, "m", tmp_path, **GRID, protocol="choice")
    assert again.asked == [] and res.n_cached == 48 and "chance" in res.table
    with pytest.raises(PosymError, match="holds the tables of the choice protocol"):
        run_protocol(generate, "m", tmp_path, **GRID)
    # an answers.jsonl written before protocols existed (records without one) stays a generate cache
    lines = [json.loads(x) for x in (tmp_path / "answers.jsonl").read_text().splitlines()]
    old = tmp_path / "old"
    old.mkdir()
    (old / "answers.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "protocol"}) + "\n"
                                               for r in lines if r["protocol"] == "generate"))
    asked.clear()
    res = run_protocol(generate, "m", old, **GRID)
    assert asked == [] and res.n_cached == 48 and "chance" not in res.table
    assert set(k[0] for k in load_cache(tmp_path / "answers.jsonl")) == {"generate", "choice"}


def test_context_check_covers_the_longest_candidate(tiny_dirs, monkeypatch):
    import importlib

    from posym.lengthgen.hf_llm import HFChat

    mod = importlib.import_module("posym.lengthgen.llm_eval")  # the module (the package exports the function)

    lm, tok = load_llm(tiny_dirs["chat"])
    scorer = HFChoice(lm, tok)
    sample = make_sample("letter", 8, 0, 0)
    prompt, conts = scorer.encode(build_messages(sample), candidates(sample))
    assert {len(c) for c in conts} == {1}  # "c3": one word of the tiny tokenizer
    lm.config.max_position_embeddings = len(prompt) + 3
    _check_context(HFChat(lm, tok), lm, ("letter",), (8,), 3, 3)  # the prompt + 3 new tokens fit
    _check_context(scorer, lm, ("letter",), (8,), 3, 8, "choice")  # max_new_tokens plays no part
    monkeypatch.setattr(mod, "candidates", lambda s: ["c3", "a b c d"])  # a 4-token candidate
    with pytest.raises(PosymError, match="context of"):
        _check_context(scorer, lm, ("letter",), (8,), 3, 1, "choice")


def test_cli_choice_protocol_end_to_end(tiny_dirs, tmp_path, capsys, monkeypatch):
    from posym.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["llm", "eval", "--model", str(tiny_dirs["chat"]), "--lengths", "4,8", "--runs", "1", "--n", "2",
            "--quiet", "--threads", "1"]
    assert main([*args, "--protocol", "choice"]) in (0, None)
    out = default_llm_out(str(tiny_dirs["chat"].resolve()), "choice")
    assert out.name == "chat-choice" and (tmp_path / out).is_dir()
    text = capsys.readouterr().out
    assert "choice protocol" in text and "| number chance |" in text
    t = pd.read_csv(tmp_path / out / "llm_table.csv")
    assert (t["protocol"] == "choice").all() and t["chance"].between(0, 1).all() and len(t) == 4
    recs = list(load_cache(tmp_path / out / "answers.jsonl").values())
    assert len(recs) == 8 and all(r["protocol"] == "choice" and r["prediction"] in r["logprobs"] for r in recs)
    assert (tmp_path / out / "figures" / "llm_lengthgen.png").is_file()
    meta = json.loads((tmp_path / out / "llm_eval.json").read_text())
    assert meta["protocol"] == "choice" and meta["n_new"] == 8
    # the generate protocol of the same model goes to its own folder; rerunning choice asks nothing
    assert main(args) in (0, None)
    assert (tmp_path / default_llm_out(str(tiny_dirs["chat"].resolve())) / "answers.jsonl").is_file()
    assert main([*args, "--protocol", "choice"]) in (0, None)
    assert "0 answered, 8 from cache" in capsys.readouterr().out


@pytest.mark.parametrize("first, second", [("choice", "generate"), ("generate", "choice")])
def test_other_protocol_tables_are_refused_not_replaced(first, second, tiny_dirs, tmp_path, capsys):
    """One --out for both protocols: the second call is refused in one line and nothing there changes."""
    from posym.cli import main

    out = tmp_path / "shared"
    args = ["llm", "eval", "--model", str(tiny_dirs["chat"]), "--lengths", "4", "--runs", "1", "--n", "2",
            "--tasks", "number", "--quiet", "--threads", "1", "--out", str(out)]
    assert main([*args, "--protocol", first]) == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*args, "--protocol", second]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"holds the tables of the {first} protocol" in err, err
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert main([*args, "--protocol", first]) == 0  # the same protocol again is a rerun from the cache
