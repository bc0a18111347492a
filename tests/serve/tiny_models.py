"""Moved to ``tests.builders`` (the models tests share); kept so imports of the old place keep working."""

from tests.builders import TABLE, lookup, regroup, wide

__all__ = ["TABLE", "lookup", "regroup", "wide"]
