"""Every preset's values, pinned: the model config, the training config and the reproduction settings
of each preset as they were before the three preset tables became one record per preset
(:mod:`posym.presets`). A change here changes what ``posym train`` / ``posym reproduce`` run."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from posym.model.gptj import PRESETS as MODEL_PRESETS, model_config
from posym.train.config import PRESET_TRAINING, make_config
from posym.verbs.settings import PRESETS as REPRODUCE_PRESETS, preset_settings

# fmt: off
MODEL = {'paper': {'n_layer': 12,
           'n_head': 1,
           'n_embd': 128,
           'n_inner': 512,
           'rotary_dim': 128,
           'activation_function': 'gelu',
           'resid_pdrop': 0.1,
           'embd_pdrop': 0.1,
           'attn_pdrop': 0.1,
           'layer_norm_epsilon': 1e-05,
           'n_positions': 128,
           'tie_word_embeddings': False,
           'initializer_range': 0.02,
           'use_cache': False,
           'bos_token_id': None,
           'eos_token_id': None,
           'pad_token_id': 0},
 'quick': {'n_layer': 8,
           'n_head': 1,
           'n_embd': 128,
           'n_inner': 512,
           'rotary_dim': 128,
           'activation_function': 'gelu',
           'resid_pdrop': 0.0,
           'embd_pdrop': 0.0,
           'attn_pdrop': 0.0,
           'layer_norm_epsilon': 1e-05,
           'n_positions': 128,
           'tie_word_embeddings': False,
           'initializer_range': 0.02,
           'use_cache': False,
           'bos_token_id': None,
           'eos_token_id': None,
           'pad_token_id': 0},
 'authors': {'n_layer': 12,
             'n_head': 1,
             'n_embd': 128,
             'n_inner': 512,
             'rotary_dim': 128,
             'activation_function': 'gelu',
             'resid_pdrop': 0.1,
             'embd_pdrop': 0.1,
             'attn_pdrop': 0.1,
             'layer_norm_epsilon': 1e-05,
             'n_positions': 128,
             'tie_word_embeddings': False,
             'initializer_range': 0.02,
             'use_cache': False,
             'bos_token_id': None,
             'eos_token_id': None,
             'pad_token_id': 0}}

TRAIN = {'paper': {'steps': 6750, 'lr': 0.0001, 'warmup': 750, 'batch_size': 64, 'eval_every': 50},
 'quick': {'steps': 1500, 'lr': 0.001, 'warmup': 150, 'batch_size': 64, 'eval_every': 50},
 'authors': {'steps': 6750, 'lr': 0.0001, 'warmup': 750, 'batch_size': 192, 'eval_every': 50, 'final_model': 'best'}}

REPRODUCE = {'quick': {'train_preset': 'quick',
           'train': {},
           'gammas': [0.1, 0.05],
           'flow_hops': [1, 2, 3, 4],
           'ablation_n': 500,
           'freqs_n': 128,
           'freqs_scores': True,
           'lengthgen_grid': [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
           'lengthgen_n': 60,
           'lengthgen_data_seeds': 1,
           'lengthgen_extra_rule': 'window',
           'discrepancy': {'theta_index': 0.8, 'theta_retrieval': 0.0027, 'alphabet': 8, 'n_max': 100},
           'llm': {'lengths': [12, 32, 100], 'n': 10, 'runs': 2},
           'llm_choice': True,
           'llm_models': ['smollm2']},
 'tiny': {'train_preset': 'quick',
          'train': {'steps': 30,
                    'eval_every': 10,
                    'checkpoint_every': 10,
                    'n_val': 64,
                    'n_test': 64,
                    'eval_batch_size': 64,
                    'track_prompts': 16,
                    'model_overrides': {'n_layer': 2, 'n_embd': 32, 'n_inner': 64, 'rotary_dim': 32}},
          'gammas': [0.1],
          'flow_hops': [4],
          'ablation_n': 32,
          'freqs_n': 16,
          'freqs_scores': False,
          'lengthgen_grid': [0, 10],
          'lengthgen_n': 8,
          'lengthgen_data_seeds': 1,
          'lengthgen_extra_rule': 'window',
          'discrepancy': {'theta_index': 0.8, 'theta_retrieval': 0.0027, 'alphabet': 8, 'n_max': 20},
          'llm': {'lengths': [12], 'n': 2, 'runs': 1},
          'llm_choice': False,
          'llm_models': ['smollm2']},
 'paper': {'train_preset': 'paper',
           'train': {},
           'gammas': [0.1, 0.05],
           'flow_hops': [1, 2, 3, 4],
           'ablation_n': 2000,
           'freqs_n': 512,
           'freqs_scores': True,
           'lengthgen_grid': 'paper',
           'lengthgen_n': 200,
           'lengthgen_data_seeds': 1,
           'lengthgen_extra_rule': 'window',
           'discrepancy': {'theta_index': 0.8, 'theta_retrieval': 0.0027, 'alphabet': 8, 'n_max': 100},
           'llm': {'lengths': None, 'n': 40, 'runs': 5},
           'llm_choice': True,
           'llm_models': ['smollm2', 'gemma3-270m']}}

#: ``make_config(task, preset).to_dict()`` before the preset's ``TRAIN`` values are applied.
TRAIN_DEFAULTS = {
    "seed": 0, "data_seed": 0, "order_seed": 0, "steps": 6750, "batch_size": 64, "lr": 0.0001, "betas": [0.95, 0.999],
    "weight_decay": 0.0001, "eps": 1e-08, "warmup": 750, "max_grad_norm": 1.0, "eval_every": 50, "eval_batch_size": 600,
    "n_val": 2400, "n_test": 45600, "checkpoint_every": 250, "checkpoint_extra_every": None, "model_overrides": {},
    "track_heads": True, "track_prompts": 512, "track_taus": [0.0001], "precision": "fp32", "compile": False,
    "distractors": "pool", "final_model": "last", "epochs": None, "log": [], "pe": "rope", "arch": "gptj",
}
# fmt: on


def _same(got: dict, want: dict) -> None:
    """Equal values and the same key order (the order a JSON record of them is written in)."""
    assert json.dumps(got) == json.dumps(want)


def test_model_sections_are_pinned():
    assert list(MODEL_PRESETS) == list(MODEL)
    for name, want in MODEL.items():
        _same(MODEL_PRESETS[name], want)


@pytest.mark.parametrize("name", list(MODEL))
def test_resolved_model_config_is_pinned(name):
    cfg = model_config(name, vocab_size=20)
    assert cfg.vocab_size == 20
    for key, value in MODEL[name].items():
        assert getattr(cfg, key) == value, key


def test_training_sections_are_pinned():
    assert list(PRESET_TRAINING) == list(TRAIN)
    for name, want in TRAIN.items():
        _same(PRESET_TRAINING[name], want)


@pytest.mark.parametrize("task", ["number", "letter"])
@pytest.mark.parametrize("name", list(TRAIN))
def test_resolved_training_config_is_pinned(name, task):
    want = {"task": task, "preset": name, **TRAIN_DEFAULTS}
    want.update(TRAIN[name])
    _same(make_config(task, name).to_dict(), want)


def test_reproduction_settings_are_pinned():
    assert set(REPRODUCE_PRESETS) == set(REPRODUCE)
    for name, want in REPRODUCE.items():
        _same(REPRODUCE_PRESETS[name], want)
        _same(preset_settings(name), want)


def test_one_record_per_preset():
    from posym import presets

    assert list(presets.PRESETS) == ["paper", "quick", "authors", "tiny"]
    for section, view in (("model", MODEL_PRESETS), ("train", PRESET_TRAINING), ("reproduce", REPRODUCE_PRESETS)):
        assert {n: id(d) for n, d in view.items()} == {n: id(d) for n, d in presets.section(section).items()}
    assert presets.PRESETS["authors"].model is presets.PRESETS["paper"].model  # the authors' run differs in training only
    tiny = presets.PRESETS["tiny"]
    assert tiny.for_tests and tiny.model is None and tiny.train is None  # a reproduction of the quick model, scaled down
    assert not any(p.for_tests for n, p in presets.PRESETS.items() if n != "tiny")
    with pytest.raises(ValueError, match="unknown preset section"):
        presets.section("analysis")


def test_presets_import_no_torch():
    from posym import presets

    tree = ast.parse(Path(presets.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m.split(".")[0] for m in names} & {"torch", "transformers", "numpy", "pandas"}
