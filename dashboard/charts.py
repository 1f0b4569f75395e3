"""Geometry of the metrics page's small multiples, from recorded builds' metrics (pure).

Each agent gets two charts in a fixed SVG coordinate space (``WIDTH`` by ``HEIGHT``): tokens per
build as bars against a budget line, with over-budget and truncation markers, and the packs'
fate per build as stacked bars. A template only prints the numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from dashboard.presentation import time_text, tokens_text

WIDTH: Final = 520
HEIGHT: Final = 150
LEFT: Final = 48
RIGHT: Final = 10
TOP: Final = 14
BOTTOM: Final = 24
PLOT_W: Final = WIDTH - LEFT - RIGHT
PLOT_H: Final = HEIGHT - TOP - BOTTOM
BASELINE: Final = TOP + PLOT_H
STATUSES: Final = ("full", "compact", "truncated", "skipped")


class BuildLike(Protocol):
    """What a chart needs of a recorded build (``context.selectors.BuildRecord`` fits)."""

    @property
    def id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def iteration(self) -> int: ...
    @property
    def started_at(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def final_tokens(self) -> int: ...
    @property
    def metrics(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class BuildPoint:
    """The numbers of one build that the charts draw."""

    id: int
    iteration: int
    started_at: int
    tokens: int
    budget: int
    over: int
    truncated: bool
    counts: tuple[int, int, int, int]  # packs full, compact, truncated, skipped (budget/guard)

    @property
    def when(self) -> str:
        return time_text(self.started_at)

    @property
    def title(self) -> str:
        marks = (" · over budget" if self.over else "") + (" · truncated" if self.truncated else "")
        return (
            f"iteration {self.iteration} · {self.when} · {self.tokens:,} of "
            f"{tokens_text(self.budget)}{marks}"
        )


def build_point(build: BuildLike) -> BuildPoint:
    """Read one build's metrics (SPEC §6.2), tolerating older or partial shapes."""
    metrics: Mapping[str, Any] = build.metrics if isinstance(build.metrics, Mapping) else {}
    budget = metrics.get("budget") or {}
    total = metrics.get("total") or {}
    truncation = (metrics.get("truncation") or {}).get("maxContextChars") or {}
    counts = dict.fromkeys(STATUSES, 0)
    for pack in metrics.get("packs") or []:
        if pack.get("status") == "included":
            look = "truncated" if pack.get("truncated") else pack.get("variant") or "full"
            counts[look if look in counts else "full"] += 1
        elif pack.get("reason") in ("budget", "max_chars"):
            counts["skipped"] += 1
    return BuildPoint(
        id=build.id,
        iteration=build.iteration,
        started_at=build.started_at,
        tokens=int(total.get("estimatedTokens", build.final_tokens)),
        budget=int(budget.get("maxTokens") or build.max_tokens),
        over=int(budget.get("overBudgetTokens") or 0),
        truncated=bool(truncation.get("applied")),
        counts=(counts["full"], counts["compact"], counts["truncated"], counts["skipped"]),
    )


@dataclass(frozen=True, slots=True)
class Rect:
    """A rectangle in chart coordinates; ``kind`` picks its look (a CSS class)."""

    kind: str
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True, slots=True)
class Marker:
    """An event above a bar: ``over`` draws a diamond, ``truncated`` a triangle."""

    kind: str
    x: float
    y: float
    title: str

    @property
    def points(self) -> str:
        x, y = self.x, self.y
        if self.kind == "over":
            return (
                f"{x:.2f},{y - 5:.2f} {x + 4:.2f},{y:.2f} {x:.2f},{y + 5:.2f} {x - 4:.2f},{y:.2f}"
            )
        return f"{x - 4:.2f},{y - 4:.2f} {x + 4:.2f},{y - 4:.2f} {x:.2f},{y + 4:.2f}"


@dataclass(frozen=True, slots=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True, slots=True)
class AgentCharts:
    """One agent's small multiples and their text alternative."""

    agent_id: str
    points: tuple[BuildPoint, ...]
    token_bars: tuple[Rect, ...]
    budget_path: str
    markers: tuple[Marker, ...]
    token_ticks: tuple[Tick, ...]
    status_bars: tuple[Rect, ...]
    status_ticks: tuple[Tick, ...]
    x_labels: tuple[tuple[float, str], ...]
    summary: str


def _round(value: float) -> float:
    return round(value, 2)


def _slots(n: int) -> tuple[float, float]:
    slot = PLOT_W / max(n, 1)
    return slot, max(1.0, slot * 0.72)


