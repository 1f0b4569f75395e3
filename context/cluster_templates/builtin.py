"""The built-in templates, shipped as JSON files in ``context/builtin_templates/``.

The project's own templates sit at the top of the folder; zeroshot's (its ``cluster-templates/``:
``conductor-bootstrap`` and the base templates it loads, vendored unchanged under zeroshot's MIT
licence, see ``zeroshot/README.md`` there) sit in ``zeroshot/`` and are named ``zeroshot/<name>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from context.cluster_templates.spec import JSON

BUILTIN_TEMPLATES_DIR: Final = Path(__file__).resolve().parent.parent / "builtin_templates"
# zeroshot's templates: a ``load_config`` of a cluster made from one resolves its names here.
ZEROSHOT_PREFIX: Final = "zeroshot/"


def template_builtin_list() -> dict[str, dict[str, JSON]]:
    """The project's own templates, by file name (``single-worker``, ``debug-workflow``, ...)."""
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(BUILTIN_TEMPLATES_DIR.glob("*.json"))
    }


def template_zeroshot_list() -> dict[str, dict[str, JSON]]:
    """zeroshot's templates, by store name (``zeroshot/conductor-bootstrap``, ...)."""
    return {
        ZEROSHOT_PREFIX + path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted((BUILTIN_TEMPLATES_DIR / "zeroshot").glob("*.json"))
    }
