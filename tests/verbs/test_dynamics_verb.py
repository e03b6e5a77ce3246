"""posym.verbs.dynamics: purity tables and Fig. 2 written into the run, under the overwrite rule."""

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.verbs.dynamics import dynamics


def _table() -> pd.DataFrame:
    rows = []
    for step, sp0, ss0, sp1, ss1 in [(0, 1.0, 1.0, 1.0, 1.0), (100, 0.97, 0.02, 0.5, 0.5), (200, 0.99, 0.01, 0.01, 0.99)]:
        for layer, sp, ss in [(0, sp0, ss0), (1, sp1, ss1), (2, 0.6, 0.6)]:
            rows.append({"step": step, "layer": layer, "head": 0, "tau": 1e-4, "s_pos": sp, "s_sym": ss,
                         "entropy": 0.5, "n_prompts": 4})
    return pd.DataFrame(rows)


def test_dynamics_writes_table_and_figure(tmp_path):
    _table().to_csv(tmp_path / "scores.csv", index=False)
    pd.DataFrame([{"split": "val", "step": s, "acc": a, "acc_hop1": a, "acc_hop2": a, "acc_hop3": a, "acc_hop4": a}
                  for s, a in [(0, 0.0), (100, 0.5), (200, 1.0)]]).to_csv(tmp_path / "metrics.csv", index=False)
    res = dynamics(tmp_path, gammas=[0.1])
    assert list(res.table["kind"]) == ["positional", "symbolic", "mixed"]
    assert (tmp_path / "purity_gamma0.1.csv").is_file()
    assert (tmp_path / "figures/fig2_gamma0.1.png").stat().st_size > 1000
    assert (tmp_path / "figures/fig2_gamma0.1.pdf").is_file()
    before = (tmp_path / "purity_gamma0.1.csv").read_bytes()
    with pytest.raises(PosymError, match="exists; pass --force"):
        dynamics(tmp_path, gammas=[0.1])
    assert (tmp_path / "purity_gamma0.1.csv").read_bytes() == before
    dynamics(tmp_path, gammas=[0.1], force=True)
    with pytest.raises(PosymError, match="out of range"):
        dynamics(tmp_path, layers=[7], force=True)
    with pytest.raises(PosymError, match="no such run directory"):
        dynamics(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosymError, match="no scores.csv"):
        dynamics(tmp_path / "empty")
    with pytest.raises(PosymError, match="gamma"):
        dynamics(tmp_path, gammas=[5], force=True)


def _trainer_state(path, steps_acc):
    """A hand-written HF ``trainer_state.json`` with evaluation entries at the given steps."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    log = [{"step": s, "loss": 5.0 - s / 100, "learning_rate": 1e-3} for s, _ in steps_acc]
    log += [{"step": s, "eval_loss": 4.0 - a, "eval_accuracy": a, "eval_runtime": 0.5} for s, a in steps_acc]
    path.write_text(json.dumps({"global_step": steps_acc[-1][0], "log_history": log}))


def test_dynamics_of_an_hf_trainer_dir_draws_its_eval_metrics(tmp_path):
    """An HF Trainer output_dir has no metrics.csv: panel A comes from the newest trainer_state.json."""
    _table().to_csv(tmp_path / "scores.csv", index=False)
    _trainer_state(tmp_path / "checkpoint-100" / "trainer_state.json", [(0, 0.0), (100, 0.4)])
    _trainer_state(tmp_path / "checkpoint-200" / "trainer_state.json", [(0, 0.0), (100, 0.4), (200, 0.9)])
    res = dynamics(tmp_path, gammas=[0.1])
    src = res.data["accuracy_source"]
    assert "checkpoint-200" in src and "eval_loss" in src and "eval_accuracy" in src
    assert "left out" not in res.summary
    # output_dir's own trainer_state.json (written by trainer.save_state()) wins over the checkpoints'
    _trainer_state(tmp_path / "trainer_state.json", [(0, 0.0), (200, 0.9)])
    res = dynamics(tmp_path, gammas=[0.1], force=True)
    assert str(tmp_path / "trainer_state.json") in res.data["accuracy_source"]


def test_dynamics_without_any_accuracy_leaves_panel_a_out_and_says_so(tmp_path):
    _table().to_csv(tmp_path / "scores.csv", index=False)
    _trainer_state(tmp_path / "checkpoint-10" / "trainer_state.json", [(10, 0.1)])
    (tmp_path / "checkpoint-10" / "trainer_state.json").write_text('{"log_history": [{"step": 10, "loss": 3.0}]}')
    res = dynamics(tmp_path, gammas=[0.1])
    assert res.data["accuracy_source"].startswith("left out")
    assert "panel A left out" in res.summary and "no metrics.csv" in res.summary
    assert (tmp_path / "figures/fig2_gamma0.1.png").is_file()


def test_dynamics_refuses_scores_of_several_interventions(tmp_path):
    """A scores.csv of two interventions (posym scores --intervene ... twice) is one line, not mixed curves;
    one intervention's table reads as before."""
    t = _table()
    both = pd.concat([t.assign(intervention="none"), t.assign(intervention="temperature:beta=1,n_train=17")])
    both.to_csv(tmp_path / "scores.csv", index=False)
    with pytest.raises(PosymError, match="measured under 2 interventions"):
        dynamics(tmp_path, gammas=[0.1])
    assert not (tmp_path / "purity_gamma0.1.csv").exists()
    t.assign(intervention="none").to_csv(tmp_path / "scores.csv", index=False)
    assert list(dynamics(tmp_path, gammas=[0.1]).table["kind"]) == ["positional", "symbolic", "mixed"]


def test_dynamics_of_one_intervened_table_records_the_intervention(tmp_path):
    """Scores of one non-`none` intervention: the purity tables carry it (the aggregation reads only
    untouched tables), and the summary and figure title say so (issue 34: it was written unrecorded)."""
    _table().assign(intervention="ntk:kappa=4").to_csv(tmp_path / "scores.csv", index=False)
    res = dynamics(tmp_path, gammas=[0.1])
    purity = pd.read_csv(tmp_path / "purity_gamma0.1.csv")
    counts = pd.read_csv(tmp_path / "pure_counts_gamma0.1.csv")
    assert set(purity["intervention"]) == {"ntk:kappa=4"} and set(counts["intervention"]) == {"ntk:kappa=4"}
    assert "measured under the intervention ntk:kappa=4" in res.summary
