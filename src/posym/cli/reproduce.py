"""``posym reproduce`` (train, analyse and report Paper A in resumable stages), ``posym status``, ``posym
report``, the hidden ``posym _stage`` that one Slurm job of a reproduction runs and the hidden ``posym _unit``
that one Slurm job of a fan-out study runs (docs/reproduction.md, docs/cluster.md)."""

from __future__ import annotations

import argparse

from posym.cli.common import (SLURM, SUPPRESS, TASK_CHOICES, add_launcher_options, add_quiet, call, given, not_,
                              show)
from posym.cli.types import device_type, key_value, positive_int, str_list


def _cmd_reproduce(a: argparse.Namespace) -> None:
    from posym.verbs.reproduce import overrides_from_pairs, reproduce
    from posym.launch.slurm import slurm_options

    slurm = given(a, **SLURM)  # any slurm option given: SlurmOptions (reproduce checks the launcher)
    path = reproduce(**given(a, "preset", "out", "seeds", "device", "stages", "jobs", "launcher", "detach",
                             overrides=("set", lambda pairs: overrides_from_pairs(dict(pairs)) or None),
                             tasks=("tasks", tuple), llm=("no_llm", not_), progress=("quiet", not_)),
                     **({"slurm_options": slurm_options(**slurm)} if slurm else {}))
    print(f"report: {path}" + (" (written by the last Slurm job)" if getattr(a, "detach", False) else ""))


def _cmd_status(a: argparse.Namespace) -> None:
    from posym.verbs.status import status
    show(status(a.dir))


def _cmd_stage(a: argparse.Namespace) -> None:
    from posym.verbs.reproduce import run_stage
    call(run_stage, a, "dir", "name", names=("submission",))


def _cmd_unit(a: argparse.Namespace) -> None:
    from posym.cli import main
    from posym.launch.fanout import mark_done

    args = list(a.args[1:] if a.args[:1] == ["--"] else a.args)
    code = main(args)
    if code:
        raise SystemExit(code)
    mark_done(a.dir, a.name, args)


def _cmd_report(a: argparse.Namespace) -> None:
    from posym.verbs.report import report
    show(call(report, a, "dir", names=("screenshot", "markdown", "force")))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from posym.resources import QUICK_REPRODUCTION_TIME

    rp = sub.add_parser("reproduce", help="one command: train, analyse and report Paper A (resumable stages)")
    rp.add_argument("--preset", default=SUPPRESS, choices=["quick", "paper", "tiny"], metavar="{quick,paper}",
                    help=f"quick ({QUICK_REPRODUCTION_TIME}), paper (SPEC §2, full analyses); tiny is for tests "
                         "(accepted, not listed)")
    rp.add_argument("--out", required=True, help="output directory (a re-run skips finished stages)")
    rp.add_argument("--seeds", type=positive_int, default=SUPPRESS, help="seeds 0..K-1 per task; results as mean ± sd")
    rp.add_argument("--device", type=device_type, default=SUPPRESS, help="cpu or cuda")
    rp.add_argument("--tasks", type=str_list(TASK_CHOICES), default=SUPPRESS,
                    help="comma-separated subset of number,letter")
    rp.add_argument("--jobs", type=positive_int, default=SUPPRESS,
                    help="worker processes (default: min(#cpus, #runs); 1 = serial)")
    rp.add_argument("--no-llm", action="store_true", default=SUPPRESS,
                    help="leave out the offline LLM evaluations (Table 3; setting llm_models)")
    rp.add_argument("--stages", type=str_list(), default=SUPPRESS,
                    help="only these stages, e.g. train,dynamics or freqs-number-s0")
    add_quiet(rp, "no progress bars (stage lines are still printed)")
    rp.add_argument("--set", action="append", type=key_value, default=SUPPRESS, metavar="KEY=VALUE",
                    help="override a preset setting (repeatable; JSON values; dotted keys for nested ones), "
                         "e.g. lengthgen_n=60, lengthgen_grid=0,100,1000, llm.runs=2")
    add_launcher_options(rp, launcher_help="local: worker processes on this machine (default); slurm: one sbatch "
                                           "job per stage (docs/cluster.md)")
    rp.add_argument("--detach", action="store_true", default=SUPPRESS,
                    help="with --launcher slurm: return once the jobs are submitted (posym status DIR follows them)")
    rp.set_defaults(func=_cmd_reproduce)

    st = sub.add_parser("status", help="the state of each stage of a reproduction directory (markers, Slurm jobs)")
    st.add_argument("dir", help="directory written by posym reproduce")
    st.set_defaults(func=_cmd_status)

    sj = sub.add_parser("_stage")  # hidden: what one Slurm job of posym reproduce --launcher slurm runs
    sj.add_argument("dir")
    sj.add_argument("name")
    sj.add_argument("--submission", default=SUPPRESS)
    sj.set_defaults(func=_cmd_stage)

    un = sub.add_parser("_unit")  # hidden: one job of a study's --launcher slurm (posym.launch.fanout)
    un.add_argument("dir")
    un.add_argument("name")
    un.add_argument("args", nargs=argparse.REMAINDER)
    un.set_defaults(func=_cmd_unit)

    rr = sub.add_parser("report", help="(re)write DIR/report.html of a reproduction directory from its saved tables")
    rr.add_argument("dir", help="directory written by posym reproduce")
    rr.add_argument("--screenshot", default=SUPPRESS, help="also save a PNG screenshot (needs Chromium)")
    rr.add_argument("--markdown", action="store_true", default=SUPPRESS,
                    help="print the \"paper vs posym\" table as Markdown instead of writing the report")
    rr.add_argument("--force", action="store_true", default=SUPPRESS,
                    help="replace an existing report.html (and --screenshot file)")
    rr.set_defaults(func=_cmd_report)
