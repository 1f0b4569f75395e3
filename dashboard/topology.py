"""Which topics connect the agents of a cluster config, laid out as a small arc diagram.

Pure: plain config in, plain geometry out, drawn by the cluster page as inline SVG. Agent A
*publishes* topic T when one of its hooks has ``config.topic == T``; agent B *listens* to T when
one of its ``triggers`` has ``topic == T``. Each (A, T, B) is a labelled edge. Topics that agents
listen to but none publishes (``ISSUE_OPENED`` from the operator, for instance) come from a
pseudo-node for the outside world.

Layout: the nodes stand in one column in config order; an edge going down the column is an arc
on the right, an edge going up is an arc on the left, wider the further it spans, so that arcs
nest instead of crossing and the diagram stays readable in a narrow side panel.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

EXTERNAL = "outside"
NODE_W = 132
NODE_H = 28
GAP = 44
ARC_BASE = 30
ARC_STEP = 26
PARALLEL_STEP = 12
LABEL_CHAR_W = 6.2
TONES = 10  # as dashboard_ui.topic_tone


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    x: float
    y: float
    external: bool

    @property
    def label(self) -> str:
        return self.id if len(self.id) <= 18 else self.id[:17] + "…"

    @property
    def cx(self) -> float:
        return self.x + NODE_W / 2

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


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    width: float
    height: float


def _strings(values: Iterable[Any]) -> list[str]:
    return [v for v in values if isinstance(v, str) and v]


def published_topics(agent: Mapping[str, Any]) -> list[str]:
    """Topics an agent's hooks publish (``hooks.*.config.topic``), in order, once each."""
    hooks = agent.get("hooks")
    found: list[str] = []
    hook_values = hooks.values() if isinstance(hooks, Mapping) else []
    for hook in hook_values:
        for item in hook if isinstance(hook, list) else [hook]:
            config = item.get("config") if isinstance(item, Mapping) else None
            topic = config.get("topic") if isinstance(config, Mapping) else None
            if isinstance(topic, str) and topic and topic not in found:
                found.append(topic)
    return found


def trigger_topics(agent: Mapping[str, Any]) -> list[str]:
    """Topics an agent is triggered by (``triggers[].topic``), in order, once each."""
    triggers = agent.get("triggers")
    topics = (
        _strings(t.get("topic") for t in triggers if isinstance(t, Mapping))
        if isinstance(triggers, list)
        else []
    )
    return list(dict.fromkeys(topics))


def topology(agents: Iterable[Mapping[str, Any]]) -> Topology:
    """The agents as nodes and the topics between them as labelled arcs."""
    agent_list = [a for a in agents if isinstance(a.get("id"), str) and a.get("id")]
    publishers: dict[str, list[str]] = {}
    for agent in agent_list:
        for topic in published_topics(agent):
            publishers.setdefault(topic, []).append(str(agent["id"]))
    links: list[tuple[str, str, str]] = []
    for agent in agent_list:
        for topic in trigger_topics(agent):
            for source in publishers.get(topic, [EXTERNAL]):
                links.append((source, topic, str(agent["id"])))
    ids = list(dict.fromkeys(str(a["id"]) for a in agent_list))
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
    label_room = {"right": 0.0, "left": 0.0}
    for (source, topic, target), r in zip(links, reach, strict=True):
        side = "left" if index[target] < index[source] else "right"
        label_room[side] = max(label_room[side], r * 0.75 + len(topic) * LABEL_CHAR_W + 8)
    left = max(label_room["left"], 16.0)
    width = left + NODE_W + max(label_room["right"], 16.0)
    nodes = tuple(
        Node(id=node_id, x=left, y=12 + i * (NODE_H + GAP), external=node_id == EXTERNAL)
        for i, node_id in enumerate(ids)
    )
    height = 12 + len(ids) * (NODE_H + GAP) - GAP + 12 if ids else 0
    edges = []
    for (source, topic, target), r in zip(links, reach, strict=True):
        start, end_node = nodes[index[source]], nodes[index[target]]
        tone = zlib.crc32(topic.encode()) % TONES
        if start.id == end_node.id:
            x = start.x + NODE_W
            path = (
                f"M{x:.1f},{start.cy - 6:.1f} C{x + r:.1f},{start.cy - 22:.1f} "
                f"{x + r:.1f},{start.cy + 22:.1f} {x + 2:.1f},{start.cy + 6:.1f}"
            )
            edges.append(
                Edge(source, target, topic, path, x + r * 0.8 + 4, start.cy + 4, "start", tone)
            )
            continue
        down = end_node.y > start.y
        # Leave and enter a little off-centre so that in- and out-arcs do not meet in one point.
        y1 = start.cy + (5 if down else -5)
        y2 = end_node.cy - (5 if down else -5)
        if down:
            x = start.x + NODE_W
            cx = x + r
            end = x + 2
            label_x, anchor = x + r * 0.75 + 4, "start"
        else:
            x = start.x
            cx = x - r
            end = x - 2
            label_x, anchor = x - r * 0.75 - 4, "end"
        path = f"M{x:.1f},{y1:.1f} C{cx:.1f},{y1:.1f} {cx:.1f},{y2:.1f} {end:.1f},{y2:.1f}"
        edges.append(Edge(source, target, topic, path, label_x, (y1 + y2) / 2 + 3, anchor, tone))
    return Topology(nodes=nodes, edges=tuple(edges), width=width, height=height)
