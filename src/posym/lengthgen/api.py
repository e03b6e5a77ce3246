"""OpenAI-compatible chat endpoints for the 1-hop prompt protocol (SPEC §1.5), standard library only.

:class:`ChatClient` posts ``{"model", "messages", "temperature": 0, "max_tokens"}`` to
``<api_base>/chat/completions`` (``api_base`` such as ``https://host/v1``; a base that already ends
in ``/chat/completions`` is used as is) and returns ``choices[0].message.content``.

* **Key**: read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``) and sent
  as ``Authorization: Bearer …``; when the variable is unset no header is sent (local servers), and a
  401/403 answer names the variable.
* **Retries**: HTTP 408/409/425/429 and 5xx, timeouts and connection errors are retried with
  exponential backoff (``backoff * 2**attempt``, capped at ``max_backoff``, plus up to 10 % jitter;
  a ``Retry-After`` header in seconds takes precedence, capped the same); other 4xx fail at once.
  After ``max_retries`` retries a :class:`~posym.errors.PosymError` is raised.
* **Rate limits**: :class:`RateLimiter` keeps at most ``max_per_second`` and ``max_per_minute``
  request starts in any sliding 1 s / 60 s window (thread safe; shared by concurrent workers).
"""

from __future__ import annotations

import collections
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Sequence

from posym.errors import PosymError

RETRY_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class RateLimiter:
    """Blocks in :meth:`acquire` until starting one more request keeps both windows within limits."""

    def __init__(self, max_per_second: float | None = None, max_per_minute: float | None = None, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.limits: list[tuple[float, int]] = []  # (window seconds, max starts in the window)
        for name, v, window in (("max_per_second", max_per_second, 1.0),
                                ("max_per_minute", max_per_minute, 60.0)):
            if v is None:
                continue
            if v <= 0:
                raise PosymError(f"{name} must be positive, got {v}")
            # a fractional cap (e.g. 0.5/s) becomes one request per 1/v of the unit
            self.limits.append((window, int(v)) if v >= 1 else (window / v, 1))
        self.horizon = max((w for w, _ in self.limits), default=0.0)
        self.clock, self.sleep = clock, sleep
        self._starts: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def _wait_time(self, now: float) -> float:
        while self._starts and now - self._starts[0] >= self.horizon:
            self._starts.popleft()
        wait = 0.0
        for window, cap in self.limits:
            recent = [t for t in self._starts if now - t < window]
            if len(recent) >= cap:
                wait = max(wait, recent[len(recent) - cap] + window - now)
        return wait

    def acquire(self) -> None:
        if not self.limits:
            return
        with self._lock:
            while True:
                now = self.clock()
                wait = self._wait_time(now)
                if wait <= 0:
                    self._starts.append(now)
                    return
                self.sleep(wait)


class ChatClient:
    """Minimal OpenAI-compatible chat-completions client with retries and rate limiting."""

    def __init__(self, api_base: str, model: str, *, api_key_env: str = DEFAULT_KEY_ENV,
                 api_key: str | None = None, max_tokens: int = 16, temperature: float = 0.0,
                 timeout: float = 60.0, max_retries: int = 6, backoff: float = 1.0,
                 max_backoff: float = 60.0, max_per_second: float | None = None,
                 max_per_minute: float | None = None, extra_body: dict[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        if not api_base or not model:
            raise PosymError("an API run needs both --api-base URL and --api-model NAME")
        if not api_base.startswith(("http://", "https://")):
            raise PosymError(f"api base must be an http(s) URL, got {api_base!r}")
        base = api_base.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.extra_body = dict(extra_body or {})
        self.sleep = sleep
        self.limiter = RateLimiter(max_per_second, max_per_minute, sleep=sleep)
        self.n_requests = 0  # HTTP requests sent (including retried ones)
        self.n_retries = 0
        self._count_lock = threading.Lock()

    @property
    def label(self) -> str:
        """Identifier of the endpoint + model (part of every cache key)."""
        return f"api:{self.url}::{self.model}"

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass
        d = min(self.max_backoff, self.backoff * (2 ** attempt))
        return d * (1.0 + 0.1 * random.random())

    def _post(self, body: bytes) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def chat(self, messages: Sequence[dict[str, str]]) -> str:
        """The assistant's reply to ``messages`` (retried and rate limited as documented)."""
        payload = {"model": self.model, "messages": list(messages), "temperature": self.temperature,
                   "max_tokens": self.max_tokens, **self.extra_body}
        body = json.dumps(payload).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            self.limiter.acquire()
            with self._count_lock:
                self.n_requests += 1
            retry_after = None
            try:
                data = self._post(body)
                return _content(data)
            except urllib.error.HTTPError as e:
                detail = _error_text(e)
                if e.code in (401, 403):
                    raise PosymError(f"API refused the request ({e.code}): {detail}; check the key in "
                                     f"${self.api_key_env}") from None
                if e.code not in RETRY_STATUS:
                    raise PosymError(f"API error {e.code} from {self.url}: {detail}") from None
                last, retry_after = f"HTTP {e.code}: {detail}", e.headers.get("Retry-After")
            except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                last = f"malformed response: {e}"
            if attempt < self.max_retries:
                with self._count_lock:
                    self.n_retries += 1
                self.sleep(self._delay(attempt, retry_after))
        raise PosymError(f"API request to {self.url} failed after {self.max_retries + 1} attempts ({last})")

    def __call__(self, prompts: Sequence[Sequence[dict[str, str]]]) -> list[str]:
        return [self.chat(m) for m in prompts]


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        raw = e.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001
        raw = ""
    try:
        msg = json.loads(raw)["error"]
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
        return str(msg)[:300]
    except Exception:  # noqa: BLE001
        return (raw.strip() or e.reason or "").__str__()[:300]


def _content(data: dict) -> str:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise PosymError(f"unexpected API response (no choices[0].message.content): {str(data)[:300]}") from None
    if content is None:
        return ""
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)
