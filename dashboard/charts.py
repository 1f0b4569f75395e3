"""The metrics page's numbers and chart geometry, from recorded builds' metrics (pure).

Per agent, two small multiples share one x axis (builds in time order, labelled with their
time): tokens per build against the budget line, with over-budget and truncation markers, and
the packs' fate per build as stacked columns. Above them, a summary of the cluster and one row
per agent. Each agent's chart has its own scale: budgets differ by 100x across agents, and a
budget far above what an agent uses is named at the top edge instead of flattening its columns.
A template only prints the numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from context.metrics import build_total
from dashboard.presentation import time_text

STATUSES: Final = ("full", "compact", "truncated", "skipped")
# A budget more than this many times the largest build is drawn off the scale.
OFF_SCALE_RATIO: Final = 4
# Time labels under a chart: at each width tier (``static/css/inspector.css`` hides a tier's
# labels below its viewport), the least width the plot has there, in pixels. Every label of a
# tier gets its estimated width (11 px tabular digits, as the page writes each style) plus a gap.
X_TICK_TIERS: Final = (("narrow", 220.0), ("wide", 500.0))
X_LABEL_CHARS: Final = {"seconds": 8, "minutes": 5, "days": 13}
X_CHAR_PX: Final = 6.6
X_LABEL_GAP_PX: Final = 12.0
# The widest a column gets, in percent of the plot.
MAX_COLUMN_WIDTH: Final = 7.0


@dataclass(frozen=True, slots=True)
class Frame:
    """A chart's height in pixels and its plot area's top and bottom margins.

    Charts are drawn like the budget bar: x in percent of the width, y in pixels, so that they
    fill any width while their text keeps its size (a scaled viewBox would shrink it to
    nothing on a phone). The axis labels live in narrow SVGs of their own beside the plot.
    """

    height: int
    top: int
    bottom: int

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def baseline(self) -> float:
        return self.top + self.plot_h

    @property
    def label_y(self) -> float:
        return self.baseline + 16


TOKENS_FRAME: Final = Frame(height=190, top=18, bottom=24)
STATUS_FRAME: Final = Frame(height=84, top=8, bottom=6)


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
    @property
    def reported_input_tokens(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class BuildPoint:
    """The numbers of one build that the charts and tables show."""

    id: int
    iteration: int
    started_at: int
    tokens: int
    budget: int
    over: int
    truncated: bool
    counts: tuple[int, int, int, int]  # packs full, compact, truncated, skipped (budget/guard)
    trigger: str
    # Input tokens the model billed for this prompt, when the build's task reported usage.
    billed: int | None = None

    @property
    def when(self) -> str:
        return time_text(self.started_at)

    @property
    def use(self) -> float:
        """Tokens as a share of the budget (1.0 = exactly full)."""
        return self.tokens / self.budget if self.budget else 0.0

    @property
    def percent(self) -> int:
        return round(100 * self.use)

    @property
    def describe(self) -> str:
        """The build in words: what hovering or focusing its column shows."""
        full, compact, truncated, skipped = self.counts
        parts = [
            f"iteration {self.iteration}",
            self.when,
            f"{self.tokens:,} of {self.budget:,} tokens ({self.percent}%)",
        ]
        if self.over:
            parts.append(f"{self.over:,} over budget")
        if self.truncated:
            parts.append("✂ cut by the char guard")
        parts.append(
            f"packs: {full} full, {compact} compact, {truncated} truncated, {skipped} left out"
        )
        if self.trigger:
            parts.append(f"triggered by {self.trigger}")
        return " · ".join(parts)


def build_point(build: BuildLike) -> BuildPoint:
    """Read one build's metrics (SPEC §6.2), tolerating older or partial shapes."""
    metrics: Mapping[str, Any] = build.metrics if isinstance(build.metrics, Mapping) else {}
    tokens, budget, over = build_total(dict(metrics))
    if not metrics.get("total") and not metrics.get("budget"):
        tokens = build.final_tokens
    if budget is None:
        budget = build.max_tokens
        over = max(0, tokens - budget)
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
        tokens=tokens,
        budget=budget,
        over=over,
        truncated=bool(truncation.get("applied")),
        counts=(counts["full"], counts["compact"], counts["truncated"], counts["skipped"]),
        trigger=str(metrics.get("triggeredBy") or ""),
        billed=build.reported_input_tokens,
    )


