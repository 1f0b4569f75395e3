"""Which topics connect the agents of a cluster config, laid out as a small arc diagram.

Pure: plain config in, plain geometry out, drawn by the cluster page as inline SVG. Agent A
*publishes* topic T when one of its hooks has ``config.topic == T``; agent B *listens* to T when
one of its ``triggers`` matches T (``context.agents.Trigger.matches``). Each (A, T, B) is a
labelled edge. Topics that agents listen to but none publishes (``ISSUE_OPENED`` from the
operator, for instance) come from a pseudo-node for the outside world.

Layout: the nodes stand in one column in config order; an edge going down the column is an arc
on the right, an edge going up is an arc on the left, wider the further it spans, so that arcs
nest instead of crossing and the diagram stays readable in a narrow side panel.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from context.agents import AgentConfigError, AgentSpec, agent_parse

EXTERNAL = "outside"
NODE_W = 132
NODE_H = 28
GAP = 44
ARC_BASE = 30
ARC_STEP = 26
PARALLEL_STEP = 12
LABEL_CHAR_W = 6.2  # 10 px monospace, a little over its 6.0 px advance
NODE_CHAR_W = 7.4  # 12 px monospace, bold
NODE_PAD = 16
NODE_MAX_CHARS = 48  # an id longer than this (tenant text) is cut, with its full name in the title
TONES = 10  # as dashboard.presentation.labels.topic_tone


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    x: float
    y: float
    external: bool
    width: float = NODE_W

    @property
    def label(self) -> str:
        return node_label(self.id)

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def cy(self) -> float:
        return self.y + NODE_H / 2

    @property
    def text_y(self) -> float:
        return self.cy + 4


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    topic: str
    path: str
    label_x: float
    label_y: float
    anchor: str  # SVG text-anchor
    tone: int
    labelled: bool = True  # False when another arc of the same topic from the same node says it


@dataclass(frozen=True, slots=True)
class _Arc:
    """One edge before layout: which side of the column it bends to and what it spans."""

    source: str
    topic: str
    target: str
    reach: float
    side: str  # "right" (going down, or a loop) or "left" (going up)
    top: float  # the vertical span of the arc
    bottom: float
    middle: float  # where its label sits, before nudging

    @classmethod
    def of(
        cls, source: str, topic: str, target: str, reach: float, ys: Mapping[str, float]
    ) -> _Arc:
        a, b = ys[source] + NODE_H / 2, ys[target] + NODE_H / 2
        if source == target:
            return cls(source, topic, target, reach, "right", a - 16, a + 16, a + 4)
        side = "right" if b > a else "left"
        return cls(source, topic, target, reach, side, min(a, b), max(a, b), (a + b) / 2 + 3)


LABEL_GAP = 6
LABEL_LINE = 13


def node_label(node_id: str) -> str:
    """A node's name as drawn: whole, unless longer than any agent id has a right to be."""
    if len(node_id) <= NODE_MAX_CHARS:
        return node_id
    return node_id[: NODE_MAX_CHARS - 1] + "…"


def node_width(ids: Iterable[str]) -> float:
    """The width of every node: the longest name fits whole."""
    longest = max((len(node_label(i)) for i in ids), default=0)
    return max(float(NODE_W), round(longest * NODE_CHAR_W + NODE_PAD, 1))


def _bundle_labels(arcs: list[_Arc]) -> list[bool]:
    """Whether each arc carries its label: the outermost arc of each bundle does."""
    group = list(range(len(arcs)))

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    for i, a in enumerate(arcs):
        for j in range(i):
            b = arcs[j]
            if (a.topic, a.side) == (b.topic, b.side) and (
                a.source == b.source or a.target == b.target
            ):
                group[root(i)] = root(j)
    outermost: dict[int, int] = {}
    for i, arc in enumerate(arcs):
        r = root(i)
        if r not in outermost or arc.reach > arcs[outermost[r]].reach:
            outermost[r] = i
    return [outermost[root(i)] == i for i in range(len(arcs))]


def _place_labels(arcs: list[_Arc]) -> list[tuple[float, float]]:
    """Each arc's label: how far out from the column, and at which height.

    A label sits outside the apex of every arc on its side that passes its height (an arc's
    furthest point is 3/4 of its reach), so that no line crosses the text; labels that would
    overlap move down a line.
    """
    placed: list[tuple[float, float]] = []
    taken: dict[str, list[float]] = {"right": [], "left": []}
    for arc in arcs:
        y = arc.middle
        while any(abs(y - other) < LABEL_LINE for other in taken[arc.side]):
            y += LABEL_LINE
        taken[arc.side].append(y)
        crossing = [
            other.reach * 0.75
            for other in arcs
            if other.side == arc.side and other.top - 4 <= y <= other.bottom + 4
        ]
        placed.append((max([arc.reach * 0.75, *crossing]) + LABEL_GAP, y))
    return placed


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    width: float
    height: float
    node_w: float = NODE_W


def _parsed(agent: Mapping[str, Any]) -> AgentSpec | None:
    try:
        return agent_parse(agent)
    except AgentConfigError:
        return None  # a config stored before configs were parsed: drawn without it


