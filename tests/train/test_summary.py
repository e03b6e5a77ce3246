import pandas as pd

from posym.train.summary import first_step_reaching, summarize_run


def test_first_step_and_summary(tmp_path):
    rows = [("val", 0, 0.1, 0.2), ("val", 50, 0.5, 0.95), ("val", 100, 0.92, 0.91), ("test", 100, 0.93, 0.97)]
    df = pd.DataFrame([{"split": s, "step": st, "acc": a, "acc_hop1": h1, "acc_hop2": 0.0, "acc_hop3": 0.0,
                        "acc_hop4": 0.0} for s, st, a, h1 in rows])
    df.to_csv(tmp_path / "metrics.csv", index=False)
    assert first_step_reaching(df, "acc") == 100
    assert first_step_reaching(df, "acc_hop1") == 50
    assert first_step_reaching(df, "acc_hop2") is None
    s = summarize_run(tmp_path)
    assert s["test"]["acc"] == 0.93 and s["first_step"]["acc_hop1"] == 50
