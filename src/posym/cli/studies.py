"""The studies: ``head-types`` (every head of an LLM typed two ways), ``head-sets`` (typed head sets vs
matched random sets; ``head-sets-combine``: several models' studies side by side), ``interventions`` (trained models under
inference-time interventions), ``sensitivity`` (reproduction variants) and ``pe-study`` (training-time
positional encodings); docs/interventions.md, docs/llm.md."""

from __future__ import annotations

import argparse
from functools import partial

from posym.cli.common import (LLM_MODEL_OPTIONS, SUPPRESS, TASK_CHOICES, TASK_HELP, add_force, add_intervene_args,
                              add_launcher_options, add_llm_model_options, add_quiet, add_swap_exclude, call,
                              launcher_options, not_, show)
from posym.cli.llm import PROMPT_OPTIONS, add_entities, add_min_mass
from posym.cli.types import (VariantsAction, device_type, finite_float, gamma_type, int_list, nonneg_int,
                             positive_float, positive_int, positive_int_list, search_grid_type, str_list, variant)

#: posym.studies.head_types.PROMPT_SOURCES (kept equal by tests/cli/test_cli_defaults.py)
SOURCES = ("repeated", "binding", "number", "letter")


def _cmd_head_types(a: argparse.Namespace) -> None:
    from posym.studies.head_types import head_types
    show(call(partial(head_types, **launcher_options(a)), a, n_entities="entities", progress=("quiet", not_),
              names=(*LLM_MODEL_OPTIONS, *PROMPT_OPTIONS, "gamma", "pure_fraction", "n_boot", "n_null",
                     "window_length", "force")))


def _cmd_atlas(a: argparse.Namespace) -> None:
    from posym.studies.head_types.atlas import atlas
    show(call(atlas, a, n_entities="entities", progress=("quiet", not_),
              names=(*LLM_MODEL_OPTIONS, *PROMPT_OPTIONS, "gamma", "pure_fraction", "window_length", "force")))


def _cmd_interventions(a: argparse.Namespace) -> None:
    from posym.studies.intervention_study import interventions
    show(call(partial(interventions, **launcher_options(a)), a, "runs", "out", progress=("quiet", not_),
              names=("task", "intervene", "best_of", "grid", "n", "seeds", "heads_lengths", "heads_n", "device",
                     "measure_only"),
              heads_lengths=("no_heads", lambda _: [])))  # --no-heads wins: no head readout


def _cmd_head_sets_combine(a: argparse.Namespace) -> None:
    from posym.studies.head_sets import combine_head_sets
    show(call(combine_head_sets, a, "studies", "out", names=("labels", "alpha", "force")))


def _cmd_sensitivity(a: argparse.Namespace) -> None:
    from posym.studies.sensitivity import sensitivity
    show(call(partial(sensitivity, **launcher_options(a)), a, "variants", "out", predict=("no_predict", not_),
              names=("n", "force", "intervention")))


def _cmd_pe_study(a: argparse.Namespace) -> None:
    from posym.studies.encodings import pe_study
    show(call(partial(pe_study, **launcher_options(a)), a, "variants", "out", names=("force", "intervention", "lengthgen")))


def _cmd_head_sets(a: argparse.Namespace) -> None:
    from posym.studies.head_sets import head_sets
    show(call(head_sets, a, "model", progress=("quiet", not_),
              names=("readout", "out", "sets", "controls", "seed", "doses", "directions", "intervene", "lengths",
                     "temperature_lengths", "n", "task", "match", "readout_n", "llm", "llm_seed", "force")))


