"""Where trtpipe stands against the peers (``bench --peers``) and against PyTorch, batch by batch, from the rows of
one run.

The comparison a user makes before adopting trtpipe: its fastest CPU row against the fastest peer row at the same
batch (above 1: trtpipe is faster), with both rows' agreement (the task's figure) beside it, since a faster row that
agrees less with FP32 is not a win by itself. The ratio is taken round by round (both rows were timed in the same
round, moments apart) and the headline is the median of those paired ratios with its 95 % bootstrap interval over
the rounds (stability.Ratio, the same figure as the table's speedup column): a slow spell of a shared machine that
lands on some rounds moves the p50 over all runs of whichever row it hit, and moves the median of paired ratios
least (measured: docs/results/cpu.md, 'trtpipe against what users would pick instead'). Where the paired rounds
disagree beyond stability.REACH, the entry's ``unstable`` says so and what to do; the ratio of the two rows' p50s is
kept beside it (``p50_ratio``), with the lowest and highest round ratio.
"""

from __future__ import annotations

from typing import Any

from trtpipe.bench.stability import (
    ADVICE,
    MIN_ROUNDS,
    Ratio,
    format_interval,
    format_ratio,
    is_load_reason,
    is_speedup_reason,
    verdict_reasons,
)
from trtpipe.intervals import Interval
from trtpipe.runtime.registry import is_eager
from trtpipe.vocab import Device


