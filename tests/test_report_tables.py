from posym.report.tables import markdown, training_comparison


def test_training_comparison_and_markdown():
    summary = {"test": {"acc": 0.98, "acc_hop1": 1.0, "acc_hop2": 0.99, "acc_hop3": 0.97, "acc_hop4": 0.96},
               "first_step": {"acc": 3000, "acc_hop1": 2000, "acc_hop2": 2500, "acc_hop3": None, "acc_hop4": 3500},
               "val_at": {2000: 0.4}}
    df = training_comparison("number", summary)
    row = df[df["quantity"] == "first step acc_hop1 >= 0.9"].iloc[0]
    assert row["posym"] == 2000 and row["paper"] == 2050
    md = markdown(df)
    assert md.splitlines()[0] == "| quantity | posym | paper |"
    assert "| val acc @ step 2000 | 0.400 | 0.340 |" in md
    assert "| first step acc_hop3 >= 0.9 | — | 3250 |" in md
