"""The cluster page's topology panel (the agents' arc diagram and the config versions), written
by one Python function.

The panel is printed on every load of the cluster page and with every refresh of a running
cluster's agents panel; as a template it was the page's costliest include (its loops over
edges, nodes and tones, a lookup and a filter per coordinate), as the timeline's rows were
(``dashboard.presentation.timeline``). The markup is the template's, byte for byte; every text
that comes from a config (agent ids, topics, senders) is escaped once (``html.escape``, quotes
included, as the template's autoescape does); numbers are printed as its ``stringformat`` did.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.safestring import SafeString

from dashboard.topology import Topology

_escape = html.escape


def topology_panel_html(
    *,
    topology: Topology | None,
    tones: Iterable[int],
    node_h: int,
    completion: str,
    config_versions: list[Mapping[str, Any]],
    config_version: int,
    oob: bool = False,
) -> SafeString:
    """The panel's ``<section>``: the diagram (or why there is none), how the cluster ends,
    and the picker of its config versions."""
    swap = ' hx-swap-oob="true"' if oob else ""
    out = [
        f'    <section class="panel" id="topology-panel" aria-labelledby="topology-title"{swap}>\n'
        '      <h2 id="topology-title">Topology <span class="muted small">publisher → listener'
        "</span></h2>\n      "
    ]
    if topology is not None and topology.edges:
        out.append(_diagram(topology, tones, node_h))
    else:
        out.append(
            '\n      <p class="empty">No topic connects these agents: none is triggered by a '
            "topic another agent's hooks publish.</p>\n      "
        )
    out.append("\n      ")
    if completion:
        out.append(f'<p class="muted small completion-rule">{_escape(completion)}</p>')
    out.append("\n      ")
    if config_versions:
        out.append(_versions(config_versions, config_version))
    out.append("\n    </section>")
    return SafeString("".join(out))


def _diagram(topology: Topology, tones: Iterable[int], node_h: int) -> str:
    width, height, node_w = topology.width, topology.height, topology.node_w
    edges = topology.edges
    desc = "".join(
        f"{_escape(e.source)} publishes {_escape(e.topic)}, which triggers {_escape(e.target)}. "
        for e in edges
    )
    markers = "".join(
        f'<marker id="arrow-{tone}" class="tone-{tone}" viewBox="0 0 8 8" refX="7" refY="4" '
        'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0,0 L8,4 L0,8 z"/></marker>'
        for tone in tones
    )
    out = [
        '\n      <div class="topology-wrap">\n'
        f'      <svg class="topology" viewBox="0 0 {width:.1f} {height:.1f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-labelledby="topology-svg-title '
        'topology-svg-desc">\n'
        '        <title id="topology-svg-title">Which topics connect the agents</title>\n'
        f'        <desc id="topology-svg-desc">{desc}</desc>\n'
        f"        <defs>{markers}</defs>\n        "
    ]
    for e in edges:
        out.append(
            f'\n        <g class="edge tone-{e.tone}"><path d="{_escape(e.path)}" '
            f'marker-end="url(#arrow-{e.tone})"/></g>\n        '
        )
    out.append("\n        ")
    for n in topology.nodes:
        external = " external" if n.external else ""
        out.append(
            f'\n        <g class="node{external}"><rect x="{n.x:.1f}" y="{n.y:.1f}" '
            f'width="{node_w:.1f}" height="{node_h}" rx="6"/><title>{_escape(n.id)}</title>'
            f'<text x="{n.cx:.1f}" y="{n.text_y:.1f}" text-anchor="middle">'
            f"{_escape(n.label)}</text></g>\n        "
        )
    out.append("\n        ")
    for e in edges:
        if e.labelled:
            out.append(
                f'\n        <text class="edge-label tone-{e.tone}" x="{e.label_x:.1f}" '
                f'y="{e.label_y:.1f}" text-anchor="{_escape(e.anchor)}">{_escape(e.topic)}'
                "</text>\n        "
            )
    out.append("\n      </svg>\n      </div>\n      ")
    return "".join(out)


def _versions(versions: list[Mapping[str, Any]], picked: int) -> str:
    out = [
        '\n      <nav class="config-versions" aria-label="Config versions">\n'
        '        <h3 title="Each CLUSTER_OPERATIONS chain that changed the agents makes a '
        'version">Config versions</h3>\n'
        "        <ol>\n          "
    ]
    for v in versions:
        number = v["version"]
        chosen = number == picked
        current = ' <span class="current">current</span>' if v["current"] else ""
        sender = f'<span class="mono">{_escape(v["sender"])}</span> · ' if v["sender"] else ""
        picked_class, aria = (' class="picked"', ' aria-current="true"') if chosen else ("", "")
        out.append(
            f'\n          <li{picked_class}><a href="?config_version={number}"{aria}>'
            f"v{number}</a>{current} "
            f'<span class="muted small">{sender}{_escape(v["summary"])}</span></li>\n          '
        )
    out.append("\n        </ol>\n      </nav>\n      ")
    return "".join(out)
