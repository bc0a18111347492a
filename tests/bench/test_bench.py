"""bench: one run measures PyTorch FP32 and the artifacts with the same inputs, and reports a fixed layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import error_line
from trtpipe.bench.timing import LatencyStats, measure

ROW_KEYS = {"variant", "backend", "precision", "batch", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms",
            "throughput", "speedup_vs_torch_fp32", "max_abs_err", "top1_agreement"}


def test_bench_json_markdown_and_table(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    json_path, markdown_path = tmp_path / "r.json", tmp_path / "r.md"
    result = run_cli("bench", "digits_resnet", digits_onnx, "--batch", "1,4", "--threads", "1", "--warmup", "1",
                     "--iters", "3", "--json", json_path, "--markdown", markdown_path)
    assert result.exit_code == 0, result.output
    assert "latency vs PyTorch FP32 eager" in result.output

    report = json.loads(json_path.read_text())
    assert {"environment", "model", "results"} <= set(report)
    assert report["environment"]["threads"] == 1 and report["environment"]["cpu"]
    from importlib.util import find_spec

    if find_spec("openvino"):  # the optional runtimes' versions are named too (their rows depend on them)
        assert report["environment"]["versions"]["openvino"]
    assert report["model"]["name"] == "digits_resnet"
    rows = report["results"]
    assert [(r["backend"], r["batch"]) for r in rows] == [("torch", 1), ("torch", 4), ("onnxruntime", 1),
                                                           ("onnxruntime", 4)]
    for row in rows:
        assert set(row) >= ROW_KEYS
        assert row["iters"] == 3 and row["p50_ms"] <= row["p99_ms"]
        assert row["throughput"] == pytest.approx(row["batch"] * 1000 / row["p50_ms"])
    baseline = [r for r in rows if r["backend"] == "torch"]
    assert all(r["precision"] == "fp32" and r["speedup_vs_torch_fp32"] == 1.0 for r in baseline)
    onnx_rows = [r for r in rows if r["backend"] == "onnxruntime"]
    for row in onnx_rows:
        # Three runs make three rounds of one run: the p50 is the median of the rounds' p50s, the speedup the
        # median of the two rows' p50s paired round by round, with its interval over the rounds.
        base = next(b for b in baseline if b["batch"] == row["batch"])
        assert row["p50_ms"] == pytest.approx(float(np.median(row["round_p50_ms"])))
        paired = [b / o for b, o in zip(base["round_p50_ms"], row["round_p50_ms"], strict=True)]
        assert row["speedup_vs_torch_fp32"] == pytest.approx(float(np.median(paired)))
        low, high = row["speedup_interval"]["low"], row["speedup_interval"]["high"]
        assert row["speedup_interval"]["units"] == 3 and low <= row["speedup_vs_torch_fp32"] <= high
        assert len(row["round_p99_ms"]) == 3 and row["tail_ms"] == pytest.approx(np.median(row["round_p99_ms"]))
        assert row["top1_agreement"] == 1.0 and row["max_abs_err"] < 1e-3
        assert row["top1_accuracy"] >= 0.95 and row["agreement_samples"] == 847
    assert "| Variant |" in markdown_path.read_text()


def test_static_batch_artifact_is_measured_at_its_batch_only(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    static = tmp_path / "static.onnx"
    assert run_cli("convert", "digits_resnet", "--input-shape", "4x1x32x32", "--static-batch", "-o", static
                   ).exit_code == 0
    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", static, "--batch", "1,4", "--iters", "2", "--warmup", "0",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    assert "static batch of 4" in result.output
    rows = json.loads(json_path.read_text())["results"]
    assert [r["batch"] for r in rows if r["backend"] == "onnxruntime"] == [4]
    assert next(r for r in rows if r["backend"] == "onnxruntime")["agreement_samples"] == 844


def test_bench_bad_input(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "digits_resnet", tmp_path / "missing.onnx", "--iters", "1")
    assert result.exit_code == 1 and "does not exist" in error_line(result.output)
    result = run_cli("bench", "digits_resnet", "--batch", "0,2")
    assert result.exit_code == 2 and "positive batch sizes" in result.output
    fake = tmp_path / "fake.onnx"
    fake.write_bytes(b"nope")
    result = run_cli("bench", "digits_resnet", fake, "--iters", "1")
    assert result.exit_code == 1 and "is not a valid ONNX model" in error_line(result.output)


def test_statistics_of_known_samples() -> None:
    stats = LatencyStats.from_samples(np.arange(1, 101, dtype=float), batch=4)
    assert stats.iters == 100 and stats.min_ms == 1 and stats.max_ms == 100
    assert stats.p50_ms == pytest.approx(50.5) and stats.p90_ms == pytest.approx(90.1)
    assert stats.p99_ms == pytest.approx(99.01) and stats.mean_ms == pytest.approx(50.5)
    assert stats.throughput == pytest.approx(4 * 1000 / 50.5)


def test_measure_discards_warmup_and_honours_iteration_count() -> None:
    calls = []
    samples = measure(lambda: calls.append(1), warmup=3, iters=7, duration_s=None)
    assert len(calls) == 10 and len(samples) == 7
    samples = measure(lambda: None, warmup=0, iters=None, duration_s=0.01, min_iters=4)
    assert len(samples) >= 4


def test_bench_labels_optimized_artifacts(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    fp16, trt = tmp_path / "fp16.onnx", tmp_path / "trt.onnx"
    assert run_cli("optimize", digits_onnx, "-o", fp16, "--precision", "fp16", "--calib", "digits").exit_code == 0
    assert run_cli("optimize", digits_onnx, "-o", trt, "--precision", "int8", "--target", "tensorrt",
                   "--calib", "digits").exit_code == 0
    json_path, markdown_path = tmp_path / "r.json", tmp_path / "r.md"
    result = run_cli("bench", "digits_resnet", fp16, trt, "--batch", "2", "--iters", "2", "--warmup", "0",
                     "--peers", "--json", json_path, "--markdown", markdown_path)
    assert result.exit_code == 0, result.output
    # What the run left out is in the results, not only on the terminal: peers need an FP32 ONNX to quantize.
    report = json.loads(json_path.read_text())
    # (A busy machine adds its own warning, bench/other_load.py: not this test's business.)
    left_out = [w for w in report["warnings"] if not w.startswith("Other processes used")]
    assert left_out == ["Peers skipped: they quantize an FP32 ONNX, and none is among the artifacts."]
    assert "Not in this table, and why:\n\n- Peers skipped: they quantize an FP32 ONNX" in markdown_path.read_text()
    rows = {r["variant"]: r for r in report["results"]}
    assert rows["onnxruntime-fp16 (fp16)"]["precision"] == "fp16"
    simulated = rows["onnxruntime-int8-trtsim (trt)"]
    assert simulated["precision"] == "int8" and simulated["target"] == "tensorrt"
    assert "latency is not" in simulated["note"]
    assert simulated["simulated"] and simulated["speedup_vs_torch_fp32"] is None  # no speedup from a simulation
    assert simulated["top1_accuracy"] >= 0.985  # TensorRT arithmetic keeps the accuracy


def test_every_row_says_what_memory_it_needed(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", digits_onnx, "--batch", "1", "--iters", "2", "--warmup", "0",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(json_path.read_text())["results"]
    assert all(r["host_memory_mb"] is not None and r["host_memory_mb"] > 0 for r in rows)
    assert all(r["device_memory_mb"] is None for r in rows)  # no GPU row
    assert "Host MB" in result.output


def test_memory_probe_sees_what_a_variant_holds_and_not_what_an_earlier_one_freed() -> None:
    from trtpipe.bench.memory import MemoryProbe

    with MemoryProbe() as big:
        held = np.ones(200_000_000 // 8)  # 200 MB, touched
        big.read()
    del held
    with MemoryProbe() as small:  # the 200 MB were freed and handed back: they are not this variant's
        small_array = np.ones(10_000_000 // 8)
        small.read()
    del small_array
    # The peak counts the whole resident set: clean file-backed pages (libraries) the kernel reclaims under memory
    # pressure while the 200 MB are touched lower it by some MB (188.6 seen in a busy CI run), never by a variant.
    assert big.host_mb is not None and 170 <= big.host_mb <= 260
    assert small.host_mb is not None and small.host_mb < 40


def test_pytorch_baselines_are_rows_beside_the_reference(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """torch.compile and autocast rows are measured against eager FP32 and never taken for the reference."""
    from trtpipe.hardware import has_bf16

    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", "--batch", "1", "--iters", "3", "--warmup", "2", "--baselines",
                     "compile,autocast", "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(json_path.read_text())["results"]}
    assert rows["pytorch-fp32"]["baseline"] is None and rows["pytorch-fp32"]["speedup_vs_torch_fp32"] == 1.0
    compiled = rows["pytorch-fp32-compile"]
    assert compiled["baseline"] == "compile" and compiled["precision"] == "fp32"
    paired = [e / c for e, c in zip(rows["pytorch-fp32"]["round_p50_ms"], compiled["round_p50_ms"], strict=True)]
    assert compiled["speedup_vs_torch_fp32"] == pytest.approx(float(np.median(paired)))  # paired round by round
    assert compiled["max_abs_err"] < 1e-3 and compiled["top1_agreement"] == 1.0
    if has_bf16():
        autocast = rows["pytorch-bf16-autocast"]
        assert autocast["precision"] == "bf16" and autocast["baseline"] == "autocast"
        assert 1e-4 < autocast["max_abs_err"] < 1.0 and autocast["top1_agreement"] > 0.97  # BF16 arithmetic
    else:
        assert "pytorch-bf16-autocast" not in rows and "neither AVX512-BF16 nor AMX" in result.output


def test_bf16_autocast_is_skipped_with_one_line_where_the_cpu_lacks_it(monkeypatch, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                         run_cli) -> None:
    import trtpipe.bench.plan as plan

    monkeypatch.setattr(plan, "has_bf16", lambda: False)  # this machine's CPU flags, as a CPU without BF16
    result = run_cli("bench", "digits_resnet", "--batch", "1", "--iters", "2", "--warmup", "0", "--baselines",
                     "autocast", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "pytorch-bf16-autocast skipped: this CPU has neither AVX512-BF16 nor AMX" in result.output
    assert [r["variant"] for r in json.loads((tmp_path / "r.json").read_text())["results"]] == ["pytorch-fp32"]


def test_peers_are_rows_of_the_same_run_and_never_chosen(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """bench --peers quantizes the FP32 ONNX with ONNX Runtime's quantize_static (and NNCF for OpenVINO where
    installed) on the model's calibration split and measures them beside trtpipe's rows."""
    import importlib.util

    from trtpipe.bench.rows import BenchRow
    from trtpipe.hardware import has_vnni
    from trtpipe.pipeline.select import choose

    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", digits_onnx, "--peers", "--batch", "1", "--iters", "3", "--warmup",
                     "1", "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = [BenchRow.from_dict(r) for r in json.loads(json_path.read_text())["results"]]
    peers = {r.peer: r for r in rows if r.peer}
    assert "onnxruntime.quantization" in peers
    ort = peers["onnxruntime.quantization"]
    # ORT's U8S8 peer uses full 8-bit weights: without VNNI, AVX2's int8 dot product (vpmaddubsw) saturates at
    # 16 bits and the peer really loses accuracy (82 % on digits on a Zen 3; trtpipe's cpu target uses 7-bit
    # weights there for this reason). With VNNI it keeps the model's accuracy.
    floor = 0.97 if has_vnni() else 0.5
    assert ort.precision == "int8" and ort.artifact is None and ort.top1_accuracy > floor
    assert ort.speedup_vs_torch_fp32 is not None and ort.agreement_samples == 847
    if importlib.util.find_spec("nncf") and importlib.util.find_spec("openvino"):
        nncf = next(r for tool, r in peers.items() if tool.startswith("nncf"))
        assert nncf.backend == "openvino" and nncf.precision == "int8" and nncf.top1_accuracy > 0.97
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.artifact == str(digits_onnx)

    # Every report says where trtpipe stands: its fastest row against the fastest peer, round by round too.
    [standing] = json.loads(json_path.read_text())["standing"]
    ours = min((r for r in rows if r.artifact), key=lambda r: r.p50_ms)
    fastest_peer = min(peers.values(), key=lambda r: r.p50_ms)
    assert standing["trtpipe"] == ours.variant and standing["peer"] == fastest_peer.variant
    assert standing["p50_ratio"] == pytest.approx(fastest_peer.p50_ms / ours.p50_ms)
    paired = [p / o for p, o in zip(fastest_peer.round_p50_ms, ours.round_p50_ms, strict=True)]
    assert standing["rounds"] == 3 and standing["ratio"] == pytest.approx(sorted(paired)[1])  # their median
    assert standing["round_ratio_min"] <= standing["round_ratio_median"] <= standing["round_ratio_max"]
    assert "Against the peers, batch 1: trtpipe's fastest" in result.output


def test_timed_runs_are_split_into_rounds_taken_in_turn(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """--rounds splits each row's runs (the total stays what was asked for) and keeps each round's p50."""
    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", digits_onnx, "--batch", "1,2", "--iters", "5", "--rounds", "2",
                     "--warmup", "0", "--json", json_path)
    assert result.exit_code == 0, result.output
    report = json.loads(json_path.read_text())
    assert report["settings"]["rounds"] == 2
    for row in report["results"]:
        assert row["iters"] == 5 and len(row["round_p50_ms"]) == 2
        assert row["min_ms"] <= min(row["round_p50_ms"]) <= max(row["round_p50_ms"]) <= row["max_ms"]
    assert report["standing"] == []  # no peers in this run: nothing to stand against
    result = run_cli("bench", "digits_resnet", "--batch", "1", "--iters", "2", "--rounds", "1", "--warmup", "0",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    assert [r["round_p50_ms"] for r in json.loads(json_path.read_text())["results"]] == [None]


def test_standing_takes_only_rows_that_ran_here_against_peers() -> None:
    """A TensorRT simulation's CPU latency means nothing: it is never trtpipe's 'fastest' against a peer."""
    from trtpipe.bench.standing import describe, peer_standing

    def row(variant: str, p50: float, **extra: object) -> dict[str, object]:
        return {"variant": variant, "batch": 1, "device": "cpu", "p50_ms": p50, "agreement": 0.9} | extra

    rows = [row("pytorch-fp32", 10.0), row("onnxruntime-int8-trtsim (t)", 0.5, artifact="t.onnx", simulated=True),
            row("openvino-int8-cpu (q)", 2.0, artifact="q.onnx", round_p50_ms=[2.0, 2.2, 2.0]),
            row("onnxruntime-int8-cpu (q)", 2.5, artifact="q.onnx", round_p50_ms=[2.5, 2.4, 2.6]),
            row("peer: openvino-int8 (NNCF PTQ)", 2.1, peer="nncf", round_p50_ms=[2.1, 2.0, 2.3], agreement=0.8)]
    [entry] = peer_standing(rows)
    assert entry["trtpipe"] == "openvino-int8-cpu (q)" and entry["p50_ratio"] == pytest.approx(2.1 / 2.0)
    assert entry["round_ratio_min"] == pytest.approx(2.0 / 2.2) and entry["round_ratio_max"] == pytest.approx(1.15)
    # The headline is the median of the paired round ratios, not the ratio of the p50s over all runs, with its
    # interval over the rounds; three rounds that disagree by 25 % flag it.
    assert entry["ratio"] == pytest.approx(1.05) and entry["interval"]["units"] == 3
    line = describe(entry)
    assert ("1.05x (median of 3 paired rounds, 95 % interval 0.91-1.15x) the speed of the fastest peer, openvino-int8 "
            "(NNCF PTQ) (p50 2.10 ms)") in line
    assert "90.0 % vs 80.0 %" in line and "unstable: its 3 paired rounds disagree" in line
    assert peer_standing(rows[:4]) == []  # no peer row
    assert entry["other_peers"] == []

    # A faster peer that lost accuracy takes the headline; the others stay in the line with their agreement.
    careless = row("peer: onnxruntime-int8 (quantize_static U8S8)", 1.9, peer="ort", round_p50_ms=[1.8, 2.0, 1.7],
                   agreement=0.6)
    [entry] = peer_standing([*rows, careless])
    assert entry["peer"] == careless["variant"] and entry["ratio"] == pytest.approx(0.9)
    [other] = entry["other_peers"]
    assert other["peer"] == "peer: openvino-int8 (NNCF PTQ)" and other["ratio"] == pytest.approx(1.05) \
        and other["rounds"] == 3
    assert describe(entry).endswith("; against openvino-int8 (NNCF PTQ) 1.05x (median of 3 paired rounds, 95 % "
                                    "interval 0.91-1.15x) (80.0 % agreement)")
    # Two rounds have no median worth the name (their mean, which one stalled round makes): the p50s decide.
    two = [r | {"round_p50_ms": [2.0, 20.0]} if r.get("peer") else r | {"round_p50_ms": [2.0, 2.0]}
           for r in rows if r.get("round_p50_ms")]
    [pair] = peer_standing(two)
    assert pair["ratio"] == pytest.approx(2.1 / 2.0) and pair["rounds"] is None and pair["interval"] is None
    [single] = peer_standing([{k: v for k, v in r.items() if k != "round_p50_ms"} for r in rows])
    assert single["ratio"] == pytest.approx(2.1 / 2.0) and single["rounds"] is None  # one round: the p50s
    assert "1.05x (the ratio of the p50s: fewer than 3 rounds give no interval)" in describe(single)


def test_the_pytorch_standing_names_the_fastest_pytorch_row_on_the_same_device() -> None:
    """The comparison a PyTorch user makes: trtpipe's fastest artifact against whichever PyTorch row was fastest
    (compile, a CUDA graph...), device-resident rows against device-resident ones, never a CPU row against a GPU."""
    from trtpipe.bench.standing import describe_pytorch, pytorch_standing

    def row(variant: str, p50: float, device: str = "cuda", transfers: bool = True, **extra: object) -> dict:
        return {"variant": variant, "batch": 8, "device": device, "p50_ms": p50, "includes_transfers": transfers,
                "backend": "torch", "agreement": 1.0} | extra

    ours = {"backend": "onnxruntime", "artifact": "m.onnx"}
    rows = [row("pytorch-fp32", 10.0), row("pytorch-fp32 [no transfers]", 8.0, transfers=False),
            row("pytorch-fp16-cl-compile-reduce-overhead", 3.0),
            row("pytorch-fp16-cl-compile-reduce-overhead [no transfers]", 1.5, transfers=False),
            row("onnxruntime-cuda-fp16 (m)", 2.5, **ours),
            row("onnxruntime-cuda-fp16 (m) [no transfers]", 1.0, transfers=False, **ours),
            row("onnxruntime-int8-trtsim (t)", 0.1, **ours, simulated=True),
            row("onnxruntime-fp32 (m)", 20.0, device="cpu", **ours)]
    [entry] = pytorch_standing(rows)
    assert entry["device"] == "cuda" and entry["includes_transfers"] is False
    assert entry["pytorch"] == "pytorch-fp16-cl-compile-reduce-overhead [no transfers]"
    assert entry["trtpipe"] == "onnxruntime-cuda-fp16 (m) [no transfers]" and entry["ratio"] == pytest.approx(1.5)
    assert "cuda batch 8, device-resident: trtpipe's fastest" in describe_pytorch(entry)
    assert "1.50x (the ratio of the p50s: fewer than 3 rounds give no interval) the speed of the fastest PyTorch " \
        "row, pytorch-fp16-cl-compile-reduce-overhead" in describe_pytorch(entry)
    # Only rows with copies on both sides: those are compared.
    [copies] = pytorch_standing([r for r in rows if r["includes_transfers"]])
    assert copies["includes_transfers"] and copies["ratio"] == pytest.approx(3.0 / 2.5)


def test_half_precision_pytorch_rows_and_a_gpu_only_row_on_the_cpu(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """compile-half is torch.compile on a BF16 copy on a CPU with BF16 kernels (skipped with one line elsewhere);
    graph-half needs a GPU and says so; the report names the fastest PyTorch row."""
    from trtpipe.hardware import has_bf16

    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", "--batch", "2", "--iters", "2", "--warmup", "1", "--rounds", "1",
                     "--baselines", "compile-half,graph-half", "--json", json_path)
    assert result.exit_code == 0, result.output
    assert "pytorch-graph-half skipped: a CUDA graph needs --device cuda." in result.output
    report = json.loads(json_path.read_text())
    rows = {r["variant"]: r for r in report["results"]}
    if has_bf16():
        half = rows["pytorch-bf16-compile"]
        assert half["precision"] == "bf16" and half["baseline"] == "compile-half" and half["top1_agreement"] > 0.97
    else:
        assert "pytorch-bf16-compile skipped: this CPU has neither AVX512-BF16 nor AMX" in result.output
    assert report["standing_pytorch"] == []  # no artifact in this run: nothing stands against PyTorch
    result = run_cli("bench", "digits_resnet", "--batch", "2", "--iters", "2", "--warmup", "0", "--rounds", "1",
                     "--baselines", "none", "--json", json_path)
    assert [r["variant"] for r in json.loads(json_path.read_text())["results"]] == ["pytorch-fp32"]


def test_speedups_compare_rows_on_the_references_device_only() -> None:
    from trtpipe.bench.rows import BenchRow
    from trtpipe.bench.runner import _speedups

    def row(variant: str, device: str, p50: float, reference: bool = False) -> BenchRow:
        latency = LatencyStats(iters=1, p50_ms=p50, p90_ms=p50, p99_ms=p50, mean_ms=p50, std_ms=0.0, min_ms=p50,
                               max_ms=p50, throughput=1.0)
        return BenchRow(variant=variant, backend="onnxruntime", precision="fp32", device=device, batch=1,
                        latency=latency, reference=reference)

    rows = [row("onnxruntime-cuda-fp32 (ref)", "cuda", 2.0, reference=True), row("gpu fp16", "cuda", 1.0),
            row("cpu fp16", "cpu", 0.5)]
    _speedups(rows)
    assert [r.speedup_vs_torch_fp32 for r in rows] == [1.0, 2.0, None]


def test_an_artifact_with_fp16_inputs_is_fed_fp16(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """optimize --no-keep-io-fp32 writes FP16 inputs and outputs (for a caller that feeds FP16 on a GPU): bench
    feeds it FP16, as that caller would, and judges its FP16 outputs like any other row's."""
    fp16 = tmp_path / "io16.onnx"
    assert run_cli("optimize", digits_onnx, "-o", fp16, "--precision", "fp16", "--calib", "digits",
                   "--no-keep-io-fp32").exit_code == 0
    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", fp16, "--batch", "2", "--iters", "2", "--warmup", "0", "--rounds", "1",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    [row] = [r for r in json.loads(json_path.read_text())["results"] if r["artifact"]]
    assert row["precision"] == "fp16" and row["host_memory_mb"] is not None and row["top1_agreement"] > 0.99
