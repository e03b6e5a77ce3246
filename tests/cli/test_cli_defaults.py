"""The CLI's defaults live once: every option of every sub-command is declared with ``default=SUPPRESS``
(or None), so a verb is called with only the options the user gave and its signature holds the default;
the few options whose CLI default intentionally differs are listed in ``posym.cli.common.OWN_DEFAULTS``.
Every sub-command's ``--help`` works, and ``posym --help`` / ``posym scores --help`` import no torch."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from posym.cli import build_parser, main
from posym.cli.common import OWN_DEFAULTS


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every leaf sub-command as ("llm heads", its parser)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(prefix, parser)]
    return [leaf for name, p in subs[0].choices.items() for leaf in _commands(p, f"{prefix} {name}".strip())]


COMMANDS = _commands(build_parser())


def test_every_command_is_walked():
    names = {name for name, _ in COMMANDS}
    assert {"train", "scores", "llm eval", "llm heads", "head-types", "theory discrepancy", "reproduce"} <= names
    assert len(names) == 27


@pytest.mark.parametrize("name, parser", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_no_option_spells_a_default_twice(name, parser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.required:
            continue
        if (name, action.dest) in OWN_DEFAULTS:
            assert action.default not in (None, argparse.SUPPRESS), (name, action.dest)
            continue
        assert action.default in (argparse.SUPPRESS, None), \
            f"posym {name} {action.option_strings or action.dest}: default {action.default!r} duplicates the verb's"


def test_own_defaults_name_real_options():
    known = {(name, a.dest) for name, p in COMMANDS for a in p._actions}
    assert set(OWN_DEFAULTS) <= known


def test_flow_example_and_export_defaults_differ_from_the_verbs():
    """The documented exceptions really have no verb default (or another one)."""
    import inspect

    from posym.verbs.data import export
    from posym.verbs.flow import flow

    assert inspect.signature(flow).parameters["examples"].default is None  # the verb needs examples or hops
    assert all(inspect.signature(export).parameters[p].default is inspect.Parameter.empty for p in ("split", "n"))


def test_head_types_sources_are_the_verbs():
    from posym.cli.studies import SOURCES
    from posym.studies.head_types import PROMPT_SOURCES

    assert tuple(SOURCES) == tuple(PROMPT_SOURCES)


@pytest.mark.parametrize("argv", [name.split() for name, _ in COMMANDS if not name.startswith("_")] + [[]],
                         ids=[n for n, _ in COMMANDS if not n.startswith("_")] + ["posym"])
def test_help_of_every_command(argv, capsys):
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: posym") and "%(" not in out


def test_help_shows_the_verbs_defaults(capsys):
    """Defaults in help texts are read from the signatures when --help is formatted."""
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 50)" in text and "(default 250)" in text and "tracking (512)" in text
    assert main(["dynamics", "--help"]) == 0
    assert "(repeatable; 0.1)" in " ".join(capsys.readouterr().out.split())


def test_tiny_preset_is_accepted_but_not_listed(capsys):
    assert main(["reproduce", "--help"]) == 0
    text = capsys.readouterr().out
    assert "{quick,paper}" in text and "{quick,paper,tiny}" not in text
    args = build_parser().parse_args(["reproduce", "--preset", "tiny", "--out", "x"])
    assert args.preset == "tiny"


@pytest.mark.parametrize("argv", [["--help"], ["scores", "--help"], ["llm", "heads", "--help"]])
def test_help_imports_no_torch(argv):
    code = f"import sys; from posym.cli import main; main({argv!r}); print('torch' in sys.modules, file=sys.stderr)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stderr.strip().splitlines()[-1] == "False"


def test_an_option_not_given_is_not_passed(monkeypatch):
    """``posym ablate RUN`` calls the verb with no option (its signature's defaults apply)."""
    import posym.verbs.ablate
    from posym.verbs import VerbResult

    seen = {}
    monkeypatch.setattr(posym.verbs.ablate, "ablate", lambda *a, **kw: seen.update(args=a, kw=kw) or VerbResult())
    assert main(["ablate", "RUN"]) == 0
    assert seen == {"args": ("RUN",), "kw": {}}
    assert main(["ablate", "RUN", "--n", "7", "--force"]) == 0
    assert seen["kw"] == {"n": 7, "force": True}


@pytest.mark.parametrize("command", ["sensitivity", "pe-study"])
def test_a_variant_given_twice_is_one_line(command, capsys):
    assert main([command, "a=x", "a=y", "--out", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("posym: error: ") and "variant 'a' given twice" in err[0]
