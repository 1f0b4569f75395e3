"""The HTTP and websocket side of ``perf_bench.py``: a server as the operator's guide runs it,
agents publishing over keep-alive connections, and dashboard pages listening on websockets.

The server is daphne in a subprocess (``daphne -b 127.0.0.1 -p PORT zeroshot_web.asgi:application``)
over a database migrated with ``manage.py migrate``; its API key comes from
``manage.py create_api_key`` and its operator session from Django's test client. The clients
talk to it only through the public API and the cluster page's websocket URL.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
AGENT = "worker"
PLAIN_TOPIC = "AGENT_OUTPUT"
PROSE = (
    "the plan adds a login button to the header and wires it to the session endpoint "
    "tests cover the happy path and an expired token the validator asks for evidence"
)
WORDS = PROSE.split(" ")
# Everything the server needs besides its database: an operator and the clusters to publish to.
SETUP = """
import json
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from ledger.interfaces import cluster_create
for cluster_id in {clusters!r}:
    cluster_create(cluster_id=cluster_id, state="running")
user = get_user_model().objects.create_user("bench-operator", is_staff=True)
client = Client(HTTP_HOST="127.0.0.1")
client.force_login(user)
name = settings.SESSION_COOKIE_NAME
print(json.dumps({{"cookie": f"{{name}}={{client.cookies[name].value}}"}}))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, -(-int(q * 100) * len(ordered) // 100) - 1)]


class Server:
    """daphne over a fresh database, with an API key and a signed-in operator session."""

    def __init__(
        self, name: str, workdir: Path, database_url: str, redis_url: str | None = None
    ) -> None:
        self.name = name
        self.dir = workdir / f"server-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.dir / "daphne.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "ZEROSHOT_DATA_DIR": str(self.dir),
            "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "bench-only-key-of-a-throwaway-database",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            # Thousands of requests a minute from one key: the limit would answer 429.
            "API_RATE_LIMIT": "",
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("REDIS_URL", None)
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        if redis_url:
            self.env["REDIS_URL"] = redis_url
        self.key = ""
        self.cookie = ""
        self.process: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def prepare(self, clusters: Sequence[str]) -> None:
        """Migrate, create the clusters, an API key and an operator session."""
        self.manage("migrate", "--noinput", "-v", "0")
        self.key = self.manage("create_api_key", "bench-agents").strip().splitlines()[-1]
        out = self.manage("shell", "-c", SETUP.format(clusters=list(clusters)))
        self.cookie = json.loads(out.strip().splitlines()[-1])["cookie"]

    def start(self) -> Server:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "zeroshot_web.asgi:application",
                ],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited early:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"daphne did not listen on {self.port}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (user + system), from /proc."""
        if self.process is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback") if self.log.exists() else 0


# --- publishing over HTTP -----------------------------------------------------------------------


def message_body(rng: random.Random, topic: str, marker: str = "") -> dict[str, Any]:
    text = " ".join(rng.choices(WORDS, k=rng.randint(4, 30)))
    content: dict[str, Any] = {"text": f"{marker} {text}" if marker else text}
    if topic == "WORKER_PROGRESS":
        content["data"] = {"percent": rng.randint(0, 100), "step": "implementing"}
    return {"topic": topic, "sender": AGENT, "content": content}


def request_bodies(
    count: int, *, batch: int, trigger_share: float, trigger_topic: str, seed: int
) -> list[bytes]:
    """Encoded request bodies, made before timing so that the client does little per request."""
    rng = random.Random(seed)

    def topic() -> str:
        return trigger_topic if rng.random() < trigger_share else PLAIN_TOPIC

    bodies = []
    for _ in range(count):
        if batch == 1:
            body: dict[str, Any] = message_body(rng, topic())
        else:
            body = {"messages": [message_body(rng, topic()) for _ in range(batch)]}
        bodies.append(json.dumps(body).encode())
    return bodies


