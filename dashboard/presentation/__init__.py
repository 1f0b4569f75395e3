"""What the inspector and the build diff show, computed from plain data (no ORM, no request).

The views hand these functions a build's decisions in the SPEC §6.2 shape (``metrics["packs"]``)
and get back rows and geometry that a template only has to print: the budget bar in percent of
its width, a reason in words for every decision, and what changed between two builds.

Layout: ``labels`` (how tokens, times and priorities are written), ``decisions`` (a row and a
reason per pack), ``numbers`` (a build's figures, computed once), ``bar`` (the budget bar's
geometry) and ``diff`` (two builds compared).
"""

from __future__ import annotations

from dashboard.presentation.bar import Bar, Segment, bar_geometry
from dashboard.presentation.decisions import DecisionRow, decision_rows, reason_sentence
from dashboard.presentation.diff import ChangeKind, DiffLine, PackChange, pack_diff, prompt_diff
from dashboard.presentation.labels import PRIORITY_LABELS, time_text, tokens_text
from dashboard.presentation.numbers import BuildNumbers, PackNumbers, build_numbers

__all__ = [
    "PRIORITY_LABELS",
    "Bar",
    "BuildNumbers",
    "ChangeKind",
    "DecisionRow",
    "DiffLine",
    "PackChange",
    "PackNumbers",
    "Segment",
    "bar_geometry",
    "build_numbers",
    "decision_rows",
    "pack_diff",
    "prompt_diff",
    "reason_sentence",
    "time_text",
    "tokens_text",
]
