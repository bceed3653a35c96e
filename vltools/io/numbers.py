"""Numbers as a person reads them: metrics rounded at output only (`286.8`, not `286.79999999999995`).

Eight significant digits remove float noise (about 1e-16 relative) yet keep every figure a reader or a
`pytest.approx` comparison needs.

Every writer of JSON, logs or tables meant for people calls `clean_numbers` (or `dumps`) at the point of
serialisation; files that stages re-read as data (rankings, sims, checkpoints, features) keep full precision.
"""

from __future__ import annotations

import json
import math
import numbers

SIGNIFICANT = 8


def clean_number(value: float, digits: int = SIGNIFICANT) -> float:
    """`value` rounded to `digits` significant digits (non-finite values unchanged)."""
    value = float(value)
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def clean_numbers(value: object, digits: int = SIGNIFICANT) -> object:
    """A copy of a JSON-like value with every float rounded to `digits` significant digits; ints, bools and
    strings unchanged."""
    if isinstance(value, numbers.Integral) or isinstance(value, str) or value is None:
        return value
    if isinstance(value, numbers.Real):
        return clean_number(value, digits)
    if isinstance(value, dict):
        return {key: clean_numbers(item, digits) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_numbers(item, digits) for item in value]
    return value


def dumps(value: object, **kwargs: object) -> str:
    """`json.dumps` of `value` with its floats cleaned: what people read in JSON outputs and logs."""
    return json.dumps(clean_numbers(value), **kwargs)