def peer_standing(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per batch that has both a trtpipe CPU row (an artifact that really ran) and a peer row: the
    headline against the fastest peer, and in ``other_peers`` the same ratio against each slower peer (the
    fastest peer may be one that lost accuracy: every peer's agreement is beside its ratio)."""
    entries = []
    for batch in sorted({r["batch"] for r in results}):
        rows = [r for r in results if r["batch"] == batch and r["device"] == Device.CPU and not r.get("simulated")
                and r.get("p50_ms", 0) > 0]
        ours = [r for r in rows if r.get("artifact") and not r.get("peer")]
        peers = sorted((r for r in rows if r.get("peer")), key=lambda r: r["p50_ms"])
        if not ours or not peers:
            continue
        peer = peers[0]
        best = fastest_against(ours, peer)
        entry: dict[str, Any] = {
            "batch": batch, "trtpipe": best["variant"], "trtpipe_p50_ms": best["p50_ms"],
            "trtpipe_agreement": best.get("agreement"), "peer": peer["variant"], "peer_p50_ms": peer["p50_ms"],
            "peer_agreement": peer.get("agreement"), **_against(best, peer),
            "other_peers": [{"peer": other["variant"], "peer_p50_ms": other["p50_ms"],
                             "peer_agreement": other.get("agreement"), **_against(best, other)}
                            for other in peers[1:]],
        }
        entries.append(entry)
    return entries


def fastest_against(ours: list[dict[str, Any]], other: dict[str, Any]) -> dict[str, Any]:
    """trtpipe's fastest row by the statistic the headline quotes (the median of its paired round ratios against
    ``other``, as the table's speedup and select's ranking), not by its p50 over all runs, which can disagree."""
    return max(ours, key=lambda r: Ratio(other.get("round_p50_ms"), r.get("round_p50_ms"), other["p50_ms"],
                                         r["p50_ms"]).value)


def _against(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """The speed ratio of ``ours`` against ``peer``: the median of paired round ratios with its interval and flag
    when both were timed in the same rounds, else the ratio of p50s; the ratio of the p50s and the rounds' spread
    beside it."""
    ratio = Ratio(peer.get("round_p50_ms"), ours.get("round_p50_ms"), peer["p50_ms"], ours["p50_ms"])
    ratios = ratio.ratios
    return {"ratio": ratio.value, "interval": None if ratio.interval is None else ratio.interval.to_dict(),
            "unstable": _unstable(ratio, ours, peer), "p50_ratio": peer["p50_ms"] / ours["p50_ms"],
            "rounds": len(ratios) if ratios else None, "round_ratio_min": min(ratios) if ratios else None,
            "round_ratio_median": ratio.value if ratios else None, "round_ratio_max": max(ratios) if ratios else None}


def _unstable(ratio: Ratio, ours: dict[str, Any], peer: dict[str, Any]) -> str | None:
    """The headline's flag: its own ratio's, and every reason either row's verdict gives (stability.row_verdict),
    so a headline never reads steady beside a row the table calls unstable. A row's speedup reason is left out where
    the peer is the reference (then it is this ratio's own); the machine-wide load is said once."""
    reasons = verdict_reasons(ratio.unstable.removeprefix("unstable: ") if ratio.unstable else None)
    for row in (ours, peer):
        for reason in verdict_reasons(row.get("unstable")):
            if is_speedup_reason(reason) and peer.get("reference"):
                continue
            reasons.append(reason if is_load_reason(reason) else f"{row['variant']}: {reason}")
    reasons = list(dict.fromkeys(reasons))
    return f"unstable: {'; '.join(reasons)}; {ADVICE}" if reasons else None


def figure(entry: dict[str, Any]) -> str:
    """A ratio as every report prints it: ``4.29x (median of 20 paired rounds, 95 % interval 3.91-4.52x)``, so a
    reader who divides the two p50s quoted beside it (a different statistic) knows why they need not give it; an
    entry of an older report, without an interval, with the spread of its rounds."""
    if entry.get("interval"):
        interval = Interval.from_dict(entry["interval"])
        return (f"{format_ratio(entry['ratio'])}x (median of {interval.units} paired rounds, 95 % interval "
                f"{format_interval(interval)})")
    if entry.get("rounds"):
        return (f"{entry['ratio']:.2f}x (median of {entry['rounds']} round-by-round ratios, "
                f"{entry['round_ratio_min']:.2f}x-{entry['round_ratio_max']:.2f}x)")
    return f"{entry['ratio']:.2f}x (the ratio of the p50s: fewer than {MIN_ROUNDS} rounds give no interval)"


def _flag(entry: dict[str, Any]) -> str:
    return f"; {entry['unstable']}" if entry.get("unstable") else ""


def describe(entry: dict[str, Any]) -> str:
    """One line a person reads: who is faster at this batch, by how much, how sure, at what agreement."""
    agreement = ""
    if entry.get("trtpipe_agreement") is not None and entry.get("peer_agreement") is not None:
        agreement = (f"; agreement {100 * entry['trtpipe_agreement']:.1f} % vs "
                     f"{100 * entry['peer_agreement']:.1f} %")
    peer = entry["peer"].removeprefix("peer: ")
    others = "".join(
        f"; against {other['peer'].removeprefix('peer: ')} {figure(other)}"
        + (f" ({100 * other['peer_agreement']:.1f} % agreement)" if other.get("peer_agreement") is not None else "")
        for other in entry.get("other_peers", []))
    return (f"batch {entry['batch']}: trtpipe's fastest, {entry['trtpipe']} (p50 {entry['trtpipe_p50_ms']:.2f} ms), "
            f"runs at {figure(entry)} the speed of the fastest peer, {peer} (p50 {entry['peer_p50_ms']:.2f} ms)"
            f"{agreement}{_flag(entry)}{others}")


def standing_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's entries (older reports without them: computed from their rows)."""
    stored = report.get("standing")
    return stored if stored is not None else peer_standing(report["results"])


def pytorch_standing(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per device and batch, trtpipe's fastest artifact row against the fastest PyTorch row (FP32 eager, TF32,
    autocast, torch.compile in any mode, a CUDA graph: whatever the run measured), as a paired ratio (above 1:
    trtpipe is faster). On a GPU both sides are their rows without host-device copies where both have one, else
    their rows with copies; simulated rows (TensorRT's arithmetic on the CPU) are not timings of anything."""
    entries = []
    keys = sorted({(r["device"], r["batch"]) for r in results})
    for device, batch in keys:
        rows = [r for r in results if r["device"] == device and r["batch"] == batch and not r.get("simulated")
                and r.get("p50_ms", 0) > 0]
        for transfers in (False, True):
            same = [r for r in rows if bool(r.get("includes_transfers", True)) is transfers]
            torch_rows = [r for r in same if is_eager(r["backend"])]
            ours = [r for r in same if r.get("artifact") and not r.get("peer") and not r.get("reference")]
            onnx_reference = not torch_rows  # an FP32 ONNX given as MODEL: the headline is against it
            torch_rows = torch_rows or [r for r in same if r.get("reference")]
            if torch_rows and ours:
                fastest = min(torch_rows, key=lambda r: r["p50_ms"])
                best = fastest_against(ours, fastest)
                entries.append({"device": device, "batch": batch, "includes_transfers": transfers,
                                "trtpipe": best["variant"], "trtpipe_p50_ms": best["p50_ms"],
                                "trtpipe_agreement": best.get("agreement"), "pytorch": fastest["variant"],
                                "pytorch_p50_ms": fastest["p50_ms"], "pytorch_agreement": fastest.get("agreement"),
                                "against_reference": onnx_reference,
                                **_against(best, fastest)})
                break
    return entries


def describe_pytorch(entry: dict[str, Any]) -> str:
    """One line: trtpipe's fastest artifact against the fastest PyTorch row, at one batch on one device."""
    copies = "" if entry["device"] == Device.CPU else (
        ", with host-device copies" if entry["includes_transfers"] else ", device-resident")
    agreement = ""
    if entry.get("trtpipe_agreement") is not None and entry.get("pytorch_agreement") is not None:
        agreement = (f"; agreement {100 * entry['trtpipe_agreement']:.1f} % vs "
                     f"{100 * entry['pytorch_agreement']:.1f} %")
    return (f"{entry['device']} batch {entry['batch']}{copies}: trtpipe's fastest, {entry['trtpipe']} "
            f"(p50 {entry['trtpipe_p50_ms']:.2f} ms), runs at {figure(entry)} the speed of "
            f"{'the reference' if entry.get('against_reference') else 'the fastest PyTorch row'}, "
            f"{entry['pytorch']} (p50 {entry['pytorch_p50_ms']:.2f} ms){agreement}{_flag(entry)}")


def headline_prefix(entry: dict[str, Any]) -> str:
    """How the line opens: against PyTorch, or against the FP32 ONNX where that was the model benched."""
    return "Against the FP32 ONNX" if entry.get("against_reference") else "Against PyTorch"