@dataclass(frozen=True, slots=True)
class Load:
    """One HTTP publish load: ``clients`` keep-alive clients, each sending ``requests``."""

    clients: int
    requests: int
    batch: int
    trigger_share: float
    trigger_topic: str


def http_publish(server: Server, cluster_id: str, load: Load, *, seed: int) -> dict[str, Any]:
    """Publish with ``load.clients`` threads at once; messages per second and request latency."""
    path = f"/api/v1/clusters/{cluster_id}/messages" + ("/batch" if load.batch > 1 else "")
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
    per_client = [
        request_bodies(
            load.requests + 2,
            batch=load.batch,
            trigger_share=load.trigger_share,
            trigger_topic=load.trigger_topic,
            seed=seed * 100 + n,
        )
        for n in range(load.clients)
    ]
    latencies: list[list[float]] = [[] for _ in range(load.clients)]
    errors: list[str] = []
    start = threading.Barrier(load.clients + 1)
    finish = threading.Barrier(load.clients + 1)

    def client(n: int) -> None:
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
            bodies = per_client[n]
            try:
                for body in bodies[:2]:  # connect and warm up, untimed
                    http.post(path, content=body).raise_for_status()
            except httpx.HTTPError as error:
                errors.append(repr(error))
            start.wait()
            try:
                for body in bodies[2:]:
                    began = time.perf_counter()
                    answer = http.post(path, content=body)
                    latencies[n].append(time.perf_counter() - began)
                    if answer.status_code != 201:
                        errors.append(f"{answer.status_code} {answer.text[:200]}")
                        break
            except httpx.HTTPError as error:
                errors.append(repr(error))
            finish.wait()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(load.clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began, cpu, server_cpu = time.perf_counter(), time.process_time(), server.cpu_seconds()
    finish.wait()
    wall = time.perf_counter() - began
    cpu, server_cpu = time.process_time() - cpu, server.cpu_seconds() - server_cpu
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{server.name}: {errors[0]}\n{server.log_tail()}")
    flat = [value for values in latencies for value in values]
    messages = len(flat) * load.batch
    return {
        "msg_s": messages / wall,
        "requests": len(flat),
        "p50_ms": 1000 * statistics.median(flat),
        "p99_ms": 1000 * percentile(flat, 0.99),
        "client_cpu": cpu / wall,
        "server_cpu": server_cpu / wall,
    }


# --- websockets ---------------------------------------------------------------------------------

MARKER = re.compile(rb"mk(\d{6})x")


class Socket:
    """A minimal websocket client (RFC 6455) over asyncio streams, enough to listen to a page."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, server: Server, path: str) -> Socket:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: {server.url}\r\nCookie: {server.cookie}\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"websocket refused: {head[:200]!r}")
        return cls(reader, writer)

    async def frame(self) -> tuple[int, bytes]:
        """The next frame's opcode and payload (the server neither masks nor fragments)."""
        first, second = await self.reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", await self.reader.readexactly(8))
        payload = await self.reader.readexactly(length)
        opcode = first & 0x0F
        if opcode == 0x9:  # ping: answer with a masked pong
            self.send(0xA, payload)
        return opcode, payload

    def send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    async def close(self) -> None:
        self.send(0x8, struct.pack(">H", 1000))
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(self.writer.drain(), 2)
        self.writer.close()


class Listeners:
    """``count`` cluster pages (or, with ``agents``, agents' streams of the cluster's messages)
    listening in a thread of their own, noting when each marker arrives on each socket."""

    def __init__(
        self, server: Server, cluster_id: str, count: int, *, agents: bool = False
    ) -> None:
        self.server = server
        self.path = f"/ws/clusters/{cluster_id}/" + ("" if agents else "timeline/")
        self.count = count
        self.received: dict[int, list[float]] = {}
        self.frames = 0  # frames received, on all the sockets
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.sockets: list[Socket] = []
        self.tasks: list[asyncio.Task[None]] = []

    def __enter__(self) -> Listeners:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self.loop).result(timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    async def _open(self) -> None:
        gate = asyncio.Semaphore(20)

        async def one() -> Socket:
            async with gate:
                return await Socket.open(self.server, self.path)

        self.sockets = list(await asyncio.gather(*(one() for _ in range(self.count))))
        self.tasks = [asyncio.ensure_future(self._listen(s)) for s in self.sockets]

    async def _listen(self, sock: Socket) -> None:
        try:
            while True:
                opcode, payload = await sock.frame()
                if opcode == 0x8:
                    code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 0
                    raise RuntimeError(f"the server closed a page socket ({code})")
                now = time.perf_counter()
                found = {int(m.group(1)) for m in MARKER.finditer(payload)}  # once per frame
                with self.lock:
                    self.frames += 1
                    for marker in found:
                        self.received.setdefault(marker, []).append(now)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self.failure = error

    async def _close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sockets), return_exceptions=True)

    def arrivals(self, marker: int) -> list[float]:
        with self.lock:
            return list(self.received.get(marker, ()))


