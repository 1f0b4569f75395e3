"""The sandbox process: evaluates logic scripts in QuickJS, one fresh runtime per script.

Started by ``runs.logic.engine`` as ``python -I sandbox_worker.py`` and driven over its standard
input and output, it imports nothing but the standard library and ``quickjs`` (it runs outside
the project's import path). Each request is a frame: a 4-byte big-endian length and a JSON
header ``{mode, strict, time_limit, memory_limit, view_key, sizes}``, then the raw UTF-8 parts
whose byte sizes the header lists: the script, the scope JSON, and — unless ``view_key`` names
the view sent last time — the view's index JSON and its blob. Each reply is one frame of JSON:
the prelude's report, or ``{"error": {kind, message}}``; ``"recycle": true`` asks the engine
not to reuse this process.

Why a process of its own: QuickJS cannot interrupt some built-ins and can crash after hitting
its memory limit (``docs/decisions/0030-logic-script-engine.md``). Here a crash or a kill costs
one process, never the server.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import quickjs

PRELUDE = (Path(__file__).resolve().parent / "prelude.js").read_text(encoding="utf-8")
# A backstop behind the QuickJS cap: an allocation that escapes it still cannot take the machine.
ADDRESS_SPACE_LIMIT = 2 * 1024 * 1024 * 1024
_HEADER = 4


def main() -> None:
    """Serve requests until standard input closes or the engine's process goes away."""
    _limit_address_space()
    _exit_with_parent(os.getppid())
    # Ctrl-C in a terminal reaches the whole process group: stopping is the engine's decision.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    view_key: int | None = None
    index_json, blob = "", ""
    while (header := _read_frame(source)) is not None:
        request = json.loads(header)
        parts = [_read_exact(source, size).decode("utf-8") for size in request["sizes"]]
        script, scope_json = parts[0], parts[1]
        if len(parts) == 4:
            view_key, index_json, blob = request["view_key"], parts[2], parts[3]
        elif request["view_key"] != view_key:
            raise RuntimeError("the engine referred to a view this process never received")
        reply = evaluate(request, script=script, scope_json=scope_json, view=(index_json, blob))
        _write_frame(sink, json.dumps(reply).encode("utf-8"))
        if reply.get("recycle"):
            return


def evaluate(
    request: dict[str, Any], *, script: str, scope_json: str, view: tuple[str, str]
) -> dict[str, Any]:
    """Run one script in a new runtime and return the prelude's report or the error."""
    context = quickjs.Context()
    context.set_memory_limit(request["memory_limit"])
    context.set_time_limit(request["time_limit"])
    try:
        context.set("__zsScope", scope_json)
        context.set("__zsIndex", view[0])
        context.set("__zsBlob", view[1])
        context.eval(PRELUDE)
        report = context.eval(_wrapped(script, request["mode"], request["strict"]))
    except quickjs.StackOverflow:
        return _error("script", "InternalError: stack overflow")
    except quickjs.JSException as exc:
        return _classified(str(exc))
    if not isinstance(report, str):
        return _error("script", "the script replaced the sandbox's reporting function")
    try:
        outcome: dict[str, Any] = json.loads(report)
    except RecursionError:
        return _error("script", "the script returned a value nested too deeply to be read")
    if "thrown" in outcome:
        if outcome["thrown"] == "null" and not _near_memory_limit(context):
            # The prelude caught it and the heap has room: the script threw null itself. The
            # process is not reused all the same, in case it was a failed allocation after all.
            return {**_error("script", "the script threw null"), "recycle": True}
        return _classified(str(outcome["thrown"]))
    return outcome


def _near_memory_limit(context: Any) -> bool:
    memory = context.memory()
    return bool(memory["malloc_size"] >= 0.9 * memory["malloc_limit"])


def _wrapped(script: str, mode: str, strict: bool) -> str:
    # The body starts on the first line, so error line numbers are the script's own; the final
    # newline ends a trailing line comment.
    use_strict = "'use strict'; " if strict else ""
    return f"__zsRun(function () {{ {use_strict}{script}\n}}, {json.dumps(mode)})"


def _classified(text: str) -> dict[str, Any]:
    if text.startswith("InternalError: interrupted"):
        return _error("timeout", "")
    # QuickJS throws null when it runs out of memory again while raising its out-of-memory
    # error; a script that throws null itself is taken for one that ran out of memory.
    if text.startswith("InternalError: out of memory") or text.split("\n")[0] == "null":
        # QuickJS can misbehave after a failed allocation: this process is not used again.
        return {**_error("memory", ""), "recycle": True}
    return _error("script", text.replace("<input>", "script").strip())


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


def _limit_address_space() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = (
        ADDRESS_SPACE_LIMIT if hard == resource.RLIM_INFINITY else min(hard, ADDRESS_SPACE_LIMIT)
    )
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _exit_with_parent(parent: int) -> None:
    # QuickJS releases the GIL while it runs, so this thread still notices an orphaned process
    # when a script is stuck in a built-in that never checks its time limit.
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _read_frame(source: BinaryIO) -> bytes | None:
    head = source.read(_HEADER)
    if len(head) < _HEADER:
        return None
    return _read_exact(source, int.from_bytes(head, "big"))


def _read_exact(source: BinaryIO, size: int) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise EOFError("the engine closed the pipe in the middle of a request")
    return data


def _write_frame(sink: BinaryIO, payload: bytes) -> None:
    sink.write(len(payload).to_bytes(_HEADER, "big") + payload)
    sink.flush()


if __name__ == "__main__":
    main()
