"""Run every conformance rule that applies to a target over an ONNX graph.

Rules live one per file in ``rules/`` and are found by file name, like optimize's passes. Each finding names
the node, the rule and the fix; errors mean the runtime would refuse the graph or compute something else.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import onnx
from rich.markup import escape

from trtpipe import console
from trtpipe.conformance.findings import CheckReport, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

_RULES = Path(__file__).parent / "rules"


def rules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules([str(_RULES)]))
    return [importlib.import_module(f"trtpipe.conformance.rules.{name}") for name in names]


def check_model(model: onnx.ModelProto, target: Target, path: str | None = None) -> CheckReport:
    graph = GraphIndex.of(model)
    report = CheckReport(str(target), path)
    for rule in rules():
        if target in rule.RULE.targets:
            report.rules.append(rule.RULE.name)
            report.findings += rule.check(graph)
    report.findings.sort(key=lambda f: (f.severity is not Severity.ERROR, f.rule))
    return report


def check_file(path: Path, target: Target) -> CheckReport:
    from trtpipe.onnx_info import load_onnx

    return check_model(load_onnx(Path(path)), target, str(path))


def print_report(report: CheckReport, limit: int = 20) -> None:
    for finding in report.findings[:limit]:
        style = "bold red" if finding.severity is Severity.ERROR else "bold yellow"
        console.err.print(f"[{style}]{finding.severity}:[/{style}] {escape(finding.line().split(': ', 1)[1])}",
                          soft_wrap=True)
    if len(report.findings) > limit:
        console.note(f"... and {len(report.findings) - limit} more findings")
    summary = (f"{report.path or 'the graph'} vs {report.target}: {len(report.errors)} error(s), "
               f"{len(report.warnings)} warning(s) from {len(report.rules)} rules")
    if report.passed:
        console.success(summary)
    else:  # a summary of errors is the verdict, not a warning
        console.err.print(f"[bold red]✗[/bold red] {escape(summary)}: fails", soft_wrap=True)


def failure_message(report: CheckReport) -> str:
    first = report.errors[0]
    more = f" (and {len(report.errors) - 1} more: run 'trtpipe check')" if len(report.errors) > 1 else ""
    return (f"{report.path or 'The graph'} does not conform to {report.target}: {first.node}: {first.message} "
            f"[{first.rule}]{more}. Fix: {first.fix}.")
