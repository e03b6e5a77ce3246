"""``posym train --cuda-graph`` (posym.train.graphs) on the CPU: the graph step's static-buffer body, run
eagerly, equals the loop's step bit for bit (losses, weights, AdamW state, lr schedule; also with CUDA's
explicit dropout masks forced on the CPU: ``posym.model.fast.explicit_dropout``); ``auto`` on the
CPU equals ``off``; ``on`` is refused in one line before any work. The captured graph itself is
checked on a GPU by ``benchmarks/gpu_check.sh`` (captured = eager over 200 steps)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from posym.cli import main
from posym.errors import PosymError
from posym.model import fast
from posym.model.arch import arch_config, build_arch_model
from posym.model.pe import random_positions
from posym.presets import PRESETS
from posym.tasks import get_vocab, make_split
from posym.train import graphs
from posym.train.config import make_config
from posym.train.graphs import GraphStep, _restore, _snapshot, graph_obstacle, make_graph_step
from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer, train, train_step

TINY = PRESETS["tiny"].reproduce["train"]  # the tests' preset: a 2-layer quick model, 30 steps
B = 16


def _setup(pe="rope", **model):
    config = make_config("number", "quick", **{**TINY, "model_overrides": {**TINY["model_overrides"], **model}},
                         warmup=5, batch_size=B, pe=pe)
    mcfg = arch_config("gptj", "quick", get_vocab("number").size, pe=config.pe, **config.model_overrides)
    model = build_arch_model(mcfg, seed=0).train()
    optimizer, scheduler = make_optimizer(model, config)
    return config, model, optimizer, scheduler


def _batches(n_steps, pe="rope"):
    split = make_split("number", "train", seed=0, n=B * n_steps)
    x, y = torch.from_numpy(split.input_ids), torch.from_numpy(split.labels)
    out = []
    for s in range(n_steps):
        pos = random_positions(B, x.shape[1], 64, 0, s) if pe.startswith("randomized") else None
        out.append((x[s * B:(s + 1) * B], y[s * B:(s + 1) * B], pos))
    return out


@pytest.mark.parametrize("case", ["plain", "dropout", "randomized", "bf16", "explicit-dropout"])
def test_the_graph_steps_body_run_eagerly_equals_the_loops_step(case, monkeypatch):
    """30 steps, warmup 5 then decay: losses, weights, AdamW state and lr equal bit for bit. "explicit-dropout":
    both with the masks drawn ahead (CUDA's path, forced on the CPU) and ``randomized:64`` positions."""
    torch.set_num_threads(1)
    if case == "explicit-dropout":
        monkeypatch.setattr(fast, "explicit_dropout", lambda device: True)
    pe = "randomized:64" if case in ("randomized", "explicit-dropout") else "rope"
    model_kw = dict(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1) if "dropout" in case else {}
    precision = "bf16" if case == "bf16" else "fp32"
    batches = _batches(30, pe)
    config, ref, ref_opt, ref_sched = _setup(pe, **model_kw)
    _, model, opt, sched = _setup(pe, **model_kw)
    torch.manual_seed(7)
    if case == "plain":  # the public one-step function
        want = [train_step(ref, ref_opt, ref_sched, x, y, config.max_grad_norm) for x, y, _ in batches]
    else:
        objective = LastTokenLoss(ref)
        want = [_optimizer_step(objective, list(ref.parameters()), ref_opt, ref_sched, x, y, config.max_grad_norm,
                                precision, positions=p).item() for x, y, p in batches]
    torch.manual_seed(7)
    step = GraphStep(LastTokenLoss(model), model.parameters(), opt, sched, config.max_grad_norm, precision,
                     batches[0], capture=False)
    got = [step(x, y, p).item() for x, y, p in batches]
    assert got == want  # bitwise
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(a, b), name
    for a, b in zip(ref.parameters(), model.parameters()):
        for k in ref_opt.state[a]:
            assert torch.equal(ref_opt.state[a][k], opt.state[b][k]), k
    assert sched.get_last_lr() == ref_sched.get_last_lr()
    assert all(type(g["lr"]) is float and not g["capturable"] for g in opt.param_groups)  # checkpoints as eager
    assert opt.state_dict()["param_groups"] == ref_opt.state_dict()["param_groups"]
    if "dropout" in case:
        assert len(set(got)) == len(got)


def test_snapshot_and_restore_undo_warm_up_steps_exactly():
    """What the capture does around its warm-up: a restored model then trains as a fresh one (lazily
    created AdamW state zeroed = never created; existing state copied back)."""
    torch.set_num_threads(1)
    batches = _batches(4)
    config, ref, ref_opt, ref_sched = _setup()
    _, model, opt, sched = _setup()
    for resumed in (False, True):  # first with no AdamW state yet, then with some
        saved = _snapshot(list(model.parameters()), opt)
        for x, y, _ in batches[2:]:  # "warm-up" steps the restore must undo
            train_step(model, opt, type("NoSched", (), {"step": staticmethod(lambda: None)}), x, y, 1.0)
        _restore(saved, list(model.parameters()), opt)
        for x, y, _ in batches[:2] if not resumed else batches[2:]:
            a = train_step(ref, ref_opt, ref_sched, x, y, config.max_grad_norm)
            b = train_step(model, opt, sched, x, y, config.max_grad_norm)
            assert a == b
    for a, b in zip(ref.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_obstacles_and_modes():
    cfg = make_config("number", "quick", **TINY, cuda_graph="on")
    assert graph_obstacle(cfg, "cpu") == "the device is cpu; CUDA graphs need --device cuda"
    assert graph_obstacle(cfg, "cuda") is None
    assert "DDP" in graph_obstacle(cfg, "cuda", world_size=2)
    assert "fp16" in graph_obstacle(make_config("number", "quick", precision="fp16"), "cuda")
    assert "--compile" in graph_obstacle(make_config("number", "quick", compile=True), "cuda")
    assert "llama" in graph_obstacle(make_config("number", "quick", arch="llama"), "cuda")
    with pytest.raises(PosymError, match="unknown cuda_graph 'yes'"):
        make_config("number", "quick", cuda_graph="yes")
    assert "cuda_graph" not in make_config("number", "quick").to_dict()  # posym.json as before
    assert make_config("number", "quick", cuda_graph="auto").to_dict()["cuda_graph"] == "auto"


def test_a_failed_capture_falls_back_under_auto_and_is_refused_under_on(monkeypatch, capsys):
    """Capture raising (here: no CUDA): "auto" trains eagerly after one line, weights untouched; "on" refuses."""
    monkeypatch.setattr(graphs, "graph_obstacle", lambda *a, **k: None)
    config, model, opt, sched = _setup()
    before = [p.detach().clone() for p in model.parameters()]
    auto = make_config("number", "quick", **TINY, cuda_graph="auto")
    assert make_graph_step(auto, LastTokenLoss(model), model, opt, sched, _batches(1)[0], "cpu") is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cuda-graph auto: eager training steps (capture failed" in err
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(PosymError, match="--cuda-graph on: capture failed") as exc:
        make_graph_step(make_config("number", "quick", **TINY, cuda_graph="on"), LastTokenLoss(model), model, opt,
                        sched, _batches(1)[0], "cpu")
    assert "\n" not in str(exc.value)


def test_auto_on_the_cpu_trains_exactly_as_off(tmp_path, capsys):
    torch.set_num_threads(1)
    small = {**TINY, "steps": 6, "eval_every": 3, "checkpoint_every": 3, "track_heads": False}
    train(make_config("number", "quick", **small), tmp_path / "off", progress=False)
    assert capsys.readouterr().err == ""
    train(make_config("number", "quick", **small, cuda_graph="auto"), tmp_path / "auto", progress=False)
    assert "posym: note: --cuda-graph auto: eager training steps (the device is cpu" in capsys.readouterr().err
    m = [(tmp_path / r / "metrics.csv").read_text().splitlines() for r in ("off", "auto")]
    assert [row.rsplit(",", 1)[0] for row in m[0]] == [row.rsplit(",", 1)[0] for row in m[1]]  # all but time_s
    wa, wb = (load_file(str(tmp_path / r / "checkpoints/step-000006/model.safetensors")) for r in ("off", "auto"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert "cuda_graph" not in json.loads((tmp_path / "off/posym.json").read_text())["config"]
    assert json.loads((tmp_path / "auto/posym.json").read_text())["config"]["cuda_graph"] == "auto"


def test_on_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    with pytest.raises(PosymError, match=r"^--cuda-graph on: cannot capture the training step: the device is cpu"):
        train(make_config("number", "quick", **TINY, cuda_graph="on"), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    rc = main(["train", "--task", "number", "--out", str(tmp_path / "cli"), "--cuda-graph", "on", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--cuda-graph on: cannot capture" in err
    assert not (tmp_path / "cli").exists()


class _FakeGraph:
    """``torch.cuda.CUDAGraph`` on the CPU: "capture" runs the body once (a real capture only records it),
    ``replay()`` runs it again into the captured loss tensor, with the device lr in place as the graph reads it."""

    current: "_FakeGraph | None" = None

    def __init__(self):
        self.step = None

    def replay(self):
        with self.step._device_lr():
            loss = self.step._body()
        self.step.loss.copy_(loss)


@pytest.mark.parametrize("explicit", [False, True])
def test_capture_bookkeeping_on_the_cpu_with_a_stand_in_graph(monkeypatch, explicit):
    """The capture's warm-up, restore (weights, AdamW state, RNG) and replay order, with CUDA stood in for
    on the CPU: the "captured" run equals the loop's step bit for bit, dropout included (``explicit``: the
    masks drawn inside the step ahead of the forward, as on CUDA; the eager reference draws implicitly)."""
    import contextlib

    class Stream:
        def __init__(self, *a):
            pass

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def graph(g):
        _FakeGraph.current = g
        yield
        _FakeGraph.current = None

    body = GraphStep._body

    def recording_body(self):
        if _FakeGraph.current is not None:
            _FakeGraph.current.step = self
        return body(self)

    for name, value in dict(Stream=Stream, current_stream=lambda *a: Stream(), stream=lambda s: contextlib.nullcontext(),
                            CUDAGraph=_FakeGraph, graph=graph, get_rng_state=lambda *a: torch.get_rng_state(),
                            set_rng_state=lambda state, *a: torch.set_rng_state(state)).items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(GraphStep, "_body", recording_body)
    torch.set_num_threads(1)
    drop = dict(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    batches = _batches(12)
    config, ref, ref_opt, ref_sched = _setup(**drop)
    _, model, opt, sched = _setup(**drop)
    torch.manual_seed(3)
    want = [train_step(ref, ref_opt, ref_sched, x, y, config.max_grad_norm) for x, y, _ in batches]
    rng_after = torch.get_rng_state()
    if explicit:  # from here on the masks are drawn ahead, inside the captured step
        monkeypatch.setattr(fast, "explicit_dropout", lambda device: True)
    torch.manual_seed(3)
    step = GraphStep(LastTokenLoss(model), model.parameters(), opt, sched, config.max_grad_norm, "fp32", batches[0],
                     capture=True)
    assert step.graph is not None and step.graph.step is step
    got = [step(x, y).item() for x, y, _ in batches]
    assert got == want
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), model.parameters()))
    assert torch.equal(torch.get_rng_state(), rng_after)  # the dropout stream is where eager's is
    assert opt.state_dict()["param_groups"] == ref_opt.state_dict()["param_groups"]