def websocket_publish(
    server: Server,
    cluster_id: str,
    *,
    sockets: int,
    publishes: int,
    seed: int,
    agents: bool = False,
    listeners: Listeners | None = None,
) -> dict[str, Any]:
    """One agent publishing one message at a time while ``sockets`` pages (or, with ``agents``,
    agents' streams) listen: opened here and closed after, or the ``listeners`` given, left
    open (so that a caller can keep their handshakes out of what it measures)."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {server.key}"}
    path = f"/api/v1/clusters/{cluster_id}/messages"
    sent: dict[int, float] = {}
    latencies: list[float] = []
    base = seed * 10_000

    def run(listeners: Listeners | None) -> float:
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
            for _ in range(3):  # warm-up, untimed
                http.post(path, json=message_body(rng, PLAIN_TOPIC)).raise_for_status()
            began = time.perf_counter()
            for n in range(publishes):
                marker = base + n
                body = message_body(rng, PLAIN_TOPIC, marker=f"mk{marker:06d}x")
                started = time.perf_counter()
                sent[marker] = started
                http.post(path, json=body).raise_for_status()
                latencies.append(time.perf_counter() - started)
            wall = time.perf_counter() - began
        if listeners is not None:  # let the last pushes arrive
            deadline = time.perf_counter() + 10
            while time.perf_counter() < deadline:
                if len(listeners.arrivals(base + publishes - 1)) >= sockets:
                    break
                time.sleep(0.01)
        return wall

    push: list[float] = []
    delivered = 0
    if sockets:
        opened = (
            contextlib.nullcontext(listeners)
            if listeners is not None
            else Listeners(server, cluster_id, sockets, agents=agents)
        )
        with opened as listeners:
            wall = run(listeners)
            time.sleep(0.2)
            for marker, started in sent.items():
                arrivals = listeners.arrivals(marker)
                delivered += len(arrivals)
                push.extend(at - started for at in arrivals)
            if listeners.failure is not None:
                raise RuntimeError(f"page socket failed: {listeners.failure!r}")
    else:
        wall = run(None)
    figures: dict[str, Any] = {
        "msg_s": publishes / wall,
        "publish_p50_ms": 1000 * statistics.median(latencies),
    }
    if sockets:
        figures["push_p50_ms"] = 1000 * statistics.median(push) if push else float("nan")
        figures["push_p95_ms"] = 1000 * percentile(push, 0.95) if push else float("nan")
        figures["delivered"] = delivered / (publishes * sockets)
    return figures


def trigger_topic(topics: Mapping[str, Any] | Sequence[str]) -> str:
    """A snapshot-trigger topic an agent publishes often: progress, when the app has it."""
    names = list(topics)
    return "WORKER_PROGRESS" if "WORKER_PROGRESS" in names else names[0]
