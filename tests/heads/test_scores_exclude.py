"""Keys kept out of the swaps (docs/spec.md §3, posym's addition for attention sinks): a sink head,
fast = literal re-run with exclusions (tokens, blocks, several query positions), the CLI forms."""

import numpy as np
import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.heads import scores_blocks_fast, scores_blocks_reference, scores_fast, scores_reference, swap_attention
from posym.heads.scores import parse_swap_exclude
from posym.model import build_model, model_config
from posym.tasks import make_split
from head_builders import sink_head, sink_prompts

torch.set_num_threads(1)
TOL = 1e-5
TAUS = (1e-4, 1e-2)


def _same(a, b, names=("s_pos", "s_sym", "entropy", "swap_mass")):
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        assert x.shape == y.shape, n
        assert np.abs(x - y).max() <= TOL, f"{n}: {np.abs(x - y).max():.3g}"


@pytest.fixture(scope="module")
def model():
    return build_model(model_config("quick", 137, n_layer=2), seed=1)


def test_sink_head_reads_symbolic_without_exclusion_and_uninformative_with_it():
    """A head attending only to the start token: with every key swappable (SPEC §3) the α weight goes
    to the swaps moving the start token and attention follows it -> pure symbolic. With key 0 excluded
    no swappable key gets attention (swap_mass ~ 0): the torch cosine of two near-zero vectors is ~0,
    so the head scores (0, 0) and is flagged by its swap_mass, not read as positional or symbolic."""
    m = sink_head()
    ids = sink_prompts(4)
    plain = scores_fast(m, ids)
    assert plain.s_sym.min() > 0.99 and plain.s_pos.max() < 0.01 and plain.swap_mass.min() > 0.99
    excl = scores_fast(m, ids, exclude_keys=(0,))
    assert excl.swap_mass.max() < 1e-12
    assert np.abs(excl.s_sym).max() < 1e-3 and np.abs(excl.s_pos).max() < 1e-3
    assert excl.exclude_keys == (0,) and plain.exclude_keys == ()
    _same(excl, scores_reference(m, ids, exclude_keys=(0,)))


def test_excluded_swaps_are_the_kept_subset_of_all_swaps(model):
    """Excluded keys stay in the softmax: the remaining swaps' D' equal those of the full run."""
    ids = make_split("number", "test", n=2).input_ids
    full = swap_attention(model, ids)
    part = swap_attention(model, ids, exclude_keys=(0, 5))
    keep = ~np.isin(full.pairs, (0, 5)).any(1)
    assert np.array_equal(part.pairs, full.pairs[keep]) and len(part.pairs) == 14 * 13 // 2
    np.testing.assert_array_equal(part.d, full.d)
    np.testing.assert_allclose(part.dp_i, full.dp_i[..., keep], atol=1e-15)
    np.testing.assert_allclose(part.swap_mass, full.d.sum(-1) - full.d[..., [0, 5]].sum(-1), atol=1e-15)


@pytest.mark.parametrize("centred", [False, True])
def test_fast_equals_reference_with_exclusion(model, centred):
    ids = make_split("number", "test", n=3).input_ids
    qp = np.array([16, 11, 16])
    for keys in ((0,), (0, 1, 2), (3, 9)):
        _same(scores_fast(model, ids, taus=TAUS, query_pos=qp, exclude_keys=keys, centred=centred, batch_size=2),
              scores_reference(model, ids, taus=TAUS, query_pos=qp, exclude_keys=keys, centred=centred))


def test_blocks_with_exclusion(model):
    ids = make_split("letter", "test", n=2).input_ids
    f = scores_blocks_fast(model, ids, blocks=4, exclude_keys=(0, 1, 2, 3), taus=TAUS)
    assert f.blocks == {16: ((4, 7), (7, 10), (10, 13), (13, 16))}
    _same(f, scores_blocks_reference(model, ids, blocks=4, exclude_keys=(0, 1, 2, 3), taus=TAUS))
    blocks = [(1, 5), (5, 9), (9, 13)]  # key 0 outside every block: excluding it changes nothing
    _same(scores_blocks_fast(model, ids, blocks=blocks, exclude_keys=(0,)), scores_blocks_fast(model, ids, blocks=blocks))
    with pytest.raises(PosymError, match="holds the excluded key 0"):
        scores_blocks_fast(model, ids, blocks=[(0, 4), (4, 8)], exclude_keys=(0,))
    with pytest.raises(PosymError, match="prefix"):
        scores_blocks_fast(model, ids, blocks=4, exclude_keys=(3,))


