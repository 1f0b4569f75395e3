"""``python -m zeroshot_runner``."""

from __future__ import annotations

from zeroshot_runner.cli import main

raise SystemExit(main())