def _variants(p: argparse.ArgumentParser, help: str) -> None:
    """``NAME=DIR [NAME=DIR ...]``: a dict of variants, a repeated name refused (:class:`VariantsAction`)."""
    p.add_argument("variants", nargs="+", type=variant, action=VariantsAction, metavar="NAME=DIR", help=help)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from posym.reading import HOW_TO_READ

    ht = sub.add_parser("head-types", help="every head of an LLM typed two ways: s_POS/s_SYM beside the classic "
                                           "detectors (previous-token, induction, duplicate-token, sink)",
                        epilog=HOW_TO_READ, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_llm_model_options(ht, out_help="output directory (default: runs/head-types/<model>/)")
    ht.add_argument("--prompts", type=str_list(("all", *SOURCES)), default=SUPPRESS,
                    help="prompt sources: repeated (random sequences repeated twice), binding, number, letter "
                         "(posym llm heads' sets), a comma list or all (default: all)")
    add_swap_exclude(ht, "keys kept out of the swaps (default bos: the start token, real LLMs' attention sink; "
                         "none = SPEC §3 exactly)")
    ht.add_argument("--n", type=positive_int, default=SUPPRESS, help="prompts per source")
    ht.add_argument("--length", type=positive_int, default=SUPPRESS,
                    help="tokens of the random sequence each repeated prompt holds twice (1 + 2 x length tokens)")
    ht.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed (and of the bootstrap)")
    ht.add_argument("--tau", type=positive_float, default=SUPPRESS, help="softmax temperature of the swap weights")
    ht.add_argument("--gamma", type=gamma_type, default=SUPPRESS, help="purity tolerance of the readings, in (0, 0.5)")
    add_min_mass(ht, "a prompt's reading is uninformative below this swap mass (default {min_mass})")
    ht.add_argument("--pure-fraction", type=finite_float, default=SUPPRESS,
                    help="a head pure on the mean over prompts is typed pure only when it is pure of that kind on "
                         "at least this share of the prompts (0..1; default 0.9; 0 = the mean alone decides)")
    ht.add_argument("--n-boot", type=positive_int, default=SUPPRESS, help="bootstrap resamples of the 95%% CIs")
    ht.add_argument("--n-null", type=positive_int, default=SUPPRESS, help="shuffles of the null of the correlations")
    ht.add_argument("--window-length", type=positive_int, default=SUPPRESS, help="target-window length of the 1-hop sets")
    add_entities(ht, "facts per binding prompt")
    ht.add_argument("--n-examples", type=nonneg_int, default=SUPPRESS, help="worked examples in each 1-hop prompt")
    add_force(ht)
    add_launcher_options(ht, launcher_help="local: this process (default); slurm: one sbatch job for the model "
                                           "(docs/cluster.md)")
    ht.set_defaults(func=_cmd_head_types)

    at = sub.add_parser("atlas", help="the head atlas of a model, the file to publish beside a paper: one Parquet "
                                      "row per head (s_POS/s_SYM per prompt set, detectors, types, sinks, "
                                      "frequency ID), settings in its metadata")
    add_llm_model_options(at, out_help="output directory (default: runs/atlas/<model>/)")
    at.add_argument("--prompts", type=str_list(("all", *SOURCES)), default=SUPPRESS,
                    help="prompt sets: repeated, binding, number, letter, a comma list or all (default: all)")
    add_swap_exclude(at, "keys kept out of the swaps (default bos; none = SPEC §3 exactly)")
    at.add_argument("--n", type=positive_int, default=SUPPRESS, help="prompts per set")
    at.add_argument("--length", type=positive_int, default=SUPPRESS,
                    help="tokens of the random sequence each repeated prompt holds twice (1 + 2 x length tokens)")
    at.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed")
    at.add_argument("--tau", type=positive_float, default=SUPPRESS, help="softmax temperature of the swap weights")
    at.add_argument("--gamma", type=gamma_type, default=SUPPRESS, help="purity tolerance of the readings, in (0, 0.5)")
    add_min_mass(at, "a prompt's reading is uninformative below this swap mass (default {min_mass})")
    at.add_argument("--pure-fraction", type=finite_float, default=SUPPRESS,
                    help="share of prompts on which a head pure on the mean must be pure (0..1; default 0.9)")
    at.add_argument("--window-length", type=positive_int, default=SUPPRESS, help="target-window length of the 1-hop sets")
    add_entities(at, "facts per binding prompt")
    at.add_argument("--n-examples", type=nonneg_int, default=SUPPRESS, help="worked examples in each 1-hop prompt")
    add_force(at)
    at.set_defaults(func=_cmd_atlas)

    iv = sub.add_parser("interventions", help="the interventions study: trained models of both tasks under each "
                                              "inference-time intervention (Fig. 5B, heads, theory's prediction)")
    iv.add_argument("runs", nargs="+", help="trained models of one architecture (both tasks, any seeds): posym runs, "
                                            "HF Trainer output_dirs, checkpoint-N/ or model folders (docs/models.md)")
    iv.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES, help=TASK_HELP)
    iv.add_argument("--out", required=True, help="study directory (re-running the command continues it)")
    add_intervene_args(iv, layers=False, metavar="NAME:KEY=VALUE[,...]",
                       help="interventions to measure (repeatable; default: the study grid, docs/interventions.md)")
    iv.add_argument("--best-of", default=SUPPRESS, metavar="DIR",
                    help="measure each family's best setting per task of an earlier study directory instead")
    iv.add_argument("--grid", type=search_grid_type, default=SUPPRESS,
                    help="'search' (0..1000, cheap), 'paper' (to +5,000) or added lengths, e.g. 0,100,1000")
    iv.add_argument("--n", type=positive_int, default=SUPPRESS, help="samples per added length and data seed")
    iv.add_argument("--seeds", type=positive_int, default=SUPPRESS, help="data seeds per point")
    iv.add_argument("--heads-lengths", type=int_list, default=SUPPRESS,
                    help="added lengths of the head readout (default 0,100,1000)")
    iv.add_argument("--heads-n", type=positive_int, default=SUPPRESS, help="prompts of the head readout")
    iv.add_argument("--no-heads", action="store_true", default=SUPPRESS,
                    help="no head readout (e.g. for the full grid after a search)")
    iv.add_argument("--device", type=device_type, default=SUPPRESS)
    add_quiet(iv, "no progress bars")
    add_launcher_options(iv, launcher_help="local: this process (default); slurm: one sbatch job per model, then "
                                           "one that writes the study (docs/cluster.md)")
    iv.add_argument("--measure-only", action="store_true", default=SUPPRESS, help=argparse.SUPPRESS)  # one model's job
    iv.set_defaults(func=_cmd_interventions)

    hs = sub.add_parser("head-sets", help="which heads and frequencies carry each mechanism: frequency dose curves "
                                          "and a temperature inside typed head sets vs matched random sets (docs/head_sets.md)")
    hs.add_argument("model", nargs="?", default=None,
                    help="a trained posym model: run, HF Trainer output_dir, checkpoint-N/ or model folder (or --model)")
    hs.add_argument("--model", dest="llm", default=SUPPRESS, metavar="smollm2|gemma3-270m|FOLDER",
                    help="an offline LLM instead, measured with the choice protocol of posym llm eval (SPEC §1.5; "
                         "--task and --lengths: target-window lengths)")
    hs.add_argument("--llm-seed", type=nonneg_int, default=SUPPRESS, help="the LLM's 1-hop samples: their run index")
    hs.add_argument("--readout", required=True, metavar="FILE",
                    help="the head readout of the same model (posym head-types' head_types.csv or a scores.csv)")
    hs.add_argument("--out", required=True, help="study directory (re-running the command reuses measured cells)")
    hs.add_argument("--sets", type=str_list(), default=SUPPRESS,
                    help="head types to test, comma list (default positional,symbolic,previous-token,induction,sink)")
    hs.add_argument("--controls", type=positive_int, default=SUPPRESS,
                    help="K matched random head sets per set (seeds SEED..SEED+K-1; default 20)")
    hs.add_argument("--doses", type=positive_int_list, default=SUPPRESS,
                    help="k frequency IDs dropped, comma list (default 1,2,4,... up to half the rotary pairs)")
    hs.add_argument("--directions", type=str_list(), default=SUPPRESS,
                    help="low (k slowest IDs), high (k fastest), random (default all three; --match ids: low,high)")
    add_intervene_args(hs, layers=False, metavar="NAME:KEY=VALUE[,...]",
                       help="per-head interventions applied to each set only (repeatable; any that takes heads=; "
                            "default temperature:beta=0.5,n_train=17; none under --match ids)")
    hs.add_argument("--lengths", type=int_list, default=SUPPRESS,
                    help="added lengths of the dose curves (default 0; an LLM with --model: target-window lengths, e.g. 32)")
    hs.add_argument("--temperature-lengths", "--intervene-lengths", type=int_list, default=SUPPRESS,
                    help="added lengths of the --intervene part (default 0,50,100,200; an LLM: --lengths)")
    hs.add_argument("--n", type=positive_int, default=SUPPRESS,
                    help="test prompts per length (the same for every intervention)")
    hs.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed, first control seed, random-ID seed")
    hs.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES, help=TASK_HELP)
    hs.add_argument("--match", default=SUPPRESS, choices=("layer", "count", "ids"),
                    help="controls with as many heads per layer as the set (layer, default) or as many heads in all, "
                         "drawn from every head outside it (count: one-head-per-layer models): which heads carry it; "
                         "or the same heads with k random frequency IDs dropped (ids: which frequencies the set uses; "
                         "no random direction, no --intervene part)")
    hs.add_argument("--readout-n", type=nonneg_int, default=SUPPRESS,
                    help="prompts of the typed set's head readout (s_POS/s_SYM) under each dose (default 64, an LLM 8; 0 = off)")
    add_force(hs, "replace existing tables and figures (the outcome cache is kept)")
    add_quiet(hs, "no progress bar")
    hs.set_defaults(func=_cmd_head_sets)

    hc = sub.add_parser("head-sets-combine", help="several models' head-set studies (e.g. one per training seed) "
                                                  "side by side, cell by cell (docs/head_sets.md)")
    hc.add_argument("studies", nargs="+", metavar="STUDY", help="posym head-sets --out folders of replicate models")
    hc.add_argument("--out", required=True, help="output directory (head_sets_combined.csv/.md, per-model rows, figures)")
    hc.add_argument("--labels", type=str_list(), default=SUPPRESS,
                    help="a label per study, comma list (default: the training seeds, else the model folders' names)")
    hc.add_argument("--alpha", type=finite_float, default=SUPPRESS,
                    help="a cell counts as significant in a model when its BH-adjusted p <= alpha (default 0.05)")
    add_force(hc)
    hc.set_defaults(func=_cmd_head_sets_combine)

    sv = sub.add_parser("sensitivity", help="compare reproduction variants (training choices) and test whether "
                                             "head discrepancy predicts length extrapolation")
    _variants(sv, "a variant name and its reproduction directory, or (a Fig. 5B-only variant, e.g. another "
                  "extra-token rule) its posym lengthgen tables: NAME=a.csv[,b.csv]")
    sv.add_argument("--out", required=True, help="output directory (sensitivity.csv/.md, prediction.csv/.png)")
    sv.add_argument("--n", type=positive_int, default=SUPPRESS,
                    help="prompts per model for the discrepancy at training length")
    sv.add_argument("--no-predict", action="store_true", default=SUPPRESS,
                    help="only the sensitivity table (no model is loaded)")
    sv.add_argument("--intervention", default=SUPPRESS, metavar="NAME",
                    help="whose rows of the lengthgen tables of a Fig. 5B-only variant are shown (its canonical "
                         "string, e.g. ntk:kappa=4; default none: the untouched model)")
    add_force(sv)
    add_launcher_options(sv, launcher_help="local: this process (default); slurm: one sbatch job per reproduction variant, "
                                           "then a summary job (docs/cluster.md)")
    sv.set_defaults(func=_cmd_sensitivity)

    pe = sub.add_parser("pe-study", help="reproductions trained with different positional encodings (--pe) side "
                                         "by side: accuracy, milestones, pure heads, frequencies, Fig. 5B, the goal")
    _variants(pe, "a variant name and its reproduction directory (posym reproduce --set train.pe=...)")
    pe.add_argument("--out", required=True,
                    help="output directory (pe_study.csv/.md/.html, fig2_variants, fig5b_variants)")
    pe.add_argument("--lengthgen", default=SUPPRESS, metavar="FILE",
                    help="the length-generalization table inside each run that Fig. 5B and the reach read "
                         "(default: the reproduction's own; e.g. lengthgen_paper.csv written by "
                         "posym lengthgen RUN --grid paper --out RUN/lengthgen_paper.csv)")
    pe.add_argument("--intervention", default=SUPPRESS, metavar="NAME",
                    help="whose rows of a length table measured under several interventions Fig. 5B and the "
                         "reach show (its canonical string, e.g. ntk:kappa=4; default none: the untouched model)")
    add_force(pe)
    add_launcher_options(pe, launcher_help="local: this process (default); slurm: one sbatch job (docs/cluster.md)")
    pe.set_defaults(func=_cmd_pe_study)
