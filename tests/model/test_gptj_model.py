"""Model presets, the fast forward vs HF reference, and HF-format round trips (SPEC §2)."""

import pytest
import torch
from transformers import GPTJForCausalLM

from posym.errors import PosymError
from posym.model import PRESETS, build_model, last_token_logits, load_model, model_config, reference_last_token_logits, save_model
from posym.model.gptj import rotary_table


def test_paper_preset_matches_spec():
    cfg = model_config("paper", 137)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.n_inner, cfg.rotary_dim) == (12, 1, 128, 512, 128)
    assert cfg.activation_function == "gelu"
    assert cfg.resid_pdrop == cfg.embd_pdrop == cfg.attn_pdrop == 0.1
    assert cfg.layer_norm_epsilon == 1e-5 and cfg.n_positions == 128
    assert cfg.tie_word_embeddings is False and cfg.vocab_size == 137
    m = build_model(cfg, seed=0)
    assert m.lm_head.weight.data_ptr() != m.transformer.wte.weight.data_ptr()  # untied
    # rotary base 10,000: HF table frequency of pair k is 10000^(-2k/128)
    table = rotary_table(m)  # transformers >= 5.20: one table on the model; earlier: one per attention
    assert torch.allclose(table[1, 1], torch.sin(torch.tensor(10000 ** (-2 / 128))), atol=1e-7)


def test_overrides_and_errors():
    assert model_config("quick", 129, n_layer=3).n_layer == 3
    with pytest.raises(PosymError, match="unknown GPTJConfig field"):
        model_config("paper", 137, not_a_field=1)
    with pytest.raises(PosymError, match="unknown preset"):
        model_config("huge", 137)
    with pytest.raises(PosymError, match="rotary_dim"):
        model_config("paper", 137, n_head=4, rotary_dim=64)


def test_build_is_seeded():
    a = build_model(model_config("quick", 137, n_layer=2), seed=3)
    b = build_model(model_config("quick", 137, n_layer=2), seed=3)
    c = build_model(model_config("quick", 137, n_layer=2), seed=4)
    assert torch.equal(a.transformer.wte.weight, b.transformer.wte.weight)
    assert not torch.equal(a.transformer.wte.weight, c.transformer.wte.weight)


@pytest.mark.parametrize("over", [{}, {"n_head": 4, "rotary_dim": 16}, {"n_head": 2, "rotary_dim": 64, "n_layer": 3}])
def test_fast_forward_matches_hf(over):
    torch.manual_seed(0)
    m = build_model(model_config("paper", 137, **over), seed=1).eval()
    x = torch.randint(1, 137, (6, 17))
    with torch.no_grad():
        fast = last_token_logits(m, x)
        ref = reference_last_token_logits(m, x)
    assert fast.shape == (6, 137)
    assert (fast - ref).abs().max().item() <= 1e-5


def test_fast_forward_gradients_match_hf_without_dropout():
    m = build_model(model_config("paper", 137, n_layer=3, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), seed=2).train()
    x = torch.randint(1, 137, (4, 17))
    y = torch.randint(17, 137, (4,))
    grads = []
    for f in (last_token_logits, reference_last_token_logits):
        m.zero_grad()
        torch.nn.functional.cross_entropy(f(m, x), y).backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_dropout_is_active_in_train_mode():
    m = build_model(model_config("paper", 137, n_layer=2), seed=0).train()
    x = torch.randint(1, 137, (4, 17))
    assert not torch.equal(last_token_logits(m, x), last_token_logits(m, x))


def test_checkpoint_loads_in_plain_transformers(tmp_path):
    m = build_model(model_config("paper", 129), seed=5).eval()
    save_model(m, tmp_path / "ckpt")
    plain = GPTJForCausalLM.from_pretrained(tmp_path / "ckpt").eval()  # default attention backend
    eager = GPTJForCausalLM.from_pretrained(tmp_path / "ckpt", attn_implementation="eager").eval()
    ours = load_model(tmp_path / "ckpt")
    x = torch.randint(1, 129, (3, 17))
    with torch.no_grad():
        ref = m(input_ids=x).logits
        assert torch.equal(eager(input_ids=x).logits, ref)
        # the default backend (sdpa where available) differs only by float rounding
        assert (plain(input_ids=x).logits - ref).abs().max().item() <= 1e-5
        assert torch.equal(ours(input_ids=x).logits, ref)


def test_load_errors(tmp_path):
    with pytest.raises(PosymError, match="config.json missing"):
        load_model(tmp_path)
    m = build_model(model_config("quick", 137, n_layer=1), seed=0)
    save_model(m, tmp_path / "c")
    (tmp_path / "c" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(PosymError, match="cannot load"):
        load_model(tmp_path / "c")


def test_presets_are_known():
    assert set(PRESETS) == {"paper", "quick", "authors"}
    assert PRESETS["authors"] == PRESETS["paper"]  # the authors' run differs in training only
