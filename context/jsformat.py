"""JSON data and dates written exactly as JavaScript writes them, pure.

Pack texts must match the JavaScript reference byte for byte: these functions reproduce
``JSON.stringify(value, null, 2)``, ``Date.prototype.toISOString`` and JavaScript truthiness,
so the pack renderers never have to care where Python and JavaScript differ.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

_MS_PER_DAY: Final = 86_400_000
# The range of a JavaScript Date: Date.prototype.toISOString throws beyond it.
_JS_DATE_LIMIT: Final = 8_640_000_000_000_000
_JS_SAFE_INTEGER: Final = 2**53
_ARRAY_INDEX_LIMIT: Final = 2**32 - 1
_ARRAY_INDEX: Final = re.compile(r"0|[1-9][0-9]*")
_SURROGATES: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def iso_ms(ts_ms: int) -> str:
    """Format ms since the epoch as ``Date.prototype.toISOString`` does (UTC, milliseconds)."""
    if abs(ts_ms) > _JS_DATE_LIMIT:
        raise ValueError(f"timestamp {ts_ms} is outside the range of a date")
    days, ms_of_day = divmod(ts_ms, _MS_PER_DAY)
    year, month, day = _civil_from_days(days)
    seconds, ms = divmod(ms_of_day, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    # Years outside 0..9999 take the expanded six-digit form, sign included.
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+07d}"
    return f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{ms:03d}Z"


def js_json(value: Any) -> str:
    """Serialise JSON data exactly as ``JSON.stringify(value, null, 2)`` prints it."""
    return _js_json(value, "")


def data_is_written(data: Any) -> bool:
    """Tell whether ``Data:`` is written: JavaScript truthiness (not None, False, 0 or "")."""
    if data is None or data is False or data == "":
        return False
    if isinstance(data, int | float) and not isinstance(data, bool):
        return data != 0 and not math.isnan(data)
    return True


def _civil_from_days(days: int) -> tuple[int, int, int]:
    # Howard Hinnant's days-to-civil algorithm: exact over the whole proleptic Gregorian range,
    # where datetime stops at year 9999 and JavaScript does not.
    z = days + 719_468
    era = z // 146_097
    day_of_era = z - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def _js_json(value: Any, indent: str) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, int | float):
        return _js_number(value)
    inner = indent + "  "
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        members = [
            f"{inner}{_js_string(key)}: {_js_json(item, inner)}"
            for key, item in _js_key_order(value)
        ]
        return "{\n" + ",\n".join(members) + "\n" + indent + "}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        items = [f"{inner}{_js_json(item, inner)}" for item in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _js_string(text: str) -> str:
    # Python escapes the same characters as JavaScript once ensure_ascii is off; surrogates
    # differ: JavaScript reads a pair as one character and escapes a lone one as \uXXXX.
    encoded = json.dumps(text, ensure_ascii=False)
    return _SURROGATES.sub(_surrogate, encoded)


def _surrogate(match: re.Match[str]) -> str:
    found = match.group()
    if len(found) == 2:
        return chr(0x10000 + ((ord(found[0]) - 0xD800) << 10) + (ord(found[1]) - 0xDC00))
    return f"\\u{ord(found):04x}"


def _js_key_order(value: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    # JavaScript lists integer-like keys first, in ascending numeric order, then the others in
    # insertion order.
    members = [(_js_key(key), item) for key, item in value.items()]
    indexed = sorted(
        (member for member in members if _is_array_index(member[0])),
        key=lambda member: int(member[0]),
    )
    named = [member for member in members if not _is_array_index(member[0])]
    return indexed + named


def _js_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return _js_json(key, "")
    raise TypeError(f"{type(key).__name__} is not a JSON object key")


def _is_array_index(key: str) -> bool:
    return bool(_ARRAY_INDEX.fullmatch(key)) and int(key) < _ARRAY_INDEX_LIMIT


def _js_number(value: float) -> str:
    """Format a number as JavaScript's Number.prototype.toString (radix 10) does."""
    if isinstance(value, int):
        if abs(value) <= _JS_SAFE_INTEGER:
            return str(value)
        try:
            # A JavaScript number is a double: larger integers lose their low digits.
            value = float(value)
        except OverflowError:
            return "null"
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    exponent = point - 1
    exponent_text = f"e{'+' if exponent > 0 else '-'}{abs(exponent)}"
    mantissa = digits if count == 1 else digits[0] + "." + digits[1:]
    return sign + mantissa + exponent_text


def _shortest_digits(value: float) -> tuple[str, int]:
    """Return the shortest round-trip digits of a positive float and its decimal point position.

    The value is 0.DIGITS x 10**point. Python's repr and JavaScript both pick the shortest digit
    string that reads back to the same double.
    """
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point
