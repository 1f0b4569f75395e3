"""Runs a server module (``python -m MODULE ARGS``) with cProfile on in every thread it starts.

Usage: ``python bench/profiled_server.py OUT.prof MODULE [ARGS...]``. Only ``cpu_profile.py``
starts it. cProfile follows one thread per profiler, and a Django server does its work on the
event loop (main thread) and on the threads of ``sync_to_async`` and the post-commit pipeline: so
each thread gets a profiler of its own, timed by that thread's CPU clock (``time.thread_time``),
and at exit (SIGTERM stops the server cleanly) all of them are merged into one ``pstats`` file.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import runpy
import signal
import sys
import threading
import time
from typing import Any

OUT = sys.argv[1]
MODULE = sys.argv[2]
sys.argv = [MODULE, *sys.argv[3:]]
# The served tree's modules (the working directory, as ``python -m`` puts it first), not the
# copy the virtualenv's editable install points at: ``cpu_profile.py --trees`` serves several.
sys.path.insert(0, os.getcwd())
PROFILES: list[cProfile.Profile] = []
LOCK = threading.Lock()
DUMPED: list[bool] = []
_run = threading.Thread.run


def _profiled_run(self: threading.Thread) -> None:
    profile = cProfile.Profile(time.thread_time)
    with LOCK:
        PROFILES.append(profile)
    profile.enable()
    try:
        _run(self)
    finally:
        profile.disable()


def _dump() -> None:
    # Once: uvicorn re-raises the SIGTERM it caught after its shutdown (the first dump), and the
    # exit's hook must not overwrite that with the few threads that ran after it.
    with LOCK:
        if DUMPED:
            return
        DUMPED.append(True)
        profiles, PROFILES[:] = list(PROFILES), []
    stats: pstats.Stats | None = None
    for profile in profiles:
        # Only the calls that returned: disabling another thread's profiler here would close
        # its open calls (a worker blocked in a wait) on this thread's clock.
        if profile is main:
            profile.disable()
        profile.snapshot_stats()
        if not getattr(profile, "stats", None):
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is not None:
        stats.dump_stats(OUT)


def _terminate(signum: int, frame: Any) -> None:
    _dump()
    raise SystemExit(0)


threading.Thread.run = _profiled_run  # type: ignore[method-assign]
main = cProfile.Profile(time.thread_time)
PROFILES.append(main)
atexit.register(_dump)
# Dump first, whatever the server does with the signal afterwards.
signal.signal(signal.SIGTERM, _terminate)
main.enable()
runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