@dataclass(frozen=True, slots=True)
class Column:
    """One build's column in the tokens chart: x and widths in percent, y in pixels."""

    index: int
    point: BuildPoint
    slot_x: float  # the whole slot: the hover and focus target
    slot_w: float
    x: float
    width: float
    within_y: float  # the part inside the budget
    within_h: float
    over_y: float  # the part past the budget (height 0 when none)
    over_h: float

    @property
    def centre(self) -> float:
        return round(self.x + self.width / 2, 2)


@dataclass(frozen=True, slots=True)
class Marker:
    """An event above a column (x in percent, y in pixels): ``over`` draws a diamond,
    ``truncated`` a downward triangle; the shape is drawn around (0, 0) at that point."""

    kind: str
    x: float
    y: float
    title: str

    @property
    def points(self) -> str:
        if self.kind == "over":
            return "0,-5 4.5,0 0,5 -4.5,0"
        return "-4.5,-4 4.5,-4 0,4"


@dataclass(frozen=True, slots=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True, slots=True)
class TimeTick:
    """An x-axis label: the build's time, written in the reader's time zone by the page."""

    x: float
    ms: int
    text: str  # the UTC fallback
    style: str  # seconds | minutes | days
    tier: str  # the narrowest width tier that shows it (X_TICK_TIERS)


@dataclass(frozen=True, slots=True)
class StatusPiece:
    kind: str
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class Segment:
    """A straight piece of a line: x in percent, y in pixels."""

    x1: float
    x2: float
    y1: float
    y2: float


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """The budget as a step line, or, when far above every build, a note at the top edge."""

    segments: tuple[Segment, ...]
    label_y: float
    label: str
    off_scale: bool


@dataclass(frozen=True, slots=True)
class AgentStats:
    """One agent's builds summed up: the row of the per-agent table."""

    builds: int
    latest: BuildPoint
    median_percent: int
    max_point: BuildPoint
    over_builds: int
    truncated_builds: int
    compact_builds: int
    # Billed input tokens over the estimate, the median of the builds whose usage was reported.
    billed_ratio: float | None = None
    billed_builds: int = 0