def agent_charts(agent_id: str, builds: Sequence[BuildLike]) -> AgentCharts:
    """Lay out one agent's builds, oldest on the left."""
    points = tuple(sorted((build_point(b) for b in builds), key=lambda p: (p.started_at, p.id)))
    n = len(points)
    slot, bar_w = _slots(n)
    top_value = max([p.tokens for p in points] + [p.budget for p in points] + [1])
    scale = PLOT_H / (top_value * 1.12)

    def y_of(value: float) -> float:
        return _round(BASELINE - value * scale)

    bars: list[Rect] = []
    markers: list[Marker] = []
    path: list[str] = []
    for i, p in enumerate(points):
        x = LEFT + i * slot + (slot - bar_w) / 2
        within = min(p.tokens, p.budget)
        bars.append(
            Rect("tokens", _round(x), y_of(within), _round(bar_w), _round(within * scale), p.title)
        )
        if p.tokens > p.budget:
            bars.append(
                Rect(
                    "over",
                    _round(x),
                    y_of(p.tokens),
                    _round(bar_w),
                    _round((p.tokens - p.budget) * scale),
                    p.title,
                )
            )
        centre = _round(x + bar_w / 2)
        height = y_of(max(p.tokens, p.budget))
        if p.over:
            markers.append(Marker("over", centre, height - 7, f"+{p.over:,} over · {p.title}"))
        if p.truncated:
            lift = 18 if p.over else 7
            markers.append(Marker("truncated", centre, height - lift, f"truncated · {p.title}"))
        step = "M" if i == 0 else "L"
        path.append(f"{step}{_round(LEFT + i * slot)},{y_of(p.budget)}")
        path.append(f"L{_round(LEFT + (i + 1) * slot)},{y_of(p.budget)}")

    # Label 0 and the budgets, largest first, skipping any that would overlap a label.
    token_ticks = [Tick(y_of(0), "0")]
    for b in sorted({p.budget for p in points}, reverse=True):
        if all(abs(y_of(b) - tick.y) >= 11 for tick in token_ticks):
            token_ticks.append(Tick(y_of(b), f"{b:,}"))

    most = max([sum(p.counts) for p in points] + [1])
    count_scale = PLOT_H / most
    status_bars: list[Rect] = []
    for i, p in enumerate(points):
        x = _round(LEFT + i * slot + (slot - bar_w) / 2)
        base = float(BASELINE)
        for kind, count in zip(STATUSES, p.counts, strict=True):
            if count:
                height = count * count_scale
                base -= height
                status_bars.append(
                    Rect(
                        kind,
                        x,
                        _round(base),
                        _round(bar_w),
                        _round(height),
                        f"iteration {p.iteration} · {count} {kind}",
                    )
                )
    status_ticks = (
        Tick(float(BASELINE), "0"),
        Tick(_round(BASELINE - most * count_scale), str(most)),
    )

    every = max(1, n // 8)
    x_labels = tuple(
        (_round(LEFT + (i + 0.5) * slot), f"#{p.iteration}")
        for i, p in enumerate(points)
        if i % every == 0 or i == n - 1
    )
    return AgentCharts(
        agent_id=agent_id,
        points=points,
        token_bars=tuple(bars),
        budget_path=" ".join(path),
        markers=tuple(markers),
        token_ticks=tuple(token_ticks),
        status_bars=tuple(status_bars),
        status_ticks=status_ticks,
        x_labels=x_labels,
        summary=_summary(points),
    )


def _summary(points: Sequence[BuildPoint]) -> str:
    if not points:
        return "No builds."
    over = sum(1 for p in points if p.over)
    cut = sum(1 for p in points if p.truncated)
    median = round(statistics.median(p.tokens for p in points))
    builds = f"{len(points):,} build" + ("" if len(points) == 1 else "s")
    return (
        f"{builds}; median {median:,} tokens against a budget of "
        f"{tokens_text(points[-1].budget)} (latest); newest used {points[-1].tokens:,}; "
        f"{over} over budget; {cut} truncated by the char guard."
    )


def cluster_charts(builds: Sequence[BuildLike]) -> list[AgentCharts]:
    """Small multiples per agent, agents in name order."""
    by_agent: dict[str, list[BuildLike]] = {}
    for build in builds:
        by_agent.setdefault(build.agent_id, []).append(build)
    return [agent_charts(agent, by_agent[agent]) for agent in sorted(by_agent)]


FRAME: Final[dict[str, float]] = {
    "width": WIDTH,
    "height": HEIGHT,
    "left": LEFT,
    "right": WIDTH - RIGHT,
    "baseline": BASELINE,
    "axis_x": LEFT - 6,
    "label_y": HEIGHT - 7,
}
