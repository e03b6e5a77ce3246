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
