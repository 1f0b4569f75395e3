"""What the context engine tells whoever listens (the operator's metrics and traces).

Sent after a build is made, preview or recorded, with ``outcome`` (a ``BuildOutcome``) and its
wall-clock ``started_ns`` and ``ended_ns``. A receiver must be quick and must not raise: it runs
on the building thread (``operations`` connects one; nothing else does).
"""

from __future__ import annotations

from django.dispatch import Signal

build_done = Signal()
