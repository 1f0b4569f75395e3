"""A worker that runs agents for zeroshot-web: it claims tasks from the work API (SPEC §7.4),
runs each through a provider (a command, an OpenAI-compatible endpoint or a script), and hands
back the result.

It speaks only HTTP to the server and never imports Django: ``python -m zeroshot_runner``.
"""

from __future__ import annotations

__version__ = "0.1.0"
