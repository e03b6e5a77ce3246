"""The protocol runner with fake models: tables, cache, resume, interrupts, figure."""

from __future__ import annotations

import json
import threading

import matplotlib
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.lengthgen.llm_eval import load_cache, read_llm_table, run_protocol, summarize, table_markdown
from posym.tasks.prompts import solve_sequence

GRID = dict(tasks=("number", "letter"), lengths=(4, 12, 30), runs=3, n=5, progress=False)


class Oracle:
    """Solves every prompt (optionally wrong on number prompts longer than ``fail_above``)."""

    def __init__(self, fail_above: int | None = None, stop_after: int | None = None):
        self.asked: list[str] = []
        self.fail_above, self.stop_after = fail_above, stop_after
        self.lock = threading.Lock()

    def __call__(self, prompts):
        out = []
        for msgs in prompts:
            seq = msgs[-1]["content"]
            with self.lock:
                if self.stop_after is not None and len(self.asked) >= self.stop_after:
                    raise KeyboardInterrupt
                self.asked.append(seq)
            toks = seq.split()
            ans = solve_sequence(toks)
            if self.fail_above is not None and toks[-1].isdigit() and len(toks) - 1 > self.fail_above:
                ans = "?"
            out.append(f"Answer: **{ans.upper()}**." if len(out) % 2 else ans)
        return out


def test_tables_cache_and_rerun(tmp_path):
    oracle = Oracle(fail_above=10)
    res = run_protocol(oracle, "oracle", tmp_path, **GRID, batch_size=4)
    assert res.n_new == 2 * 3 * 3 * 5 and res.n_cached == 0
    t = res.table.set_index(["task", "length"])
    assert t.loc[("letter", 30), "mean"] == 1.0 and t.loc[("number", 4), "mean"] == 1.0
    assert t.loc[("number", 12), "mean"] == 0.0
    assert (res.table["runs"] == 3).all() and (res.table["n"] == 5).all() and (res.table["sd"] == 0).all()
    assert list(res.runs.columns) == ["task", "length", "run", "n", "correct", "accuracy", "intervention"]
    assert (res.runs["intervention"] == "none").all()
    for name in ("llm_runs.csv", "llm_table.csv", "llm_table.md", "llm_eval.json", "answers.jsonl"):
        assert (tmp_path / name).is_file()
    md = (tmp_path / "llm_table.md").read_text()
    assert "| number | 1.00 (0.00) | 0.00 (0.00) | 0.00 (0.00) |" in md and "| task | 4 | 12 | 30 |" in md
    assert read_llm_table(tmp_path)["model"].eq("oracle").all()
    recs = [json.loads(x) for x in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert len(recs) == 90 and {"output", "prediction", "correct", "answer", "digest"} <= set(recs[0])
    # second run: everything from the cache, the model is not asked
    again = Oracle()
    res2 = run_protocol(again, "oracle", tmp_path, **GRID)
    assert again.asked == [] and res2.n_cached == 90 and res2.n_new == 0
    pd.testing.assert_frame_equal(res2.table, res.table)
    # more runs / another model label: only the missing samples are asked
    more = Oracle()
    res3 = run_protocol(more, "oracle", tmp_path, **{**GRID, "runs": 4})
    assert len(more.asked) == 2 * 3 * 5 and res3.n_cached == 90
    other = Oracle()
    run_protocol(other, "other-model", tmp_path, **GRID)
    assert len(other.asked) == 90
    # a changed prompt (fewer worked examples) is a different question
    fewer = Oracle()
    run_protocol(fewer, "oracle", tmp_path, **GRID, n_examples=1)
    assert len(fewer.asked) == 90


def test_interrupt_and_resume_never_repeats(tmp_path):
    first = Oracle(stop_after=23)
    with pytest.raises(KeyboardInterrupt):
        run_protocol(first, "m", tmp_path, **GRID, batch_size=1)
    assert len(load_cache(tmp_path / "answers.jsonl")) == 23
    # a torn last line (killed mid-write) is ignored and does not corrupt the next record
    with open(tmp_path / "answers.jsonl", "a") as f:
        f.write('{"model": "m", "task": "num')
    second = Oracle()
    res = run_protocol(second, "m", tmp_path, **GRID, batch_size=4)
    assert res.n_cached == 23 and res.n_new == 90 - 23
    assert not set(first.asked) & set(second.asked)
    assert len(second.asked) == len(set(second.asked)) == 67
    assert (res.table["mean"] == 1.0).all()
    assert len(load_cache(tmp_path / "answers.jsonl")) == 90


def test_concurrent_interrupt_keeps_finished_answers(tmp_path):
    first = Oracle(stop_after=17)
    with pytest.raises(KeyboardInterrupt):
        run_protocol(first, "m", tmp_path, **GRID, batch_size=1, concurrency=3)
    cached = load_cache(tmp_path / "answers.jsonl")
    assert len(cached) == len(first.asked) == 17
    second = Oracle()
    run_protocol(second, "m", tmp_path, **GRID, batch_size=1, concurrency=3)
    assert not set(first.asked) & set(second.asked) and len(second.asked) == 73


def test_summary_statistics_and_errors(tmp_path):
    recs = [{"task": "number", "length": 8, "run": r, "index": i, "correct": i < k}
            for r, k in enumerate([2, 4, 3]) for i in range(4)]
    runs, table = summarize(recs)
    assert runs["accuracy"].tolist() == [0.5, 1.0, 0.75]
    assert table.loc[0, "mean"] == pytest.approx(0.75) and table.loc[0, "sd"] == pytest.approx(0.25)
    assert "0.75 (0.25)" in table_markdown(table)
    _, single = summarize([r for r in recs if r["run"] == 0])
    assert "| number | 0.50 |" in table_markdown(single)
    with pytest.raises(PosymError):
        run_protocol(Oracle(), "m", tmp_path, tasks=("colour",), lengths=(4,), runs=1, n=1, progress=False)
    with pytest.raises(PosymError):
        run_protocol(Oracle(), "m", tmp_path, lengths=(), runs=1, n=1, progress=False)
    with pytest.raises(PosymError):
        run_protocol(lambda p: [], "m", tmp_path, lengths=(4,), runs=1, n=1, progress=False)
    with pytest.raises(PosymError):
        read_llm_table(tmp_path / "nothing")


def test_figure(tmp_path):
    from posym.report.llm_figures import plot_llm_lengthgen

    run_protocol(Oracle(fail_above=10), "oracle", tmp_path, **GRID)
    table = read_llm_table(tmp_path)
    both = pd.concat([table, table.assign(model="other", mean=table["mean"] / 2)])
    fig = plot_llm_lengthgen(both)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes[0].lines) == 4
    with pytest.raises(PosymError):
        plot_llm_lengthgen(pd.DataFrame({"task": ["number"]}))


