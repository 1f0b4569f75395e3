"""The topology's layout: labels inside the drawing, names whole, a fan-out labelled once."""

from __future__ import annotations

from typing import Any

import pytest

from context.cluster_templates.builtin import template_builtin_list
from context.cluster_templates.resolve import template_resolve
from dashboard.topology import LABEL_CHAR_W, NODE_CHAR_W, Topology, topology

LONG = "security-and-performance-validator"


def fan_out() -> list[dict[str, Any]]:
    """A worker whose IMPLEMENTATION_READY triggers three validators, which answer it."""
    worker = {
        "id": "worker",
        "triggers": [{"topic": "ISSUE_OPENED"}, {"topic": "VALIDATION_RESULT"}],
        "hooks": {"onComplete": {"config": {"topic": "IMPLEMENTATION_READY"}}},
    }
    validators = [
        {
            "id": name,
            "role": "validator",
            "triggers": [{"topic": "IMPLEMENTATION_READY"}],
            "hooks": {"onComplete": {"config": {"topic": "VALIDATION_RESULT"}}},
        }
        for name in ("validator-requirements", "validator-code", LONG)
    ]
    return [worker, *validators]


def assert_drawn_whole(graph: Topology) -> None:
    for edge in graph.edges:
        if not edge.labelled:
            continue
        extent = len(edge.topic) * LABEL_CHAR_W
        if edge.anchor == "start":
            assert edge.label_x + extent <= graph.width, edge.topic
        else:
            assert edge.label_x - extent >= 0, edge.topic
    for node in graph.nodes:
        assert node.label == node.id
        assert len(node.id) * NODE_CHAR_W <= node.width
        assert node.x >= 0
        assert node.x + node.width <= graph.width


def test_four_agents_are_drawn_whole_with_each_fan_out_labelled_once() -> None:
    graph = topology(fan_out())

    assert_drawn_whole(graph)
    # one label per topic here: the fan-out of IMPLEMENTATION_READY, the fan-in of the results
    shown = [e.topic for e in graph.edges if e.labelled]
    assert sorted(shown) == ["IMPLEMENTATION_READY", "ISSUE_OPENED", "VALIDATION_RESULT"]
    ready = [e for e in graph.edges if e.topic == "IMPLEMENTATION_READY"]
    assert len(ready) == 3
    assert sum(e.labelled for e in ready) == 1
    # the label stands beside the outermost of the three arcs, clear of every one of them
    assert next(e for e in ready if e.labelled).target == LONG
    assert graph.node_w >= len(LONG) * NODE_CHAR_W


@pytest.mark.parametrize("name", sorted(template_builtin_list()))
def test_every_builtin_template_is_drawn_whole(name: str) -> None:
    config = template_resolve(template_builtin_list()[name])
    agents = config.get("agents")
    assert isinstance(agents, list)

    assert_drawn_whole(topology(a for a in agents if isinstance(a, dict)))


def test_a_hostile_name_is_cut_to_its_bound() -> None:
    # the longest id a config may hold (SPEC §4: 64 characters) is past what a node shows
    graph = topology([{"id": "x" * 64, "triggers": [{"topic": "GO"}]}])

    node = next(n for n in graph.nodes if not n.external)
    assert node.label.endswith("…")
    assert len(node.label) == 48
