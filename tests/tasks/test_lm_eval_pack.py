"""``posym export lm-eval`` without the harness (SPEC §1.5): the files and names, documents equal to the
samples ``posym llm eval`` asks (prompt, choices = candidates, target), the YAML fields the harness reads,
the chance level, and the CLI's one-line refusals (the harness itself: tests/integrations/test_lm_eval_harness.py)."""

from __future__ import annotations

import json

import pytest

from posym.cli import main
from posym.tasks.lm_eval_pack import VARIANTS, group_name, pack_files, task_name
from posym.tasks.prompts import INSTRUCTIONS, build_messages, candidates, make_sample, render_plain, worked_examples
from posym.verbs.export import export_lm_eval


def _yaml(path):
    """The pack's YAML: JSON values, one key a line (plus the !function line of the generate tasks)."""
    out = {}
    for line in path.read_text().splitlines():
        key, value = line.split(": ", 1)
        out[key] = value if value.startswith("!function") else json.loads(value)
    return out


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    out = tmp_path_factory.mktemp("pack")
    res = export_lm_eval(out, lengths=(4, 12), runs=2, n=3)
    return out, res


def test_files_and_names(pack):
    out, res = pack
    assert sorted(res.files) == sorted(p.resolve() for p in pack_files(out, ("number", "letter"), (4, 12)))
    assert task_name("letter", 32) == "posym_letter_1hop_L32" and group_name("number", "_gen") == "posym_number_1hop_gen"
    for t in ("number", "letter"):
        for v in VARIANTS:
            g = _yaml(out / f"{group_name(t, v)}.yaml")
            assert g["task"] == [task_name(t, 4, v), task_name(t, 12, v)]
            assert g["aggregate_metric_list"][0]["metric"] == ("exact_match" if v.endswith("_gen") else "acc")
    assert "lm_eval --model hf" in res.summary


def test_documents_are_posyms_samples(pack):
    out, _ = pack
    docs = [json.loads(line) for line in (out / "data" / "letter_L12.jsonl").read_text().splitlines()]
    assert [(d["run"], d["index"]) for d in docs] == [(r, i) for r in range(2) for i in range(3)]
    for d in docs:
        s = make_sample("letter", 12, d["run"], d["index"])
        assert d["sequence"] == s.sequence and d["choices"] == candidates(s)
        assert d["choices"][d["answer_index"]] == d["answer"] == s.answer
        assert d["prompt"] == render_plain(build_messages(s))
    y = _yaml(out / "posym_letter_1hop_L12.yaml")
    assert y["output_type"] == "multiple_choice" and y["doc_to_choice"] == "choices" and y["target_delimiter"] == " "
    assert y["dataset_kwargs"]["data_files"]["test"] == str((out / "data" / "letter_L12.jsonl").resolve())
    assert y["metadata"]["chance"] == pytest.approx(sum(1 / len(d["choices"]) for d in docs) / len(docs), abs=1e-6)


def test_chat_and_generate_yaml(pack):
    out, _ = pack
    chat = _yaml(out / "posym_number_1hop_chat_L4.yaml")
    assert chat["description"] == INSTRUCTIONS["number"] and chat["num_fewshot"] == 3
    assert [(s["sequence"], s["answer"]) for s in chat["fewshot_config"]["samples"]] == worked_examples("number", 3)
    gen = _yaml(out / "posym_number_1hop_gen_L4.yaml")
    assert gen["output_type"] == "generate_until" and gen["process_results"] == "!function posym_lm_eval.process_results"
    assert gen["generation_kwargs"] == {"until": [], "max_gen_toks": 8, "do_sample": False}
    ns: dict = {}
    exec((out / "posym_lm_eval.py").read_text(), ns)
    assert ns["process_results"]({"answer": "c2"}, ["**C2**, because"]) == {"exact_match": 1.0}
    assert ns["process_results"]({"answer": "c2"}, ["c3"]) == {"exact_match": 0.0}


def test_cli_refuses_in_one_line_and_needs_force(tmp_path, capsys):
    assert main(["export", "lm-eval", "--out", str(tmp_path), "--lengths", "4", "--n", "2", "--runs", "1"]) == 0
    assert main(["export", "lm-eval", "--out", str(tmp_path), "--lengths", "4", "--n", "2", "--runs", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["export", "lm-eval", "--out", str(tmp_path), "--lengths", "4", "--n", "2", "--runs", "1", "--force"]) == 0
    assert main(["export", "lm-eval", "--out", str(tmp_path / "x"), "--lengths", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "x").exists()