# one writer per --out (reliability probe 4, A): two llm eval into one folder left duplicated records ------
def test_a_second_writer_of_one_answers_file_is_refused_and_a_stale_lock_taken_over(tmp_path):
    import os
    import subprocess
    import sys

    from posym.runs.lock import DirLock

    run_protocol(Oracle(), "m", tmp_path, **GRID)
    before = (tmp_path / "answers.jsonl").read_bytes()
    lock = DirLock.for_file(tmp_path / "answers.jsonl", "LLM answers file").path
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"pid": sleeper.pid, "host": os.uname().nodename, "started": 0}))
        asked = Oracle()
        with pytest.raises(PosymError, match=f"LLM answers file .*answers.jsonl is in use by process {sleeper.pid}"):
            run_protocol(asked, "m", tmp_path, **{**GRID, "runs": 4})
        assert asked.asked == [] and (tmp_path / "answers.jsonl").read_bytes() == before
        from posym.lengthgen.llm_eval import llm_eval  # the verb's path: refused before any model loads
        with pytest.raises(PosymError, match="answers.jsonl is in use by process"):
            llm_eval(model=tmp_path / "no-such-model", out=tmp_path, lengths=[4], runs=1, n=1, progress=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    res = run_protocol(Oracle(), "m", tmp_path, **{**GRID, "runs": 4})  # the holder is gone: taken over
    assert res.n_cached == 90 and res.n_new == 30 and not lock.exists()
    assert len((tmp_path / "answers.jsonl").read_text().splitlines()) == 120


def test_resume_keeps_each_answer_once(tmp_path):
    run_protocol(Oracle(), "m", tmp_path, **GRID)
    path = tmp_path / "answers.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    twice = [json.loads(x) for x in lines[:5]]
    with path.open("a") as f:  # what two writers of one folder left: the same answers again (other timings)
        f.writelines(json.dumps({**r, "seconds": r["seconds"] + 1}) + "\n" for r in twice)
    assert len(load_cache(path)) == 90
    again = Oracle()
    res = run_protocol(again, "m", tmp_path, **GRID)
    assert again.asked == [] and res.n_cached == 90
    assert path.read_text().splitlines(keepends=True) == lines  # the repeats are gone from the file
    with path.open("a") as f:  # one sample answered differently: which one counts cannot be told
        f.write(json.dumps({**twice[2], "prediction": "zz", "correct": False}) + "\n")
    with pytest.raises(PosymError, match="lines 3 and 91 answer one sample .* differently"):
        run_protocol(Oracle(), "m", tmp_path, **GRID)


def test_the_llm_eval_verb_holds_the_lock_to_its_last_write(tiny_dirs, tmp_path, monkeypatch):
    import posym.report.llm_figures as figures
    from posym.verbs.llm import llm_eval as llm_eval_verb

    real, held = figures.plot_llm_lengthgen, []
    monkeypatch.setattr(figures, "plot_llm_lengthgen", lambda *a, **k: held.append(
        (tmp_path / "o/.answers.jsonl.lock").is_file()) or real(*a, **k))
    res = llm_eval_verb(model=tiny_dirs["chat"], out=tmp_path / "o", lengths=[4], runs=1, n=2, tasks=["number"],
                        protocol="choice", progress=False)
    assert held == [True] and res.data["result"].n_new == 2  # the inner lock of the same process is re-entered
    assert not (tmp_path / "o/.answers.jsonl.lock").exists() and (tmp_path / "o/figures/llm_lengthgen.png").is_file()
