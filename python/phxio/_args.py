"""Integers the public API takes from its caller."""

from __future__ import annotations

import operator
from typing import Any, Optional


def as_int(value: Any) -> Optional[int]:
    """@value as an int (Python's own or NumPy's integers), or None where
    it is not an integer or is a bool (True is no count of anything):
    the caller raises TypeError in its own words."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
