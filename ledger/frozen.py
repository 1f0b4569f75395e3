"""JSON values that many readers share and none may change: a cluster's config, parsed once
per stored text (``ledger.statements``) instead of on every read of its row.

``FrozenDict`` and ``FrozenList`` are a ``dict`` and a ``list`` to read (``isinstance``,
``json.dumps``, equality, iteration as they are), refusing every change in place with a
``TypeError``. A copy of one (``dict(...)``, ``list(...)``, ``.copy()``, ``copy.copy``,
``copy.deepcopy``, pickling) is a plain, changeable value. docs/decisions/0236.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

from ledger.records import JSON


def _refused(*args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError("a shared JSON value cannot be changed in place: change a copy of it")


class FrozenDict(dict[str, Any]):
    """A JSON object shared by its readers."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refused
    clear = pop = popitem = setdefault = update = _refused

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A JSON array shared by its readers."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused
    append = extend = insert = pop = remove = clear = sort = reverse = _refused

    def copy(self) -> list[Any]:
        return list(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def frozen(value: JSON) -> JSON:
    """``value`` (as ``json.loads`` makes it) with its objects and arrays frozen, all the way
    down; strings, numbers, booleans and null are immutable already."""
    if isinstance(value, dict):
        return FrozenDict((key, frozen(item)) for key, item in value.items())
    if isinstance(value, list):
        return FrozenList(frozen(item) for item in value)
    return value
