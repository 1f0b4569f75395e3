"""What a task's life tells whoever listens: the operator's metrics and traces (``operations``).

Each is sent after its transaction committed, on the thread that did the work, with wall-clock
times in nanoseconds. A receiver must be quick and must not raise (``operations`` catches its
own errors); with no receiver a send costs next to nothing.

- ``task_claimed``: ``claim`` (a ``Claim``), ``started_ns``, ``ended_ns``.
- ``task_completed``: ``completion`` (a ``Completion``), ``started_ns``, ``ended_ns`` and
  ``hook_ns`` (the hook's start and end, or ``None`` when an earlier call had completed it).
- ``task_failed``: ``task`` (the ``TaskRecord`` after a runner's fail call: queued again for a
  retry, or failed for good) and ``ended_ns``.
"""

from __future__ import annotations

from django.dispatch import Signal

task_claimed = Signal()
task_completed = Signal()
task_failed = Signal()
