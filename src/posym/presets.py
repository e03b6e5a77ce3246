"""The presets of posym, one record each: the model's shape, its training values and the settings of
``posym reproduce`` (SPEC §2 for ``paper``). Plain dicts, no torch: every floor may read them.

A preset has the sections it is used for (None where it has none): ``posym train --preset`` takes
those with ``model`` and ``train`` (paper, quick, authors), ``posym reproduce --preset`` those with
``reproduce`` (quick, paper, and tiny, the tests' preset). The old names are views of one section:
``posym.model.gptj.PRESETS`` (``model``), ``posym.train.config.PRESET_TRAINING`` (``train``) and
``posym.verbs.settings.PRESETS`` (``reproduce``); see :func:`section`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Sections of a preset record (:class:`Preset`).
SECTIONS = ("model", "train", "reproduce")

#: The added lengths of the quick reproduction's length generalisation (SPEC §1.4): 0, 10, ..., 100, 200, ..., 1000.
QUICK_LENGTHGEN_GRID = tuple(range(0, 101, 10)) + tuple(range(200, 1001, 100))


@dataclass(frozen=True)
class Preset:
    """One preset. ``model``: ``GPTJConfig`` fields (``vocab_size`` is set from the task; SPEC §2);
    ``train``: ``TrainConfig`` values that differ from its defaults; ``reproduce``: the settings of
    ``posym reproduce`` (keys below); ``for_tests``: a preset for posym's own tests, not for results.

    Keys of ``reproduce``:

    * ``train_preset`` — the preset whose ``model`` and ``train`` the reproduction trains;
      ``train`` — extra ``make_config`` keywords (steps, model_overrides, ...);
    * ``gammas`` — purity tolerances of the dynamics stage (SPEC §3);
    * ``flow_hops`` — the flow stage draws the first test prompt of each of these hop counts;
    * ``ablation_n`` / ``freqs_n`` — test prompts of the ablation and frequency stages;
      ``freqs_scores`` — also per-frequency s_POS / s_SYM;
    * ``lengthgen_grid`` ("paper" = 0,10..100,200..1000,1500..5000) / ``lengthgen_n`` (samples per
      length and data seed) / ``lengthgen_data_seeds`` / ``lengthgen_extra_rule`` (what the added
      tokens are: "window", "distractor" or "copies"; SPEC §1.4, our choice);
    * ``discrepancy`` — keywords of ``posym.verbs.theory.discrepancy`` (Fig. 5A values);
    * ``llm`` — keywords of ``posym.lengthgen.llm_eval`` (lengths None = SPEC §1.5's 11 lengths);
      ``llm_choice`` — also the log-likelihood ("choice") protocol on the same prompts (stage ``choice``);
      ``llm_models`` — the models asked, each a bundled short name (``posym.model.llm.BUNDLED``), an HF
      directory or a ``.gguf`` file: the first writes ``DIR/llm/`` (stages ``llm``, ``choice``), each
      other ``DIR/llm/models/<name>/`` (stages ``llm-<name>``, ``choice-<name>``); a bundled model whose
      package is not installed is skipped with a note, a folder or file that does not exist is refused.
    """

    name: str
    model: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    reproduce: dict[str, Any] | None = None
    for_tests: bool = False


# SPEC §2, exact: 12 layers, 1 head, d 128, MLP 512, rotary_dim 128, base 10,000, gelu,
# dropout 0.1, eps 1e-5, n_positions 128, untied embeddings.
_PAPER_MODEL: dict[str, Any] = dict(
    n_layer=12,
    n_head=1,
    n_embd=128,
    n_inner=512,
    rotary_dim=128,
    activation_function="gelu",
    resid_pdrop=0.1,
    embd_pdrop=0.1,
    attn_pdrop=0.1,
    layer_norm_epsilon=1e-5,
    n_positions=128,
    tie_word_embeddings=False,
    initializer_range=0.02,
    use_cache=False,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=0,
)

# posym.resources.QUICK_REPRODUCTION_TIME (≈ 16 CPU-minutes): 1,500-step quick models (8 layers,
# ≈ 5–9 min per task, both trained side by side), analyses scaled down.
_QUICK_REPRODUCE: dict[str, Any] = {
    "train_preset": "quick",
    "train": {},
    "gammas": [0.1, 0.05],
    "flow_hops": [1, 2, 3, 4],
    "ablation_n": 500,
    "freqs_n": 128,
    "freqs_scores": True,
    "lengthgen_grid": list(QUICK_LENGTHGEN_GRID),
    "lengthgen_n": 60,
    "lengthgen_data_seeds": 1,
    "lengthgen_extra_rule": "window",
    "discrepancy": {"theta_index": 0.8, "theta_retrieval": 0.0027, "alphabet": 8, "n_max": 100},
    "llm": {"lengths": [12, 32, 100], "n": 10, "runs": 2},
    "llm_choice": True,  # also the log-likelihood protocol (stage "choice"; SPEC §1.5)
    "llm_models": ["smollm2"],
}

#: Every preset, by name.
PRESETS: dict[str, Preset] = {
    # The paper's setting: SPEC §2 model and training (one epoch of 432,000 / 64); the reproduction at
    # full analysis sizes, lengthgen to +5000, both offline models — SmolLM2 and Gemma-3-270M (the
    # [gemma] extra) — with both protocols on SPEC §1.5's grid: 11 lengths, 5 runs, 40 prompts per run.
    "paper": Preset(
        "paper",
        model=_PAPER_MODEL,
        train=dict(steps=6750, lr=1e-4, warmup=750, batch_size=64, eval_every=50),
        reproduce={**_QUICK_REPRODUCE, "train_preset": "paper", "ablation_n": 2000, "freqs_n": 512,
                   "lengthgen_grid": "paper", "lengthgen_n": 200,
                   "llm": {"lengths": None, "n": 40, "runs": 5}, "llm_models": ["smollm2", "gemma3-270m"]},
    ),
    # Our choice: a smaller GPT-J (same architecture family, 8 layers, no dropout) trained with a 10x
    # larger learning rate and fewer steps, that reaches >= 0.95 on both tasks in minutes on a CPU
    # (docs/reproduction.md).
    "quick": Preset(
        "quick",
        model={**_PAPER_MODEL, "n_layer": 8, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
        train=dict(steps=1500, lr=1e-3, warmup=150, batch_size=64, eval_every=50),
        reproduce=_QUICK_REPRODUCE,
    ),
    # The authors' most likely run, read from their HF Trainer script (SPEC §2): the paper's model; a
    # plain process on their 3-GPU machine makes HF wrap the model in DataParallel, so the global batch
    # is 3 x 64 = 192, and 6,750 steps is then exactly HF's default of 3 epochs; load_best_model_at_end
    # keeps the first checkpoint with the best validation accuracy. Their fp16 is CUDA-only: add
    # --precision fp16 there. No reproduction of its own.
    "authors": Preset(
        "authors",
        model=_PAPER_MODEL,
        train=dict(steps=6750, lr=1e-4, warmup=750, batch_size=192, eval_every=50, final_model="best"),
    ),
    # For tests only (not in the CLI help): a seconds-long end-to-end reproduction of a 2-layer quick model.
    "tiny": Preset(
        "tiny",
        reproduce={
            "train_preset": "quick",
            "train": {"steps": 30, "eval_every": 10, "checkpoint_every": 10, "n_val": 64, "n_test": 64,
                      "eval_batch_size": 64, "track_prompts": 16,
                      "model_overrides": {"n_layer": 2, "n_embd": 32, "n_inner": 64, "rotary_dim": 32}},
            "gammas": [0.1],
            "flow_hops": [4],
            "ablation_n": 32,
            "freqs_n": 16,
            "freqs_scores": False,
            "lengthgen_grid": [0, 10],
            "lengthgen_n": 8,
            "lengthgen_data_seeds": 1,
            "lengthgen_extra_rule": "window",
            "discrepancy": {"theta_index": 0.8, "theta_retrieval": 0.0027, "alphabet": 8, "n_max": 20},
            "llm": {"lengths": [12], "n": 2, "runs": 1},
            "llm_choice": False,
            "llm_models": ["smollm2"],
        },
        for_tests=True,
    ),
}


def section(name: str) -> dict[str, dict[str, Any]]:
    """``{preset name: its section name}`` of every preset that has that section (the dicts themselves,
    not copies: copy one before changing it)."""
    if name not in SECTIONS:
        raise ValueError(f"unknown preset section {name!r}; choose one of {list(SECTIONS)}")
    return {p.name: getattr(p, name) for p in PRESETS.values() if getattr(p, name) is not None}


__all__ = ["PRESETS", "Preset", "QUICK_LENGTHGEN_GRID", "SECTIONS", "section"]
