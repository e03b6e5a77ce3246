"""``posym`` command line: a thin layer over the Python API (one verb, one public function).

User errors (``PosymError``) print one line ``posym: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from posym.errors import PosymError


def _parse_overrides(items: Sequence[str] | None) -> dict[str, Any]:
    """``key=value`` pairs; values parsed as JSON when possible (``n_layer=4``, ``rotary_dim=null``)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise PosymError(f"bad override {item!r}; expected KEY=VALUE (e.g. n_layer=4)")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _step_choice(text: str) -> int | str:
    """argparse type of ``--step``: a checkpoint step (>= 0), ``last`` or ``best`` (SPEC §2)."""
    if text in ("last", "best"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a step number, 'last' or 'best', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a step must be >= 0, got {value}")
    return value


STEP_HELP = "checkpoint of a run: a step, 'last' or 'best' (default: the model the run stands for)"


def _cmd_data_export(args: argparse.Namespace) -> None:
    from posym.tasks import export_jsonl

    path = export_jsonl(args.task, args.split, args.n, args.out, seed=args.seed,
                        extra_tokens=args.extra_tokens, force=args.force)
    print(f"wrote {args.n} {args.task}/{args.split} samples to {path}")


def _cmd_data_show(args: argparse.Namespace) -> None:
    from posym.tasks import format_examples, make_split

    batch = make_split(args.task, args.split, seed=args.seed, n=args.n, extra_tokens=args.extra_tokens)
    print(format_examples(batch, k=args.n))


def _cmd_train(args: argparse.Namespace) -> None:
    from posym.train import make_config, train

    overrides = _parse_overrides(args.set)
    cfg = make_config(args.task, args.preset, seed=args.seed,
                      data_seed=args.data_seed if args.data_seed is not None else args.seed,
                      order_seed=args.order_seed if args.order_seed is not None else args.seed,
                      steps=args.steps, eval_every=args.eval_every,
                      checkpoint_every=args.checkpoint_every,
                      checkpoint_extra_every=args.checkpoint_extra_every,
                      model_overrides=overrides or None, track_heads=args.track_heads,
                      track_prompts=args.track_prompts, precision=args.precision, compile=args.compile,
                      batch_size=args.batch_size, epochs=args.epochs, final_model=args.final_model,
                      distractors=args.distractors)
    changed = (overrides or args.steps or args.precision or args.compile is not None or args.batch_size
               or args.epochs or args.final_model or args.distractors)
    if args.resume and changed:
        print("posym: note: --resume continues with the run's stored configuration", file=sys.stderr)
    result = train(cfg, args.out, resume=args.resume, force=args.force, device=args.device,
                   threads=args.threads, progress=not args.quiet)
    from posym.train.distributed import is_main

    if not is_main():  # under torchrun only rank 0 reports
        return
    t = result.test
    hops = " ".join(f"hop{h}={t[f'acc_hop{h}']:.3f}" for h in range(1, 5))
    print(f"test accuracy {t['acc']:.4f} ({hops}); run in {result.run_dir}")


def _cmd_select(args: argparse.Namespace) -> None:
    from posym.train.select import select_final_model

    res = select_final_model(args.run_dir, args.out, args.final_model, device=args.device, force=args.force)
    print(f"{args.out}: {args.run_dir} standing for its {res['final_model']} model (step {res['final_step']}); "
          f"test accuracy {res['test']['acc']:.4f}")


def _cmd_sensitivity(args: argparse.Namespace) -> None:
    from posym.report.sensitivity import rank_correlation, run_sensitivity, sensitivity_markdown

    variants = {}
    for item in args.variants:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise PosymError(f"bad variant {item!r}; expected NAME=REPRODUCTION_DIR")
        if name in variants:
            raise PosymError(f"variant {name!r} given twice")
        variants[name] = path
    res = run_sensitivity(variants, args.out, predict=not args.no_predict, n=args.n, force=args.force)
    print(sensitivity_markdown(res["sensitivity"]))
    if "prediction" in res:
        pred = res["prediction"]
        for kind in ("positional", "symbolic"):
            r, p, m = rank_correlation(pred[f"delta_{kind}"].to_numpy(), pred["largest_09"].to_numpy())
            print(f"Δ of pure {kind} heads vs largest length >= 0.9: Spearman rho {r:.2f} (p = {p:.2f}, {m} models)")
    print(f"wrote {args.out}")


def _cmd_scores(args: argparse.Namespace) -> None:
    from pathlib import Path

    from posym.heads.tracking import score_checkpoints

    target = args.model or args.run_dir
    if not target or (args.model and args.run_dir):
        raise PosymError("give exactly one of RUN_DIR or --model MODEL_DIR")
    out = Path(args.out) if args.out else Path(target) / "scores.csv"
    if out.exists() and not args.force:
        raise PosymError(f"{out} exists; pass --out FILE or --force to overwrite")
    taus = args.tau or [1e-4]
    steps = [int(x) for x in args.steps.split(",")] if args.steps else None
    df = score_checkpoints(target, task=args.task, prompts=args.prompts, n_prompts=args.n, taus=taus,
                           per_prompt=args.per_prompt, steps=steps, seed=args.seed, device=args.device)
    if "step" in df and df["step"].isna().all():  # one checkpoint directory: no step to report
        df = df.drop(columns="step")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    last = df[df["step"] == df["step"].max()] if "step" in df else df
    cols = [c for c in ("layer", "head", "tau", "s_pos", "s_sym", "entropy") if c in last]
    print(last[cols].groupby(["layer", "head", "tau"]).mean().round(3).to_string())
    print(f"wrote {len(df)} rows to {out}")


def _cmd_dynamics(args: argparse.Namespace) -> None:
    from posym.heads.dynamics import run_dynamics

    layers = [int(x) for x in args.layers.split(",")] if args.layers else None
    for gamma in args.gamma:
        purity = run_dynamics(args.run_dir, gamma=gamma, tau=args.tau, layers=layers, out=args.out)
        print(f"gamma={gamma:g}:")
        print(purity.to_string(index=False))


def _cmd_flow(args: argparse.Namespace) -> None:
    from pathlib import Path

    from posym.heads.flow import flow_for_example
    from posym.report.flow_figures import plot_flow, save_figure

    edges, tokens, chain, task = flow_for_example(args.run_dir, args.example, task=args.task, split=args.split,
                                                  seed=args.seed, top_k=args.top_k, min_weight=args.min_weight,
                                                  step=args.step)
    out = Path(args.out) if args.out else Path(args.run_dir) / "figures"
    fig = plot_flow(edges, tokens, chain)
    paths = save_figure(fig, out / f"flow-{task}-{args.split}-{args.example}")
    edges.to_csv(out / f"flow-{task}-{args.split}-{args.example}.csv", index=False)
    print(f"{task} example {args.example}: {' '.join(tokens)}; chain {chain}; wrote {paths[0]}")


def _cmd_ablate(args: argparse.Namespace) -> None:
    from pathlib import Path

    from posym.heads.ablate import ablation_for_run
    from posym.report.flow_figures import plot_ablation, save_figure

    modes = tuple(m.strip() for m in args.modes.split(","))
    table = ablation_for_run(args.run_dir, task=args.task, n=args.n, seed=args.seed, modes=modes, step=args.step)
    out = Path(args.out) if args.out else Path(args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ablation.csv", index=False)
    save_figure(plot_ablation(table), out / "figures" / "ablation")
    print(table.to_string(index=False))


def _cmd_lengthgen(args: argparse.Namespace) -> None:
    from pathlib import Path

    from posym.lengthgen.trained import largest_length_above, run_lengthgen, summarize_lengthgen
    from posym.report.figures import plot_lengthgen, save_figure
    from posym.report.paper import LENGTHGEN

    table = run_lengthgen(args.run_dir, task=args.task, grid=args.grid, n=args.n, seeds=args.seeds,
                          out=args.out, force=args.force, device=args.device, extra_rule=args.extra_rule,
                          step=args.step)
    task = table["task"].iloc[0]
    summary = summarize_lengthgen(table)
    out = Path(args.out) if args.out else Path(args.run_dir) / "lengthgen.csv"
    save_figure(plot_lengthgen({task: summary}, paper=LENGTHGEN), out.with_name(out.stem + "_fig5b"))
    cols = ["extra_tokens", "acc_mean", "acc_sd"] + [f"acc_hop{h}_mean" for h in range(1, 5)]
    print(summary[cols].round(3).to_string(index=False))
    print(f"largest added length with accuracy >= 0.9: {largest_length_above(summary)}; "
          f"time {table['seconds'].sum():.0f} s, peak RSS {table['peak_rss_mb'].max():.0f} MB; wrote {out}")


def _cmd_freqs(args: argparse.Namespace) -> None:
    from posym.heads.frequencies import run_freqs

    table = run_freqs(args.path, task=args.task, n=args.n, out=args.out, layer_geometry=args.layer, step=args.step,
                      scores=not args.no_scores, weighting=args.weighting)
    print(table.round(3).to_string(index=False))
    for f in table.attrs.get("files", []):
        print(f"wrote {f}")


def _cmd_theory(args: argparse.Namespace) -> None:
    from pathlib import Path

    out = Path(args.out)
    if args.theory_verb == "discrepancy":
        from posym.theory.discrepancy import run_discrepancy

        table = run_discrepancy(out, theta_index=args.theta_index, theta_retrieval=args.theta_retrieval,
                                alphabet=args.alphabet, n_max=args.n_max)
        at = table[table["n"].isin([8, 20, 40, 80, 100])]
        print(at.pivot(index="n", columns="mechanism", values="delta").round(4).to_string())
        print(f"wrote {out / 'discrepancy.csv'} and {out / 'discrepancy.png'}")
        if args.run:
            from posym.lengthgen.trained import parse_grid
            from posym.theory.trained import DEFAULT_GRID, run_trained_discrepancy

            grid = parse_grid(args.grid) if args.grid else list(DEFAULT_GRID)
            trained = run_trained_discrepancy(args.run, out, grid=grid, n=args.n, seed=args.seed, task=args.task)
            per_layer = trained.groupby(["task", "layer", "extra_tokens"])["delta_median"].median()
            print("trained heads: median Δ of the last query per layer (rows) and added tokens (columns)")
            print(per_layer.unstack("extra_tokens").round(4).to_string())
            print(f"wrote {out / 'trained_discrepancy.csv'} and {out / 'trained_discrepancy.png'}")
    else:
        from posym.theory.restricted import run_restricted

        table = run_restricted(out, steps=args.steps, seed=args.seed)
        print(table.groupby(["task", "band", "mode"])["acc"].mean().round(3).to_string())
        print(f"wrote {out / 'restricted.csv'} and {out / 'restricted.png'}")


def _cmd_llm_eval(args: argparse.Namespace) -> None:
    from posym.lengthgen import llm_eval
    from posym.lengthgen.llm_eval import table_markdown

    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else None
    kw = {k: v for k, v in (("lengths", lengths), ("n", args.n), ("tasks", tasks)) if v}
    res = llm_eval(args.model, args.gguf, api_base=args.api_base, api_model=args.api_model,
                   api_key_env=args.api_key_env, runs=args.runs, out=args.out,
                   max_per_second=args.max_per_second, max_per_minute=args.max_per_minute,
                   concurrency=args.concurrency, max_retries=args.max_retries, timeout=args.timeout,
                   device_map=args.device_map, dtype=args.dtype, device=args.device, batch_size=args.batch_size,
                   max_new_tokens=args.max_new_tokens, n_examples=args.n_examples,
                   offload_folder=args.offload_folder, threads=args.threads, progress=not args.quiet, **kw)
    from posym.report.llm_figures import write_llm_figure

    write_llm_figure(res.out_dir)
    print(table_markdown(res.table, title=res.model))
    print(f"{res.n_new} answered, {res.n_cached} from cache, {res.seconds:.0f} s; output in {res.out_dir}")


def _cmd_llm_heads(args: argparse.Namespace) -> None:
    from posym.heads.llm_heads import layer_medians, llm_heads, summarize_llm_heads

    table = llm_heads(args.model, args.gguf, prompts=args.prompts, n=args.n, seed=args.seed, length=args.length,
                      n_entities=args.entities, n_examples=args.n_examples, tau=args.tau, out=args.out,
                      device=args.device, dtype=args.dtype, batch_size=args.batch_size, progress=not args.quiet)
    med = layer_medians(table).pivot(index="layer", columns="prompt_set", values=["s_pos", "s_sym"])
    print(f"median over heads per layer ({table.attrs['model']}):")
    print(med.round(3).to_string())
    print(summarize_llm_heads(table).round(3).to_string(index=False))
    for f in table.attrs.get("files", []):
        print(f"wrote {f}")


def _cmd_reproduce(args: argparse.Namespace) -> None:
    from posym.reproduce import reproduce

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    stages = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else None
    overrides: dict[str, Any] = {}
    for key, value in _parse_overrides(args.set).items():  # "llm.n=3" -> {"llm": {"n": 3}}
        *parents, leaf = key.split(".")
        node = overrides
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise PosymError(f"--set {key}: {part!r} is set to a value elsewhere, not a group of settings")
        node[leaf] = value
    path = reproduce(args.preset, out=args.out, seeds=args.seeds, device=args.device, tasks=tasks, stages=stages,
                     llm=not args.no_llm, progress=not args.quiet, jobs=args.jobs, overrides=overrides or None)
    print(f"report: {path}")


def _cmd_report(args: argparse.Namespace) -> None:
    from posym.report.html import screenshot, summary_markdown, write_report

    if args.markdown:
        print(summary_markdown(args.dir), end="")
        return
    path = write_report(args.dir)
    print(f"wrote {path}")
    if args.screenshot:
        print(f"wrote {screenshot(path, args.screenshot)}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="posym", description="Positional versus symbolic attention heads (Urrutia et al. 2026).")
    sub = p.add_subparsers(dest="verb", required=True)

    data = sub.add_parser("data", help="generate, export and inspect task data (SPEC §1)")
    dsub = data.add_subparsers(dest="data_verb", required=True)
    for name, fn, helptext in [("export", _cmd_data_export, "write samples as JSONL"),
                               ("show", _cmd_data_show, "print decoded examples")]:
        d = dsub.add_parser(name, help=helptext)
        d.add_argument("--task", required=True, choices=["number", "letter"])
        d.add_argument("--split", default="train", choices=["train", "val", "test"])
        d.add_argument("--n", type=int, default=5 if name == "show" else 1000, help="number of samples")
        d.add_argument("--extra-tokens", type=int, default=0, help="extra target-window tokens (SPEC §1.4)")
        d.add_argument("--seed", type=int, default=0, help="data seed (splits derive from it)")
        if name == "export":
            d.add_argument("--out", required=True, help="output .jsonl file")
            d.add_argument("--force", action="store_true", help="overwrite an existing file")
        d.set_defaults(func=fn)

    t = sub.add_parser("train", help="train GPT-J on a task (SPEC §2)")
    t.add_argument("--task", required=True, help="number or letter")
    t.add_argument("--preset", default="quick",
                   help="quick (minutes on a CPU), paper (SPEC §2) or authors (paper + batch 192 + best checkpoint)")
    t.add_argument("--out", required=True, help="run directory (e.g. runs/NAME)")
    t.add_argument("--seed", type=int, default=0, help="init seed; also data and order seed unless given")
    t.add_argument("--data-seed", type=int, default=None)
    t.add_argument("--order-seed", type=int, default=None)
    t.add_argument("--device", default="cpu", help="cpu or cuda")
    t.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the preset's)")
    t.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps (default 50)")
    t.add_argument("--checkpoint-every", type=int, default=None, help="keep a checkpoint every N steps (default 250)")
    t.add_argument("--checkpoint-extra-every", type=int, default=None, help="additional denser checkpoints")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a GPTJConfig field (repeatable)")
    t.add_argument("--track-heads", action=argparse.BooleanOptionalAction, default=None,
                   help="score every head at each evaluation step into scores.csv (default: on)")
    t.add_argument("--track-prompts", type=int, default=None, help="validation prompts scored when tracking (512)")
    t.add_argument("--batch-size", type=int, default=None,
                   help="global batch (default 64; the authors' 3-GPU DataParallel run: 192)")
    t.add_argument("--epochs", type=float, default=None,
                   help="passes over the 432,000 training samples instead of --steps (3 at batch 192 = 6,750 steps)")
    t.add_argument("--final-model", default=None, choices=["last", "best"],
                   help="the model test accuracy and analyses use: last step (default) or the first "
                        "checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    t.add_argument("--distractors", default=None, choices=["pool", "uniform"],
                   help="letter task: distractor right letters from the non-chain pool (default, the authors') "
                        "or uniform over a..h (posym's old data, for ablations)")
    t.add_argument("--precision", default=None, choices=["fp32", "bf16", "fp16"],
                   help="fp32 (default), bf16 autocast, or fp16 autocast + loss scaling (HF fp16=True) of the "
                        "training forward (weights, scores stay fp32)")
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training forward (default: off)")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    t.add_argument("--resume", action="store_true", help="continue an interrupted run")
    t.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)

    sv = sub.add_parser("sensitivity", help="compare reproduction variants (training choices) and test whether "
                                             "head discrepancy predicts length extrapolation")
    sv.add_argument("variants", nargs="+", metavar="NAME=DIR", help="a variant name and its reproduction directory")
    sv.add_argument("--out", required=True, help="output directory (sensitivity.csv/.md, prediction.csv/.png)")
    sv.add_argument("--n", type=int, default=256, help="prompts per model for the discrepancy at training length")
    sv.add_argument("--no-predict", action="store_true", help="only the sensitivity table (no model is loaded)")
    sv.add_argument("--force", action="store_true")
    sv.set_defaults(func=_cmd_sensitivity)

    se = sub.add_parser("select", help="a finished run seen with another final model (e.g. the best checkpoint)")
    se.add_argument("run_dir", help="a finished run directory")
    se.add_argument("--final-model", default="best", choices=["best", "last"],
                    help="best: the first checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    se.add_argument("--out", required=True, help="the derived run directory (analyses write there)")
    se.add_argument("--device", default="cpu")
    se.add_argument("--force", action="store_true", help="replace a run derived earlier")
    se.set_defaults(func=_cmd_select)

    sc = sub.add_parser("scores", help="positional/symbolic scores of every head (SPEC §3, fast exact path)")
    sc.add_argument("run_dir", nargs="?", help="run directory: scores every checkpoint")
    sc.add_argument("--model", default=None, help="an HF GPT-J checkpoint directory instead of a run")
    sc.add_argument("--task", default=None, help="number or letter (token ids of SPEC §1; needed for foreign checkpoints)")
    sc.add_argument("--prompts", default=None, help="JSONL prompt file (posym data export); default: validation prompts")
    sc.add_argument("--n", type=int, default=512, help="validation prompts when --prompts is not given")
    sc.add_argument("--seed", type=int, default=0, help="data seed of the validation prompts")
    sc.add_argument("--tau", type=float, action="append", help="softmax temperature of the swap weights (repeatable)")
    sc.add_argument("--steps", default=None, help="only these checkpoint steps, e.g. 0,1000,6750")
    sc.add_argument("--per-prompt", action="store_true", help="one row per prompt instead of means")
    sc.add_argument("--device", default="cpu", help="cpu or cuda")
    sc.add_argument("--out", default=None, help="CSV file (default: DIR/scores.csv)")
    sc.add_argument("--force", action="store_true", help="overwrite an existing output file")
    sc.set_defaults(func=_cmd_scores)

    d = sub.add_parser("dynamics", help="pure heads and Paper A Fig. 2 from a run's scores.csv (SPEC §3)")
    d.add_argument("run_dir")
    d.add_argument("--gamma", type=float, action="append", help="purity tolerance (repeatable; default 0.1)")
    d.add_argument("--tau", type=float, default=None, help="τ of the scores to use (default: smallest)")
    d.add_argument("--layers", default=None, help="layers drawn in panel B, e.g. 0,3,4,11")
    d.add_argument("--out", default=None, help="output directory (default: the run directory)")
    d.set_defaults(func=_cmd_dynamics)

    f = sub.add_parser("flow", help="attention flow of one prompt with the hop chain (Paper A Fig. 3)")
    f.add_argument("run_dir", help="run directory or HF GPT-J checkpoint directory")
    f.add_argument("--example", type=int, default=0, help="index of the prompt in the split")
    f.add_argument("--task", default=None, help="number or letter (needed for checkpoints posym did not write)")
    f.add_argument("--split", default="test", choices=["train", "val", "test"])
    f.add_argument("--seed", type=int, default=0, help="data seed")
    f.add_argument("--top-k", type=int, default=3)
    f.add_argument("--min-weight", type=float, default=0.05)
    f.add_argument("--step", type=_step_choice, default=None, help=STEP_HELP)
    f.add_argument("--out", default=None, help="output directory (default: RUN/figures)")
    f.set_defaults(func=_cmd_flow)

    a = sub.add_parser("ablate", help="zero/mean-ablate each head; test accuracy per hop (Paper A Fig. 3)")
    a.add_argument("run_dir", help="run directory or HF GPT-J checkpoint directory")
    a.add_argument("--task", default=None)
    a.add_argument("--n", type=int, default=2000, help="test prompts")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--modes", default="zero,mean")
    a.add_argument("--step", type=_step_choice, default=None, help=STEP_HELP)
    a.add_argument("--out", default=None, help="output directory (default: the run directory)")
    a.set_defaults(func=_cmd_ablate)

    fq = sub.add_parser("freqs", help="RoPE frequency use per layer/head, Table 1, Fig. 8 and Fig. 4B (SPEC §4)")
    fq.add_argument("path", help="run directory, checkpoint directory or HF GPT-J directory")
    fq.add_argument("--task", default=None)
    fq.add_argument("--n", type=int, default=512, help="test prompts")
    fq.add_argument("--layer", type=int, default=None, help="layer of the q/k geometry figure (default: lowest ID)")
    fq.add_argument("--step", type=_step_choice, default=None, help=STEP_HELP)
    fq.add_argument("--weighting", default="max_abs", choices=["max_abs", "centered"])
    fq.add_argument("--no-scores", action="store_true", help="skip per-frequency positional/symbolic scores")
    fq.add_argument("--out", default=None, help="output directory (default: the given path)")
    fq.set_defaults(func=_cmd_freqs)

    th = sub.add_parser("theory", help="RoPE constructions, discrepancy (Fig. 5A), frequency-restricted heads")
    tsub = th.add_subparsers(dest="theory_verb", required=True)
    td = tsub.add_parser("discrepancy", help="Δ(n) of the Index and Retrieval constructions with Theorem 3.2 bounds")
    td.add_argument("--out", default="runs/theory", help="output directory")
    td.add_argument("--theta-index", type=float, default=0.8)
    td.add_argument("--theta-retrieval", type=float, default=0.0027)
    td.add_argument("--alphabet", type=int, default=8)
    td.add_argument("--n-max", type=int, default=100)
    td.add_argument("--run", action="append", default=None,
                    help="also measure Δ of every head of this run/checkpoint vs added tokens (repeatable)")
    td.add_argument("--task", default=None, help="task of a --run checkpoint posym did not write")
    td.add_argument("--grid", default=None, help="added tokens for --run, e.g. 0,100,1000 (default 0,20,50,100,300,1000)")
    td.add_argument("--n", type=int, default=64, help="prompts per added length for --run")
    td.add_argument("--seed", type=int, default=0, help="data seed for --run")
    td.set_defaults(func=_cmd_theory)
    tr = tsub.add_parser("restricted", help="train 1-layer toys on Index/Retrieval with each RoPE frequency band")
    tr.add_argument("--out", default="runs/theory", help="output directory")
    tr.add_argument("--steps", type=int, default=1500)
    tr.add_argument("--seed", type=int, default=0)
    tr.set_defaults(func=_cmd_theory)

    llm = sub.add_parser("llm", help="real pretrained LLMs (SPEC §1.5)")
    lsub = llm.add_subparsers(dest="llm_verb", required=True)
    le = lsub.add_parser("eval", help="1-hop number/letter prompts vs target-window length (Table 3)")
    le.add_argument("--model", default=None, help="HF directory / .gguf file (default: SmolLM2-135M-Instruct GGUF)")
    le.add_argument("--gguf", default=None, help="GGUF file inside --model")
    le.add_argument("--api-base", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    le.add_argument("--api-model", default=None)
    le.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    le.add_argument("--lengths", default=None, help="target-window sizes, e.g. 12,32,100 (default: SPEC §1.5)")
    le.add_argument("--runs", type=int, default=5)
    le.add_argument("--n", type=int, default=None, help="prompts per (task, length, run)")
    le.add_argument("--tasks", default=None, help="number,letter (default: both)")
    le.add_argument("--max-per-second", type=float, default=None, help="API rate limit (requests per second)")
    le.add_argument("--max-per-minute", type=float, default=None, help="API rate limit (requests per minute)")
    le.add_argument("--concurrency", type=int, default=1, help="parallel API requests")
    le.add_argument("--max-retries", type=int, default=6, help="API retries on 429/5xx/timeouts")
    le.add_argument("--timeout", type=float, default=60.0, help="API request timeout in seconds")
    le.add_argument("--device-map", default=None, help="'auto' shards a large local model over GPUs/CPU (accelerate)")
    le.add_argument("--offload-folder", default=None, help="disk offload folder for --device-map auto")
    le.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    le.add_argument("--device", default=None, help="cpu or cuda (without --device-map)")
    le.add_argument("--batch-size", type=int, default=None, help="prompts per forward (local) ")
    le.add_argument("--max-new-tokens", type=int, default=8)
    le.add_argument("--n-examples", type=int, default=3, help="worked examples in each prompt")
    le.add_argument("--quiet", action="store_true", help="no progress bar")
    le.add_argument("--threads", type=int, default=None)
    le.add_argument("--out", default=None, help="output directory (answers are cached there; reruns resume)")
    le.set_defaults(func=_cmd_llm_eval)
    lh = lsub.add_parser("heads", help="s_POS/s_SYM (block swaps), entropy, frequency use of every head (SPEC §3, §6)")
    lh.add_argument("--model", default=None, help="HF directory / .gguf file (default: SmolLM2-135M-Instruct GGUF)")
    lh.add_argument("--gguf", default=None, help="GGUF file inside --model")
    lh.add_argument("--prompts", default="all", help="all, binding, number, letter or a comma list")
    lh.add_argument("--n", type=int, default=32, help="prompts per set")
    lh.add_argument("--seed", type=int, default=0, help="data seed (1-hop: the run number)")
    lh.add_argument("--length", type=int, default=12, help="target-window length of the 1-hop prompts")
    lh.add_argument("--entities", type=int, default=6, help="entity-attribute facts per binding prompt")
    lh.add_argument("--n-examples", type=int, default=3, help="worked examples in each 1-hop prompt")
    lh.add_argument("--tau", type=float, default=1e-4, help="softmax temperature of the swap weights")
    lh.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    lh.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    lh.add_argument("--batch-size", type=int, default=8, help="prompts per forward")
    lh.add_argument("--out", default="runs/llm/heads", help="output directory")
    lh.add_argument("--quiet", action="store_true", help="no progress bar")
    lh.set_defaults(func=_cmd_llm_heads)

    lg = sub.add_parser("lengthgen", help="accuracy vs added target-window tokens (SPEC §1.4, Fig. 5B)")
    lg.add_argument("run_dir", help="run directory or HF GPT-J checkpoint directory")
    lg.add_argument("--task", default=None, help="number or letter (needed for checkpoints posym did not write)")
    lg.add_argument("--grid", default="paper", help="'paper' (0,10..100,200..1000,1500..5000) or e.g. 0,200,1000")
    lg.add_argument("--n", type=int, default=200, help="samples per added length and seed")
    lg.add_argument("--seeds", type=int, default=1, help="data seeds (spread reported as sd)")
    lg.add_argument("--device", default="cpu")
    lg.add_argument("--out", default=None, help="CSV file (default: DIR/lengthgen.csv)")
    lg.add_argument("--extra-rule", default="window", choices=["window", "distractor", "copies"],
                    help="what the added tokens are (SPEC §1.4, our choice): target-window-like filler (default), "
                         "pre-target-like distractors, or copies of non-answer target-window tokens")
    lg.add_argument("--step", type=_step_choice, default=None, help=STEP_HELP)
    lg.add_argument("--force", action="store_true")
    lg.set_defaults(func=_cmd_lengthgen)

    rp = sub.add_parser("reproduce", help="one command: train, analyse and report Paper A (resumable stages)")
    rp.add_argument("--preset", default="quick", help="quick (≈ 20 min on a 2-core CPU) or paper (SPEC §2, full analyses)")
    rp.add_argument("--out", required=True, help="output directory (a re-run skips finished stages)")
    rp.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 per task; results as mean ± sd")
    rp.add_argument("--device", default="cpu", help="cpu or cuda")
    rp.add_argument("--tasks", default="number,letter", help="comma-separated subset of number,letter")
    rp.add_argument("--jobs", type=int, default=None, help="worker processes (default: min(#cpus, #runs); 1 = serial)")
    rp.add_argument("--no-llm", action="store_true", help="leave out the offline SmolLM2 evaluation (Table 3)")
    rp.add_argument("--stages", default=None, help="only these stages, e.g. train,dynamics or freqs-number-s0")
    rp.add_argument("--quiet", action="store_true", help="no progress bars (stage lines are still printed)")
    rp.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a preset setting (repeatable; JSON values; dotted keys for nested ones), "
                         "e.g. lengthgen_n=60, lengthgen_grid=0,100,1000, llm.runs=2")
    rp.set_defaults(func=_cmd_reproduce)

    rr = sub.add_parser("report", help="(re)write DIR/report.html of a reproduction directory from its saved tables")
    rr.add_argument("dir", help="directory written by posym reproduce")
    rr.add_argument("--screenshot", default=None, help="also save a PNG screenshot (needs Chromium)")
    rr.add_argument("--markdown", action="store_true",
                    help="print the \"paper vs posym\" table as Markdown instead of writing the report")
    rr.set_defaults(func=_cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "verb", None) == "dynamics" and not args.gamma:
        args.gamma = [0.1]
    try:
        args.func(args)
    except PosymError as exc:
        print(f"posym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("posym: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
