"""Waking workers that wait for a task: in-process, across threads and event loops."""

from __future__ import annotations

import asyncio
import threading


class TasksChanged:
    """Long-polling claims wait here; queuing or freeing a task wakes them all to look again.

    A wake-up is a hint: waiters look again at least every second anyway, which also covers
    tasks queued by another server process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def notify(self) -> None:
        """Wake every waiter (from any thread)."""
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def listen(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        """Set ``event`` on ``loop`` at every notification until ``unlisten``."""
        with self._lock:
            self._waiters.add((loop, event))

    def unlisten(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters.discard((loop, event))

    async def wait(self, timeout: float) -> bool:
        """Wait until notified or ``timeout`` seconds pass; True when notified."""
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.discard(waiter)


tasks_changed = TasksChanged()
