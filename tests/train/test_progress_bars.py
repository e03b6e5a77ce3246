"""The progress bars of training and posym select name the task (two workers of posym reproduce may test at once)."""

import re

import torch

from posym.train import make_config
from posym.train.select import select_final_model
from posym.verbs.train import train

torch.set_num_threads(1)
TINY = dict(steps=2, eval_every=2, n_val=16, n_test=16, eval_batch_size=16, track_prompts=4, warmup=1,
            checkpoint_every=2, model_overrides=dict(n_layer=1, n_embd=16, n_inner=16, rotary_dim=16))


def _descriptions(err: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"(?:^|[\r\n])([^\r\n|]*?):\s+\d+%\|", err)}


def test_the_test_bars_name_their_task(tmp_path, capsys):
    train(make_config("letter", "quick", **TINY), tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "test letter (16 sequences)" in _descriptions(err), _descriptions(err)
    assert "test evaluation" not in err
    select_final_model(tmp_path / "run", tmp_path / "last", final_model="last", progress=True)
    err = capsys.readouterr().err
    assert "test letter: the last model (step 2)" in _descriptions(err), _descriptions(err)