@dataclass(frozen=True, slots=True)
class AgentChart:
    """One agent's small multiples, their table and their text alternative."""

    agent_id: str
    role: str
    points: tuple[BuildPoint, ...]
    columns: tuple[Column, ...]
    budget: BudgetLine
    markers: tuple[Marker, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[TimeTick, ...]
    status: tuple[StatusPiece, ...]
    status_ticks: tuple[Tick, ...]
    stats: AgentStats
    summary: str


def nice_step(top: float, target: int = 4) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about ``target`` ticks."""
    raw = max(top, 1) / target
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if multiple * magnitude >= raw:
            return multiple * magnitude
    return 10 * magnitude


def _short(value: float) -> str:
    """Axis labels: ``850``, ``12k``, ``2.5k``, ``1.2M``."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:.0f}"


def _time_style(points: Sequence[BuildPoint]) -> str:
    span = points[-1].started_at - points[0].started_at if points else 0
    if span < 3_600_000:
        return "seconds"
    if span < 86_400_000:
        return "minutes"
    return "days"


def _time_text(ms: int, style: str) -> str:
    full = time_text(ms)  # 2026-02-02 09:17:55 UTC
    if style == "seconds":
        return full[11:19]
    if style == "minutes":
        return full[11:16]
    return f"{full[5:10]} {full[11:16]}"


def x_label_px(style: str) -> float:
    """The room one time label of ``style`` takes, its gap included."""
    return X_LABEL_CHARS[style] * X_CHAR_PX + X_LABEL_GAP_PX


def x_tick_tiers(n: int, style: str) -> dict[int, str]:
    """Which of ``n`` columns get a time label, each with the narrowest tier that shows it.

    Each tier labels every k-th column counted back from the newest (always labelled), k the
    least stride whose labels do not touch at that tier's plot width; a narrower tier's stride
    is a multiple of the wider one's, so narrowing the page only takes labels away.
    """
    chosen: dict[int, str] = {}
    stride = 1
    for tier, plot_px in reversed(X_TICK_TIERS):
        need = max(1, math.ceil(x_label_px(style) * n / plot_px))
        stride *= math.ceil(need / stride)
        for i in range(n - 1, -1, -stride):
            chosen[i] = tier
    return chosen


def _r(value: float) -> float:
    return round(value, 2)


def agent_chart(agent_id: str, builds: Sequence[BuildLike], *, role: str = "") -> AgentChart:
    """Lay one agent's builds out, oldest on the left, one slot per build."""
    points = tuple(sorted((build_point(b) for b in builds), key=lambda p: (p.started_at, p.id)))
    if not points:
        raise ValueError(f"no builds for {agent_id}")
    frame = TOKENS_FRAME
    n = len(points)
    slot = 100 / n
    # Columns keep a column's shape even for one or two builds.
    width = max(0.15, min(slot * 0.66, MAX_COLUMN_WIDTH))
    token_max = max(p.tokens for p in points)
    budget_max = max(p.budget for p in points)
    off_scale = budget_max > OFF_SCALE_RATIO * max(token_max, 1)
    top_value = token_max if off_scale else max(token_max, budget_max)
    step = max(1.0, nice_step(top_value * 1.08))
    top = step * math.ceil(top_value * 1.08 / step) if top_value else step
    scale = frame.plot_h / top

    def y_of(value: float) -> float:
        return _r(frame.baseline - min(value, top) * scale)

    columns: list[Column] = []
    markers: list[Marker] = []
    segments: list[Segment] = []
    for i, p in enumerate(points):
        slot_x = i * slot
        x = slot_x + (slot - width) / 2
        within = min(p.tokens, p.budget)
        column = Column(
            index=i,
            point=p,
            slot_x=_r(slot_x),
            slot_w=_r(slot),
            x=_r(x),
            width=_r(width),
            within_y=y_of(within),
            within_h=_r(frame.baseline - y_of(within)),
            over_y=y_of(p.tokens),
            over_h=_r(y_of(within) - y_of(p.tokens)) if p.tokens > p.budget else 0.0,
        )
        columns.append(column)
        peak = y_of(p.tokens if off_scale else max(p.tokens, p.budget))
        if p.over:
            markers.append(Marker("over", column.centre, _r(peak - 9), p.describe))
        if p.truncated:
            lift = 21 if p.over else 9
            markers.append(Marker("truncated", column.centre, _r(peak - lift), p.describe))
        if not off_scale:
            y = y_of(p.budget)
            if segments and segments[-1].y2 != y:
                segments.append(Segment(_r(slot_x), _r(slot_x), segments[-1].y2, y))
            segments.append(Segment(_r(slot_x), _r(slot_x + slot), y, y))

    latest_budget = points[-1].budget
    if off_scale:
        budget = BudgetLine(
            segments=(),
            label_y=frame.top + 4,
            label=f"budget {_short(latest_budget)} ↑",
            off_scale=True,
        )
    else:
        budget = BudgetLine(
            segments=tuple(segments),
            label_y=y_of(latest_budget) + 4,
            label=f"budget {_short(latest_budget)}",
            off_scale=False,
        )

    ticks = round(top / step)
    y_ticks = tuple(Tick(y_of(k * step), _short(k * step)) for k in range(ticks + 1))

    style = _time_style(points)
    x_ticks = tuple(
        TimeTick(
            x=columns[i].centre,
            ms=points[i].started_at,
            text=_time_text(points[i].started_at, style),
            style=style,
            tier=tier,
        )
        for i, tier in sorted(x_tick_tiers(n, style).items())
    )

    status_frame = STATUS_FRAME
    most = max([sum(p.counts) for p in points] + [1])
    count_scale = status_frame.plot_h / most
    status: list[StatusPiece] = []
    for column in columns:
        base = status_frame.baseline
        for kind, count in zip(STATUSES, column.point.counts, strict=True):
            if count:
                height = count * count_scale
                base -= height
                status.append(StatusPiece(kind, column.x, _r(base), column.width, _r(height)))
    status_ticks = (
        Tick(status_frame.baseline, "0"),
        Tick(_r(status_frame.baseline - most * count_scale), str(most)),
    )

    stats = _stats(points)
    return AgentChart(
        agent_id=agent_id,
        role=role,
        points=points,
        columns=tuple(columns),
        budget=budget,
        markers=tuple(markers),
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        status=tuple(status),
        status_ticks=status_ticks,
        stats=stats,
        summary=_summary(stats),
    )


def _stats(points: Sequence[BuildPoint]) -> AgentStats:
    ratios = [p.billed / p.tokens for p in points if p.billed and p.tokens]
    return AgentStats(
        builds=len(points),
        latest=points[-1],
        median_percent=round(100 * statistics.median(p.use for p in points)),
        max_point=max(points, key=lambda p: (p.use, p.started_at)),
        over_builds=sum(1 for p in points if p.over),
        truncated_builds=sum(1 for p in points if p.truncated),
        compact_builds=sum(1 for p in points if p.counts[1]),
        billed_ratio=statistics.median(ratios) if ratios else None,
        billed_builds=len(ratios),
    )


def _summary(stats: AgentStats) -> str:
    builds = f"{stats.builds:,} build" + ("" if stats.builds == 1 else "s")
    latest = stats.latest
    return (
        f"{builds}; the latest used {latest.tokens:,} of {latest.budget:,} tokens "
        f"({latest.percent}%); median {stats.median_percent}% of the budget, at most "
        f"{stats.max_point.percent}%; {stats.over_builds} over budget; "
        f"{stats.truncated_builds} cut by the char guard."
    )


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """The numbers above the charts."""

    builds: int
    agents_with_builds: int
    median_percent: int | None
    max_point: BuildPoint | None
    max_agent: str
    over_builds: int
    truncated_builds: int


def cluster_summary(charts: Sequence[AgentChart]) -> ClusterSummary:
    """Every chart's builds summed up."""
    points = [(chart.agent_id, p) for chart in charts for p in chart.points]
    top = max(points, key=lambda ap: (ap[1].use, ap[1].started_at)) if points else None
    return ClusterSummary(
        builds=len(points),
        agents_with_builds=len(charts),
        median_percent=round(100 * statistics.median(p.use for _, p in points)) if points else None,
        max_point=top[1] if top else None,
        max_agent=top[0] if top else "",
        over_builds=sum(1 for _, p in points if p.over),
        truncated_builds=sum(1 for _, p in points if p.truncated),
    )


def cluster_charts(
    builds: Sequence[BuildLike], *, roles: Mapping[str, str] | None = None
) -> list[AgentChart]:
    """Small multiples per agent, agents in name order."""
    by_agent: dict[str, list[BuildLike]] = {}
    for build in builds:
        by_agent.setdefault(build.agent_id, []).append(build)
    roles = roles or {}
    return [
        agent_chart(agent, by_agent[agent], role=roles.get(agent, "")) for agent in sorted(by_agent)
    ]
