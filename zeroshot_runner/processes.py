"""Ending a whole process group: the agent and everything it started, with no orphans left."""

from __future__ import annotations

import os
import signal
import time

_POLL = 0.02
# After SIGKILL the kernel needs a moment to take the processes down.
_KILL_SETTLE = 1.0


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies, which are dead, do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc"):
        return True
    # killpg also reaches zombies: an orphan whose new parent never reaps it stays one for good.
    # /proc tells them apart from processes that still run.
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as stat:
                line = stat.read()
        except OSError:
            continue
        # The command name, in parentheses, may itself hold spaces and parentheses.
        fields = line[line.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def end_group(pgid: int, *, grace: float) -> None:
    """SIGTERM the group, wait up to ``grace`` seconds for it to go, then SIGKILL what is left."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    if _wait_gone(pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    _wait_gone(pgid, _KILL_SETTLE)


def _signal_group(pgid: int, signum: signal.Signals) -> bool:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True
