"""``posym lengthgen --intervene``: one row per intervention, length and seed; the `none` rows equal a
plain call; `--resume` keys on the intervention (a new one is added, the others kept, nothing
re-measured); the intervention is really applied past the training length; bad specs are refused
before any work; an older table without the column reads as `none`."""

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.interventions import intervened
from posym.lengthgen.trained import evaluate_length
from posym.model import build_model, model_config, save_model
from posym.runs.resolve import resolve_model
from posym.verbs.lengthgen import lengthgen


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "model"
    cfg = model_config("quick", 137, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32, initializer_range=0.3)
    save_model(build_model(cfg, seed=0).eval(), path)
    return path


def _run(model_dir, out, **kw):
    return lengthgen(model_dir, task="number", grid="0,40", n=6, seeds=2, out=out, progress=False, **kw)


def test_rows_per_intervention_and_none_equals_the_plain_call(model_dir, tmp_path):
    plain = _run(model_dir, tmp_path / "plain.csv").table
    both = _run(model_dir, tmp_path / "both.csv", intervene=["none", "ntk:kappa=8"]).table
    assert list(both["intervention"].unique()) == ["none", "ntk:kappa=8"]
    none = both[both["intervention"] == "none"].drop(columns="intervention").reset_index(drop=True)
    cols = ["extra_tokens", "seed", "acc"] + [f"acc_hop{h}" for h in range(1, 5)]
    pd.testing.assert_frame_equal(none[cols], plain[cols])
    assert set(plain["intervention"]) == {"none"}
    summary = pd.read_csv(tmp_path / "both_summary.csv")
    assert list(summary["intervention"].unique()) == ["none", "ntk:kappa=8"] and len(summary) == 4


def test_the_intervention_acts_past_the_training_length(model_dir):
    """At +40 lengthgen extends the rotary table inside the intervention (evaluate_length): the logits
    equal those with the table extended first and the intervention entered after, and differ from
    the untouched model's."""
    import torch

    from posym.model.gptj import extend_positions
    from posym.tasks import generate

    ids = torch.as_tensor(generate("number", 4, 1_000_000, extra_tokens=40).input_ids)
    model, task, _ = resolve_model(model_dir, task="number")
    with intervened(model, "rope-base:theta=50"), torch.no_grad():
        evaluate_length(model, task, 40, 4, 1_000_000)  # extends the table inside
        inside = model(ids).logits
    model2, _, _ = resolve_model(model_dir, task="number")
    extend_positions(model2, ids.shape[1])
    with torch.no_grad():
        plain = model2(ids).logits
        with intervened(model2, "rope-base:theta=50"):
            first = model2(ids).logits
    assert torch.equal(inside, first) and not torch.allclose(inside, plain, atol=1e-4)


def test_resume_keys_on_the_intervention(model_dir, tmp_path, monkeypatch):
    out = tmp_path / "lg.csv"
    _run(model_dir, out, intervene=["temperature:beta=1"])
    first = pd.read_csv(out)
    calls = []
    import posym.lengthgen.trained as trained
    real = trained.evaluate_length
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    t = _run(model_dir, out, intervene=["interpolate:n_train=17"], resume=True).table
    assert len(calls) == 4  # only the new intervention's points
    assert list(t["intervention"].unique()) == ["temperature:beta=1,n_train=17,floor=1", "interpolate:n_train=17"]
    back = pd.read_csv(out)
    kept = back[back["intervention"] == "temperature:beta=1,n_train=17,floor=1"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first)
    calls.clear()
    _run(model_dir, out, intervene=["temperature:beta=1", "interpolate:n_train=17"], resume=True)
    assert calls == []


def test_rows_of_the_unfloored_temperature_of_an_old_table_are_never_mixed_with_floored_ones(model_dir, tmp_path,
                                                                                             monkeypatch):
    """A table written before the floor holds ``temperature:beta=1,n_train=17`` (measured unfloored):
    resuming renames those rows to what they measured (``…,floor=0``), measures ``temperature:beta=1``
    (now floored) under its own string beside them, and a ``floor=0`` request re-uses them."""
    import posym.lengthgen.trained as trained

    out = tmp_path / "lg.csv"
    first = _run(model_dir, out, intervene=["temperature:beta=1,floor=0"]).table
    old = pd.read_csv(out)
    old["intervention"] = "temperature:beta=1,n_train=17"  # as an older posym wrote it
    old.to_csv(out, index=False)
    t = _run(model_dir, out, intervene=["temperature:beta=1"], resume=True).table
    assert list(t["intervention"].unique()) == ["temperature:beta=1,n_train=17,floor=0",
                                                "temperature:beta=1,n_train=17,floor=1"]
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: pytest.fail("re-measured a kept point"))
    again = _run(model_dir, out, intervene=["temperature:beta=1,floor=0"], resume=True).table
    cols = ["extra_tokens", "seed", "acc"]
    pd.testing.assert_frame_equal(again[again["intervention"].str.endswith("floor=0")][cols].reset_index(drop=True),
                                  first[first["intervention"].str.endswith("floor=0")][cols].reset_index(drop=True))


