"""An OpenAI-compatible chat-completions endpoint in memory, served over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


def completion(content: str, *, prompt_tokens: int = 12, completion_tokens: int = 7) -> Any:
    """A chat-completions answer with one choice."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "local-model-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class FakeOpenAI:
    """Answers queued answers in order, then ``default``; records every request."""

    def __init__(self, default: Any) -> None:
        self.default = default
        self.answers: list[Answer] = []
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self._lock = threading.Lock()
        self.url = ""

    def queue(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.answers.append(Answer(status, body, headers or {}))

    def _next(self, path: str, headers: dict[str, str], body: Any) -> Answer:
        with self._lock:
            self.requests.append((path, headers, body))
            if self.answers:
                return self.answers.pop(0)
        return Answer(200, self.default, {})

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the second one waits for
            # the client's delayed ACK (40 ms a request on Linux).
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                answer = fake._next(self.path, dict(self.headers), body)
                data = (
                    answer.body.encode()
                    if isinstance(answer.body, str)
                    else json.dumps(answer.body).encode()
                )
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
