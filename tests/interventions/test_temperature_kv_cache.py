"""The temperature under a KV cache and padding (:mod:`posym.interventions.positions`): ``n`` is the number of
keys a query attends — the running sum of the 2-D padding mask, or the cache's length plus the token index
plus 1 — so a cached step, a chunk after a cache, a left-padded row (as ``generate`` passes it) and a cached
left-padded step all equal the full forward without padding, on every temperature family, for all heads and
for a head selection; the key counts are not position ids (randomized positions have gaps); a call that
hides the padding is refused in one line."""

from __future__ import annotations

import pytest
import torch

from posym.errors import PosymError
from posym.interventions import intervened, parse_intervention
from posym.interventions.positions import ForwardPositions

from family_models import intervention_models


MODELS = intervention_models()
#: n_train = 3 so that the floored law changes every query past the third key
SPECS = ("temperature:beta=1,n_train=3", "temperature:beta=1,n_train=3,heads=L0H1+L1H0",
         "temperature:beta=0.5,n_train=3,floor=0", "temperature:form=ssmax,beta=0.4")


def _ids(T=10, B=2, seed=1):
    return torch.randint(1, 31, (B, T), generator=torch.Generator().manual_seed(seed))


def _cache(out):
    return out.past_key_values


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_cached_steps_and_chunks_equal_the_full_forward(name, spec):
    model, ids = MODELS[name](), _ids()
    assert parse_intervention(spec).exact_under_kv_cache
    with torch.no_grad():
        plain = model(ids).logits
    with intervened(model, spec), torch.no_grad():
        full = model(ids).logits
        step = model(ids[:, -1:], past_key_values=_cache(model(ids[:, :-1], use_cache=True)), use_cache=True).logits
        chunk = model(ids[:, 6:], past_key_values=_cache(model(ids[:, :6], use_cache=True)), use_cache=True).logits
    assert not torch.allclose(full[:, -1], plain[:, -1], atol=1e-4)  # the temperature acts
    assert torch.allclose(full[:, -1], step[:, -1], atol=1e-5)
    assert torch.allclose(full[:, 6:], chunk, atol=1e-5)


@pytest.mark.parametrize("name", ("llama", "gemma3_text", "gpt_neox"))
def test_left_padding_and_a_cached_padded_step_equal_the_unpadded_row(name):
    """A left-padded batch with its mask and position ids (what ``generate`` passes), then one cached step
    with the extended mask, equals each row's own unpadded forward."""
    model = MODELS[name]()
    a, b = _ids(T=9, B=1, seed=2), _ids(T=6, B=1, seed=3)
    pad = torch.zeros(1, 3, dtype=a.dtype)
    batch = torch.cat((a, torch.cat((pad, b), dim=1)))
    mask = torch.cat((torch.ones(1, 9, dtype=torch.long), torch.cat((torch.zeros(1, 3, dtype=torch.long),
                                                                    torch.ones(1, 6, dtype=torch.long)), dim=1)))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    nxt = torch.tensor([[5], [7]])
    with intervened(model, "temperature:beta=1,n_train=3"), torch.no_grad():
        want_a, want_b = model(a).logits[:, -1], model(b).logits[:, -1]
        out = model(batch, attention_mask=mask, position_ids=pos, use_cache=True)
        mask2 = torch.cat((mask, torch.ones(2, 1, dtype=torch.long)), dim=1)
        step = model(nxt, attention_mask=mask2, position_ids=pos[:, -1:] + 1, past_key_values=out.past_key_values,
                     use_cache=True).logits[:, -1]
        want_a2 = model(torch.cat((a, nxt[:1]), dim=1)).logits[:, -1]
        want_b2 = model(torch.cat((b, nxt[1:]), dim=1)).logits[:, -1]
    assert torch.isfinite(out.logits).all()
    assert torch.allclose(out.logits[0, -1], want_a[0], atol=1e-5) and torch.allclose(out.logits[1, -1], want_b[0], atol=1e-5)
    assert torch.allclose(step[0], want_a2[0], atol=1e-5) and torch.allclose(step[1], want_b2[0], atol=1e-5)


def test_key_counts_are_not_position_ids():
    """Randomized positions (gaps) keep n = token index + 1; a mask, a cache offset and both are read."""
    model = MODELS["gptj"]()
    track = ForwardPositions(model, "temperature")
    ids = _ids(T=5, B=1)
    track._forward(model, (), {"input_ids": ids, "position_ids": torch.tensor([[0, 4, 9, 12, 30]])})
    assert track.key_counts(5, 1, "cpu").tolist() == [[1, 2, 3, 4, 5]]
    assert track.positions(5, 1, "cpu").tolist() == [[0, 4, 9, 12, 30]]
    track._forward(model, (), {"input_ids": ids, "attention_mask": torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])})
    assert track.key_counts(5, 2, "cpu").tolist() == [[1, 1, 1, 2, 3], [1, 2, 3, 4, 5]]
    track._forward(model, (), {"input_ids": ids[:, :2], "cache_position": torch.tensor([4, 5])})
    assert track.key_counts(2, 1, "cpu").tolist() == [[5, 6]]
    track._forward(model, (), {"input_ids": ids[:, :2], "cache_position": torch.tensor([4, 5]),
                               "attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1]])})
    assert track.key_counts(2, 1, "cpu").tolist() == [[4, 5]]


def test_a_call_that_hides_the_padding_is_one_line():
    model, ids = MODELS["llama"](), _ids(T=6, B=1)
    with intervened(model, "temperature:beta=1,n_train=3"), torch.no_grad():
        with pytest.raises(PosymError, match="keyword arguments") as e:
            model(ids, torch.ones_like(ids))
        assert "\n" not in str(e.value)
        with pytest.raises(PosymError, match="4-D attention mask"):
            model(input_ids=ids, attention_mask=torch.ones(1, 1, 6, 6))
        with pytest.raises(PosymError, match="does not cover"):
            model(input_ids=ids, attention_mask=torch.ones(1, 4, dtype=torch.long))
    with torch.no_grad():
        model(ids, torch.ones_like(ids))  # nothing left behind
