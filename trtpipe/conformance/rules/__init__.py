"""Conformance rules, one per file, each with ``RULE`` (name, source, targets) and ``check(graph)``."""
