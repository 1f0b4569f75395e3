"""Logging pieces the settings refer to."""

from __future__ import annotations

import logging
import sys
from typing import TextIO


class StdoutHandler(logging.StreamHandler[TextIO]):
    """Writes each record to whatever ``sys.stdout`` is at that moment (a redirected or captured
    stdout included), one line per record."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self) -> TextIO:
        return sys.stdout

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass
