"""OpenAI-compatible client against a local stub server: retries, rate limits, keys, resume."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posym.errors import PosymError
from posym.lengthgen.api import ChatClient, RateLimiter
from posym.lengthgen.llm_eval import llm_eval, load_cache
from posym.tasks.prompts import solve_sequence

GRID = dict(tasks=("number", "letter"), lengths=(5, 12), runs=2, n=4, progress=False)


class Stub(ThreadingHTTPServer):
    """Chat-completions stub: fails with ``plan`` status codes first, then solves the prompt."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.plan: list[int] = []  # status codes to answer before succeeding (popped per request)
        self.fail_after: int | None = None  # answer 400 to every request after this many answers
        self.requests: list[dict] = []
        self.answered: list[str] = []  # questions (last user message) answered successfully
        self.headers_seen: list[dict] = []
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, code: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        srv: Stub = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        with srv.lock:
            srv.requests.append(body)
            srv.headers_seen.append(dict(self.headers))
            code = srv.plan.pop(0) if srv.plan else 200
            if srv.fail_after is not None and len(srv.answered) >= srv.fail_after:
                code = 400
            if code == 200:
                srv.answered.append(question)
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": "not found"}})
        if code != 200:
            hdr = {"Retry-After": "0"} if code == 429 else None
            return self._send(code, {"error": {"message": f"stub says {code}"}}, hdr)
        ans = solve_sequence(question)
        self._send(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": ans},
                                      "finish_reason": "stop"}]})


@pytest.fixture
def stub():
    srv = Stub()
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


MSGS = [{"role": "system", "content": "solve"}, {"role": "user", "content": "a z b y c x d w 5"}]


def test_chat_roundtrip_payload_and_key(stub, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sekret")
    c = ChatClient(stub.base, "stub-model", api_key_env="MY_KEY", max_tokens=5)
    assert c.chat(MSGS) == "y"
    body = stub.requests[-1]
    assert body["model"] == "stub-model" and body["messages"] == MSGS
    assert body["temperature"] == 0 and body["max_tokens"] == 5
    assert stub.headers_seen[-1]["Authorization"] == "Bearer sekret"
    monkeypatch.delenv("MY_KEY")
    ChatClient(stub.base + "/chat/completions", "m", api_key_env="MY_KEY").chat(MSGS)
    assert "Authorization" not in stub.headers_seen[-1]


def test_retries_on_429_and_5xx(stub):
    stub.plan = [429, 500, 503, 502]
    sleeps: list[float] = []
    c = ChatClient(stub.base, "m", backoff=0.5, max_backoff=3.0, sleep=sleeps.append)
    assert c.chat(MSGS) == "y"
    assert c.n_requests == 5 and c.n_retries == 4
    assert sleeps[0] == 0.0  # Retry-After: 0 of the 429
    assert 0.5 * 2 <= sleeps[1] <= 0.5 * 2 * 1.1 and 2.0 <= sleeps[2] <= 2.2 and 3.0 <= sleeps[3] <= 3.3


def test_gives_up_and_non_retryable_errors(stub):
    stub.plan = [500] * 10
    c = ChatClient(stub.base, "m", max_retries=2, sleep=lambda s: None)
    with pytest.raises(PosymError, match="after 3 attempts"):
        c.chat(MSGS)
    stub.plan = [400]
    with pytest.raises(PosymError, match="API error 400"):
        ChatClient(stub.base, "m", sleep=lambda s: None).chat(MSGS)
    stub.plan = [401]
    with pytest.raises(PosymError, match=r"\$SOME_KEY"):
        ChatClient(stub.base, "m", api_key_env="SOME_KEY", sleep=lambda s: None).chat(MSGS)
    with pytest.raises(PosymError):
        ChatClient("ftp://x", "m")


def test_timeouts_and_connection_errors_are_retried(stub):
    port = stub.server_address[1]
    stub.shutdown()
    stub.server_close()  # nothing listens any more: connection refused
    sleeps: list[float] = []
    c = ChatClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, timeout=0.5, sleep=sleeps.append)
    with pytest.raises(PosymError, match="after 3 attempts"):
        c.chat(MSGS)
    assert len(sleeps) == 2


