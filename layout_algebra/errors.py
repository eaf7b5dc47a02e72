"""The exception type of the layout algebra.

Every invalid argument to a layout constructor or operation raises `LayoutError`, whose message
names the offending value and what was expected. It subclasses `ValueError` so that callers that
only know the standard library can still catch it.
"""

from __future__ import annotations


class LayoutError(ValueError):
    """An invalid layout, layout argument, index or coordinate."""
