"""What a conformance check reports: findings that name the node, the rule, the problem and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # the runtime will refuse the graph, or compute something else than intended
    WARNING = "warning"  # it runs, but slower or less accurately than it could


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    node: str
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.severity}: {self.node}: {self.message} [{self.rule}]. Fix: {self.fix}."


@dataclass(frozen=True)
class Rule:
    """A rule's identity and where it comes from."""

    name: str
    summary: str
    source: str  # the documentation or issue the rule follows
    targets: tuple[str, ...]  # the Target values it applies to


@dataclass
class CheckReport:
    target: str
    path: str | None
    findings: list[Finding] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    @property
    def passed(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, object]:
        return {"target": self.target, "path": self.path, "passed": self.passed, "rules": self.rules,
                "findings": [{"rule": f.rule, "severity": str(f.severity), "node": f.node, "message": f.message,
                              "fix": f.fix} for f in self.findings]}