def published_topics(agent: Mapping[str, Any]) -> list[str]:
    """Topics an agent's hooks publish (``hooks.*.config.topic``), in order, once each."""
    parsed = _parsed(agent)
    if parsed is None:
        return []
    topics = (hook.config_topic for hook in parsed.hooks.all())
    return list(dict.fromkeys(t for t in topics if t is not None))


def trigger_topics(agent: Mapping[str, Any]) -> list[str]:
    """Topics an agent is triggered by (``triggers[].topic``), in order, once each."""
    parsed = _parsed(agent)
    return parsed.trigger_topics() if parsed is not None else []


def topology(agents: Iterable[Mapping[str, Any]]) -> Topology:
    """The agents as nodes and the topics between them as labelled arcs.

    A trigger listens to every published topic it matches (``Trigger.matches``, as dispatch
    reads it): ``VALIDATION_*`` draws an arc from the agent that publishes ``VALIDATION_RESULT``.
    """
    agent_list = [a for a in (_parsed(raw) for raw in agents) if a is not None]
    publishers: dict[str, list[str]] = {}
    for agent in agent_list:
        for topic in published_topics(agent.raw):
            publishers.setdefault(topic, []).append(agent.id)
    links: list[tuple[str, str, str]] = []
    for agent in agent_list:
        for trigger in agent.triggers:
            heard = [t for t in publishers if trigger.matches(t)]
            for topic in heard:
                links.extend((source, topic, agent.id) for source in publishers[topic])
            if not heard:
                links.append((EXTERNAL, trigger.topic, agent.id))
    links = list(dict.fromkeys(links))
    ids = list(dict.fromkeys(a.id for a in agent_list))
    if any(source == EXTERNAL for source, _, _ in links):
        ids.insert(0, EXTERNAL)
    index = {node_id: i for i, node_id in enumerate(ids)}

    # How far each arc reaches sideways, and how much room its label needs.
    reach: list[float] = []
    parallel: dict[tuple[int, int], int] = {}
    for source, _, target in links:
        a, b = index[source], index[target]
        key = (min(a, b), max(a, b))
        k = parallel.get(key, 0)
        parallel[key] = k + 1
        reach.append(ARC_BASE + ARC_STEP * max(abs(b - a) - 1, 0) + PARALLEL_STEP * k)
    ids_y = {node_id: 12 + i * (NODE_H + GAP) for i, node_id in enumerate(ids)}
    arcs = [
        _Arc.of(source, topic, target, r, ids_y)
        for (source, topic, target), r in zip(links, reach, strict=True)
    ]
    # One label per bundle: arcs of one topic on one side that share their publisher (a fan-out)
    # or their listener (a fan-in) are said once, beside the outermost of them, rather than
    # stacked once per arc.
    labelled = _bundle_labels(arcs)
    placed = _place_labels([a for a, shown in zip(arcs, labelled, strict=True) if shown])
    placed_iter = iter(placed)
    labels = [next(placed_iter) if shown else (0.0, 0.0) for shown in labelled]
    label_room = {"right": 0.0, "left": 0.0}
    for arc, (offset, _), shown in zip(arcs, labels, labelled, strict=True):
        need = offset + len(arc.topic) * LABEL_CHAR_W + 6 if shown else arc.reach * 0.75 + 4
        label_room[arc.side] = max(label_room[arc.side], need)
    node_w = node_width(ids)
    left = max(label_room["left"], 16.0)
    width = left + node_w + max(label_room["right"], 16.0)
    nodes = tuple(
        Node(id=node_id, x=left, y=ids_y[node_id], external=node_id == EXTERNAL, width=node_w)
        for node_id in ids
    )
    height = 12 + len(ids) * (NODE_H + GAP) - GAP + 12 if ids else 0
    edges = []
    for arc, (offset, label_y), shown in zip(arcs, labels, labelled, strict=True):
        start, end_node = nodes[index[arc.source]], nodes[index[arc.target]]
        tone = zlib.crc32(arc.topic.encode()) % TONES
        r = arc.reach
        if arc.side == "right":
            x = start.x + node_w
            label_x, anchor = x + offset, "start"
        else:
            x = start.x
            label_x, anchor = x - offset, "end"
        if start.id == end_node.id:
            path = (
                f"M{x:.1f},{start.cy - 6:.1f} C{x + r:.1f},{start.cy - 22:.1f} "
                f"{x + r:.1f},{start.cy + 22:.1f} {x + 2:.1f},{start.cy + 6:.1f}"
            )
        else:
            # Leave and enter a little off-centre so that in- and out-arcs do not meet.
            down = end_node.y > start.y
            y1 = start.cy + (5 if down else -5)
            y2 = end_node.cy - (5 if down else -5)
            cx, end = (x + r, x + 2) if down else (x - r, x - 2)
            path = f"M{x:.1f},{y1:.1f} C{cx:.1f},{y1:.1f} {cx:.1f},{y2:.1f} {end:.1f},{y2:.1f}"
        edges.append(
            Edge(arc.source, arc.target, arc.topic, path, label_x, label_y, anchor, tone, shown)
        )
    return Topology(nodes=nodes, edges=tuple(edges), width=width, height=height, node_w=node_w)