def test_exclusion_errors(model):
    ids = make_split("number", "test", n=2).input_ids
    with pytest.raises(PosymError, match="outside the keys"):
        scores_fast(model, ids, exclude_keys=(16,))
    with pytest.raises(PosymError, match="outside the keys"):
        scores_fast(model, ids, query_pos=np.array([16, 8]), exclude_keys=(10,))
    with pytest.raises(PosymError, match="fewer than two keys"):
        scores_fast(model, ids[:, :4], exclude_keys=(0, 1))
    with pytest.raises(PosymError, match="integers"):
        scores_fast(model, ids, exclude_keys=("a",))


def test_parse_swap_exclude():
    assert parse_swap_exclude("none") == ()
    assert parse_swap_exclude("bos") == (0,)
    assert parse_swap_exclude("first:3", np.zeros((2, 17), dtype=int)) == (0, 1, 2)
    for bad in ("first:0", "first:x", "last:2", "sinks"):
        with pytest.raises(PosymError, match="swap-exclude"):
            parse_swap_exclude(bad)
    with pytest.raises(PosymError, match="fewer than two"):
        parse_swap_exclude("first:3", np.zeros((1, 5), dtype=int))


def test_cli_scores_swap_exclude_and_prompts_longer_than_n_positions(tmp_path, capsys):
    """``posym scores --swap-exclude bos`` equals the Python API with ``exclude_keys=(0,)`` and prints the
    setting; the model's learned context (16 positions) is shorter than the 17-token prompts."""
    from posym.cli import main
    from posym.heads.tracking import score_table
    from posym.model import save_model
    from posym.tasks.export import export_jsonl, read_prompt_ids

    model = build_model(model_config("quick", 137, n_layer=2, n_positions=16), seed=3)
    save_model(model, tmp_path / "model")
    prompts = export_jsonl("number", "val", 3, tmp_path / "p.jsonl")
    out = tmp_path / "s.csv"
    argv = ["scores", "--model", str(tmp_path / "model"), "--task", "number", "--prompts", str(prompts),
            "--out", str(out), "--swap-exclude", "bos"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "swap-exclude: bos" in capsys.readouterr().out
    got = pd.read_csv(out)
    ids = read_prompt_ids(prompts, "number")
    assert ids.shape[1] == 17
    ref = score_table(model, ids, exclude_keys=(0,))
    np.testing.assert_allclose(got[["s_pos", "s_sym", "swap_mass"]].to_numpy(),
                               ref[["s_pos", "s_sym", "swap_mass"]].to_numpy(), atol=1e-9)
    plain = score_table(model, ids)
    assert np.abs(plain["s_pos"].to_numpy() - ref["s_pos"].to_numpy()).max() > 1e-6  # the option does something
    argv[argv.index(str(out))] = str(tmp_path / "other.csv")
    assert main(argv[:-1] + ["first:x"]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1 and "swap-exclude" in err[0]


def test_llm_heads_swap_exclude_passes_through():
    """``llm_heads(swap_exclude=...)`` scores with the keys excluded and records the setting; the
    prompts' blocks hold no key 0 or 1, so excluding them leaves the block scores as they were, and a
    form whose keys fall inside a block is refused before any score is written."""
    from posym.heads.llm_heads import llm_heads
    from test_llm_heads import TOK, _llama

    model = _llama()
    kw = dict(tokenizer=TOK, prompts="binding", n=3, n_examples=1, batch_size=3, progress=False)
    plain = llm_heads(model, **kw)
    bos = llm_heads(model, swap_exclude="first:2", **kw)
    assert plain.attrs["meta"]["swap_exclude"] == "none" and bos.attrs["meta"]["swap_exclude"] == "first:2"
    np.testing.assert_array_equal(plain[["s_pos", "s_sym", "block_mass"]].to_numpy(),
                                  bos[["s_pos", "s_sym", "block_mass"]].to_numpy())
    with pytest.raises(PosymError, match="holds the excluded key"):
        llm_heads(model, swap_exclude="first:12", **kw)
    with pytest.raises(PosymError, match="swap-exclude"):
        llm_heads(model, swap_exclude="all", **kw)