def test_an_old_table_without_the_column_holds_untouched_rows(model_dir, tmp_path, monkeypatch):
    out = tmp_path / "lg.csv"
    _run(model_dir, out)
    pd.read_csv(out).drop(columns="intervention").to_csv(out, index=False)
    import posym.lengthgen.trained as trained
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: pytest.fail("re-measured a kept point"))
    t = _run(model_dir, out, resume=True).table
    assert set(t["intervention"]) == {"none"} and len(t) == 4


@pytest.mark.parametrize("intervene,layers,msg", [
    (["nope:x=1"], None, "unknown intervention"), (["ntk:kappa=0.5"], None, ">= 1"),
    (["ntk:kappa=2"], [7], "layer 7 out of range"), (["freq-mask:keep=99"], None, "1..16"),
    (["temperature:beta=1,layers=7"], None, "layer"), (["none", "none"], None, "give each once")])
def test_bad_interventions_are_refused_before_any_work(model_dir, tmp_path, intervene, layers, msg):
    out = tmp_path / "lg.csv"
    with pytest.raises(PosymError, match=msg) as e:
        _run(model_dir, out, intervene=intervene, layers=layers)
    assert "\n" not in str(e.value) and not out.exists()


@pytest.mark.parametrize("text", ["temperature:beta=0.5", "interpolate:factor=2", "interpolate:n_train=17",
                                  "ntk:kappa=4", "freq-mask:keep=1+2+3"])
def test_evaluation_under_an_intervention_is_the_plain_forward_under_it(model_dir, text):
    """lengthgen and evaluation use the fast last-token path; under an intervention it must give the
    plain forward's logits under that intervention — also past the training length, where the rotary
    table is extended inside the context (the fast path alone calls neither the model's forward nor the
    last layer's query projection on any row but the last)."""
    import torch

    from posym.model.fast import last_token_logits
    from posym.model.gptj import extend_positions
    from posym.tasks import generate

    model, task, _ = resolve_model(model_dir, task="number")
    ids = torch.as_tensor(generate("number", 3, 1_000_000, extra_tokens=200).input_ids)  # 217 > 128 positions
    other, _, _ = resolve_model(model_dir, task="number")
    with torch.no_grad():
        plain = last_token_logits(extend_positions(other, ids.shape[1]), ids)
        with intervened(model, text):
            extend_positions(model, ids.shape[1])  # as evaluate_length does, inside the context
            fast = last_token_logits(model, ids)
            full = model(ids).logits[:, -1]
        after, want = last_token_logits(model, ids[:, -100:]), last_token_logits(other, ids[:, -100:])
    assert torch.allclose(fast, full, atol=1e-5) and not torch.allclose(fast, plain, atol=1e-4)
    assert torch.equal(after, want) and not hasattr(model, "_posym_full_forward")  # restored: the fast path again


def test_an_interrupted_resume_loses_no_row_of_any_intervention(model_dir, tmp_path, monkeypatch):
    """A resumed call over several interventions saves after each point; killed while measuring the
    first one, the file still holds every row of the others (measured earlier, not yet reached)."""
    out = tmp_path / "lg.csv"
    _run(model_dir, out, intervene=["none", "ntk:kappa=2", "temperature:beta=1"])
    before = pd.read_csv(out)
    import posym.lengthgen.trained as trained
    real, calls = trained.evaluate_length, []

    def dies_on_second_point(*a, **k):
        calls.append(a[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(trained, "evaluate_length", dies_on_second_point)
    with pytest.raises(KeyboardInterrupt):
        lengthgen(model_dir, task="number", grid="0,40,60", n=6, seeds=2, out=out, progress=False, resume=True,
                  intervene=["none", "ntk:kappa=2", "temperature:beta=1"])
    after = pd.read_csv(out)
    key = ["intervention", "extra_tokens", "seed"]
    merged = before.merge(after, on=key, how="left", suffixes=("", "_after"), indicator=True)
    assert (merged["_merge"] == "both").all()  # every earlier row is still there
    assert len(after) == len(before) + 1  # plus the one new point measured before the interruption
