"""The project's own templates, shipped as JSON files in ``context/builtin_templates/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from context.cluster_templates.spec import JSON

BUILTIN_TEMPLATES_DIR: Final = Path(__file__).resolve().parent.parent / "builtin_templates"


def template_builtin_list() -> dict[str, dict[str, JSON]]:
    """The project's own templates, by file name (``single-worker``, ``debug-workflow``, ...)."""
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(BUILTIN_TEMPLATES_DIR.glob("*.json"))
    }
