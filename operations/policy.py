"""What retention keeps, parsed once from the command line or the settings (no Django).

``--older-than 30d`` and ``--state completed,failed`` become a ``RetentionPolicy``; every later
reader takes that type. Only ended clusters can be pruned: a live one is still being written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENDED_STATES: tuple[str, ...] = ("completed", "failed", "stopped", "killed")
_UNITS_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
_AGE = re.compile(r"([1-9][0-9]{0,5})([mhdw])")


class PolicyError(ValueError):
    """A retention option that cannot be read; the message says what is expected."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Prune clusters in one of ``states`` with no activity for ``older_than_ms``."""

    older_than_ms: int
    states: tuple[str, ...]

    @classmethod
    def parse(cls, *, older_than: str, states: str = "") -> RetentionPolicy:
        return cls(older_than_ms=age_parse(older_than), states=states_parse(states))

    def cutoff(self, *, now_ms: int) -> int:
        """Clusters whose last activity is before this timestamp (ms) are old enough."""
        return now_ms - self.older_than_ms


def age_parse(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``2w`` in milliseconds."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise PolicyError(
            f"an age is a whole number and a unit (m, h, d or w), such as 30d; got {text!r}"
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


def states_parse(text: str) -> tuple[str, ...]:
    """A comma-separated list of ended states; empty means every ended state."""
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        return ENDED_STATES
    unknown = [name for name in names if name not in ENDED_STATES]
    if unknown:
        raise PolicyError(
            f"only ended clusters can be pruned: states are among {', '.join(ENDED_STATES)}; "
            f"got {', '.join(unknown)}"
        )
    return names