def test_rate_limiter_with_fake_clock():
    now = [0.0]

    def sleep(s):
        now[0] += s

    rl = RateLimiter(max_per_second=2, max_per_minute=5, clock=lambda: now[0], sleep=sleep)
    starts = []
    for _ in range(7):
        rl.acquire()
        starts.append(now[0])
    assert starts[:2] == [0.0, 0.0] and starts[2] == pytest.approx(1.0) and starts[3] == pytest.approx(1.0)
    assert starts[4] == pytest.approx(2.0)
    assert starts[5] == pytest.approx(60.0) and starts[6] == pytest.approx(60.0)
    for a in range(len(starts)):  # never more than 2 in 1 s or 5 in 60 s
        assert sum(1 for t in starts if starts[a] <= t < starts[a] + 1 - 1e-9) <= 2
        assert sum(1 for t in starts if starts[a] <= t < starts[a] + 60 - 1e-9) <= 5
    now[0] = 0.0
    slow = RateLimiter(max_per_second=0.5, clock=lambda: now[0], sleep=sleep)
    slow.acquire(), slow.acquire()
    assert now[0] == pytest.approx(2.0)
    with pytest.raises(PosymError):
        RateLimiter(max_per_minute=0)


def test_rate_limit_real_clock(stub):
    c = ChatClient(stub.base, "m", max_per_second=20)
    t = time.monotonic()
    for _ in range(25):
        c.chat(MSGS)
    assert time.monotonic() - t >= 0.2  # 25 requests at <= 20/s need more than 1 window


@pytest.mark.parametrize("concurrency", [1, 3])
def test_llm_eval_api_interrupt_and_resume(stub, tmp_path, concurrency):
    total = 2 * 2 * 2 * 4
    stub.fail_after = 7  # "interrupt": after 7 answers every request fails (non-retryable)
    with pytest.raises(PosymError, match="API error 400"):
        llm_eval(api_base=stub.base, api_model="stub", out=tmp_path, concurrency=concurrency,
                       backoff=0.01, **GRID)
    first = list(stub.answered)
    assert len(first) == 7 and len(load_cache(tmp_path / "answers.jsonl")) == 7
    stub.fail_after = None
    stub.plan = [429, 500]  # a couple of transient failures on resume
    res = llm_eval(api_base=stub.base, api_model="stub", out=tmp_path, concurrency=concurrency,
                       backoff=0.01, **GRID)
    assert res.n_cached == 7 and res.n_new == total - 7
    assert len(stub.answered) == len(set(stub.answered)) == total  # no question answered twice
    assert (res.table["mean"] == 1.0).all() and (res.table["runs"] == 2).all()
    # everything cached now: a rerun sends no request at all
    n_req = len(stub.requests)
    llm_eval(api_base=stub.base, api_model="stub", out=tmp_path, **GRID)
    assert len(stub.requests) == n_req


def test_llm_eval_api_argument_errors(tmp_path):
    with pytest.raises(PosymError, match="both"):
        llm_eval(api_base="http://127.0.0.1:9/v1", out=tmp_path, **GRID)
    with pytest.raises(PosymError, match="not both"):
        llm_eval("some/model", api_base="http://127.0.0.1:9/v1", api_model="m", out=tmp_path, **GRID)


def test_cli_llm_eval_api_flags(stub, tmp_path, capsys):
    from posym.cli import main

    rc = main(["llm", "eval", "--api-base", stub.base, "--api-model", "stub", "--tasks", "letter",
               "--lengths", "5,12", "--runs", "2", "--n", "3", "--concurrency", "2", "--max-per-minute", "6000",
               "--max-retries", "2", "--timeout", "5", "--quiet", "--out", str(tmp_path)])
    assert rc in (0, None)
    assert len(stub.answered) == 2 * 2 * 3  # letter only
    assert all(r["model"] == "stub" for r in stub.requests)
    import pandas as pd

    assert "letter" in capsys.readouterr().out
    assert set(pd.read_csv(tmp_path / "llm_table.csv")["task"]) == {"letter"}
    assert (tmp_path / "figures" / "llm_lengthgen.png").exists()


def test_choice_protocol_is_refused_for_api_models_before_any_request(stub, tmp_path, capsys):
    from posym.cli import main

    rc = main(["llm", "eval", "--api-base", stub.base, "--api-model", "stub", "--protocol", "choice",
               "--n", "2", "--quiet", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "log-probability" in err[0]
    assert stub.requests == [] and not (tmp_path / "o").exists()
