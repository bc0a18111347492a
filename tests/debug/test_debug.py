"""``trtpipe debug`` on real ONNX Runtime sessions: tiny graphs optimized with trtpipe's own optimize API, one of
them deliberately broken, compared with their FP32 source tensor by tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import constant, onnx_model, tensor
from tests.conftest import error_line
from trtpipe.debug.compare import debug_model
from trtpipe.debug.match import Relation, match_tensors
from trtpipe.debug.options import DebugOptions
from trtpipe.debug.report import ErrorStats
from trtpipe.errors import BadInput

RNG = np.random.default_rng(3)


def _weights(gain: np.ndarray | None = None) -> list[onnx.TensorProto]:
    """conv1 8x3x3x3, conv2 8x8x3x3, conv3 4x8x1x1 (seeded); ``gain`` scales conv1's output channels and divides
    conv2's input channels by the same: the function is unchanged (Relu is positively homogeneous)."""
    rng = np.random.default_rng(0)
    w1, b1 = rng.standard_normal((8, 3, 3, 3)) * 0.3, rng.standard_normal(8) * 0.1
    w2, b2 = rng.standard_normal((8, 8, 3, 3)) * 0.2, rng.standard_normal(8) * 0.1
    w3 = rng.standard_normal((4, 8, 1, 1)) * 0.3
    if gain is not None:
        w1, b1, w2 = w1 * gain[:, None, None, None], b1 * gain, w2 / gain[None, :, None, None]
    return [constant(w1, "w1"), constant(b1, "b1"), constant(w2, "w2"), constant(b2, "b2"), constant(w3, "w3"),
            constant(np.zeros(4), "b3")]


def tiny(size: int = 16, gain: np.ndarray | None = None, prefix: str = "") -> onnx.ModelProto:
    """x [N, 3, size, size] -> conv1 -> relu1 -> conv2 -> relu2 -> conv3 -> y, tensors named c1, r1, c2, r2, y
    (after ``prefix``)."""
    p = prefix
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], [f"{p}c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [f"{p}c1"], [f"{p}r1"], name="relu1"),
             helper.make_node("Conv", [f"{p}r1", "w2", "b2"], [f"{p}c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [f"{p}c2"], [f"{p}r2"], name="relu2"),
             helper.make_node("Conv", [f"{p}r2", "w3", "b3"], [f"{p}y"], name="conv3")]
    return onnx_model(nodes, _weights(gain), [tensor("x", ["N", 3, size, size])],
                      [tensor(f"{p}y", ["N", 4, size, size])], name="tiny")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The FP32 source, its calibration data, and the INT8 (tensorrt and cpu targets) and FP16 graphs optimize
    makes of it, each with its manifest."""
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize

    folder = tmp_path_factory.mktemp("debug")
    paths = {"fp32": folder / "fp32.onnx", "calib": folder / "calib.npy"}
    onnx.save(tiny(), paths["fp32"])
    np.save(paths["calib"], RNG.standard_normal((8, 3, 16, 16)).astype(np.float32))
    for name, options in (("int8", {"precision": "int8", "target": "tensorrt"}),
                          ("int8_cpu", {"precision": "int8", "target": "cpu"}),
                          ("fp16", {"precision": "fp16", "target": "cpu"})):  # a target: no torch import to guess it
        paths[name] = folder / f"{name}.onnx"
        optimize(paths["fp32"], paths[name], OptimizeOptions(calib=str(paths["calib"]), quality="fast", **options))
    return paths


def broken(made: dict[str, Path], folder: Path) -> Path:
    """The tensorrt INT8 graph with the Q/DQ in front of conv2 given a scale 1000 times its calibrated one: every
    value of r1 rounds to zero there."""
    model = onnx.load(made["int8"])
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "r1")
    scale = next(t for t in model.graph.initializer if t.name == quantize.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * 1000, scale.name))
    path = folder / "broken.onnx"
    onnx.save(model, path)
    return path


def test_a_qdq_with_an_absurd_scale_is_named_first(made: dict[str, Path], tmp_path: Path) -> None:
    report = debug_model(broken(made, tmp_path), DebugOptions(reference=made["fp32"], data=str(made["calib"])))
    first = report.first_jump
    assert first is not None and first.tensor == "r1_DequantizeLinear_Output"
    assert first.reference == "r1" and first.relation is Relation.AFTER_QDQ and first.op == "DequantizeLinear"
    assert first.relative_error == pytest.approx(1.0) and first.inputs == ("r1",) and first.input_error < 0.05
    before = report.rows[:report.rows.index(first)]
    assert [row.tensor for row in before] == ["x_DequantizeLinear_Output", "c1", "r1"]
    assert not any(row.jump for row in before)
    # Downstream tensors are as wrong, but handed that error: not jumps of their own.
    assert all(not row.jump and row.relative_error > 0.5 for row in report.rows[report.rows.index(first) + 1:])
    assert "first jumps at r1_DequantizeLinear_Output" in report.summary()


def test_a_sound_int8_graph_has_no_jump_and_finds_its_reference_and_data(made: dict[str, Path]) -> None:
    report = debug_model(made["int8"])  # reference and data from its manifest
    assert Path(report.reference) == made["fp32"] and report.data == str(made["calib"]) and report.samples == 4
    assert report.first_jump is None and max(row.relative_error for row in report.rows) < 0.05
    tensors = [row.tensor for row in report.rows]
    assert tensors == ["x_DequantizeLinear_Output", "c1", "r1", "r1_DequantizeLinear_Output", "c2", "r2",
                       "r2_DequantizeLinear_Output", "y"]  # topological order; weights' Q/DQ are not activations
    assert report.unmatched >= 3  # the weights' DequantizeLinear outputs


def test_tensors_pair_by_name_and_q_dq_suffix(made: dict[str, Path]) -> None:
    matching = match_tensors(onnx.load(made["int8"]), onnx.load(made["fp32"]))
    pairs = {p.tensor: (p.reference, p.relation) for p in matching.pairs}
    assert pairs["r1_DequantizeLinear_Output"] == ("r1", Relation.AFTER_QDQ) and pairs["c2"] == ("c2", Relation.SAME)
    assert matching.upstream["c2"] == ("r1_DequantizeLinear_Output",)  # through nothing but the weights' DQ
    assert matching.upstream["x_DequantizeLinear_Output"] == ()  # the graph input is exact


def test_an_activation_folded_into_its_qdq_is_compared_after_it(made: dict[str, Path]) -> None:
    # The cpu target's asymmetric activations let ONNX Runtime fold each Relu into the Q/DQ after it: the Conv
    # then writes "r1", which holds the pre-activation.
    report = debug_model(made["int8_cpu"], DebugOptions(data=str(made["calib"])))
    assert {s.tensor for s in report.skipped} == {"r1", "r2"}
    assert all("Relu" in s.reason and "_DequantizeLinear_Output is compared instead" in s.reason
               for s in report.skipped)
    assert report.first_jump is None


def test_an_fp16_graph(made: dict[str, Path]) -> None:
    report = debug_model(made["fp16"], DebugOptions(samples=2))
    assert [row.tensor for row in report.rows] == ["c1", "r1", "c2", "r2", "y"]
    assert all(row.relation is Relation.SAME and row.relative_error < 1e-2 for row in report.rows)
    assert report.first_jump is None and report.samples == 2


def test_small_memory_compares_in_chunks_with_the_same_figures(made: dict[str, Path]) -> None:
    whole = debug_model(made["int8"], DebugOptions(data=str(made["calib"])))
    parts = debug_model(made["int8"], DebugOptions(data=str(made["calib"]), memory=1024))
    assert whole.chunks == 1 and parts.chunks == len(parts.rows)
    assert [r.relative_error for r in parts.rows] == pytest.approx([r.relative_error for r in whole.rows])


def test_a_tensor_rescaled_per_channel_is_judged_after_its_gains(tmp_path: Path) -> None:
    # What equalize and scale_depthwise do on purpose: c1 and r1 carry the same information, channel by channel
    # 0.1x to 10x the reference's; conv2's weights undo it.
    gain = np.geomspace(0.1, 10, 8)
    reference, model = tmp_path / "fp32.onnx", tmp_path / "rescaled.onnx"
    onnx.save(tiny(), reference)
    onnx.save(tiny(gain=gain), model)
    report = debug_model(model, DebugOptions(reference=reference))
    rows = {row.tensor: row for row in report.rows}
    assert rows["c1"].relative_error > 1 and rows["c1"].error < 1e-5
    assert rows["c1"].gain_spread == pytest.approx(100, rel=1e-3)
    assert rows["c2"].gain_spread is None and rows["c2"].relative_error < 1e-5
    assert report.first_jump is None


def test_gain_fit_does_not_explain_a_zeroed_tensor() -> None:
    reference = RNG.standard_normal((2, 4, 5, 5))
    stats = ErrorStats()
    stats.update(reference, np.zeros_like(reference))
    assert stats.gain_fit() is None and stats.relative_error == pytest.approx(1.0) and stats.cosine == 0.0
    noisy = ErrorStats()
    noisy.update(reference, reference + RNG.standard_normal(reference.shape))
    assert noisy.gain_fit() is None  # noise is no per-channel gain
    broken_values = ErrorStats()
    broken_values.update(reference, np.where(reference > 0, np.inf, reference))
    assert broken_values.relative_error == float("inf") and broken_values.nonfinite > 0


# -- the command ----------------------------------------------------------------------------------------------

def test_cli_names_the_broken_tensor_and_writes_json(run_cli, made: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    result = run_cli("debug", broken(made, tmp_path), "--reference", made["fp32"], "--data", made["calib"],
                     "--samples", "2", "--json", out)
    assert result.exit_code == 0, result.output
    assert "<- FIRST JUMP" in result.output and "r1_DequantizeLinear_Output" in result.output
    data = json.loads(out.read_text())
    assert data["first_jump"] == "r1_DequantizeLinear_Output" and data["samples"] == 2
    assert data["jump_rule"]["threshold"] == 0.1 and len(data["rows"]) == 8


def test_cli_without_data_warns_and_runs_random_inputs(run_cli, made: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lone = tmp_path / "lone.onnx"
    shutil.copy(made["int8"], lone)  # no manifest: neither reference nor data is recorded
    result = run_cli("debug", lone, "--reference", made["fp32"])
    assert result.exit_code == 0, result.output
    assert "seeded random inputs" in result.output and "give --data" in result.output


@pytest.mark.parametrize(("case", "expected"), [
    ("missing", "ONNX file {folder}/absent.onnx does not exist."),
    ("no manifest", "has no trtpipe manifest: give the FP32 ONNX it was made from with --reference FP32.onnx."),
    ("unrelated", "share no float tensor by name"),
    ("other shape", "has shape ?x3x16x16 in the model and ?x3x8x8 in the reference: shapes differ"),
    ("quantized reference", "is int8, not FP32"),
])
def test_cli_bad_input_is_one_line(run_cli, made: dict[str, Path], tmp_path: Path, case: str,  # type: ignore[no-untyped-def]
                                   expected: str) -> None:
    lone = tmp_path / "lone.onnx"
    shutil.copy(made["int8"], lone)
    other = tmp_path / "other.onnx"
    args: list[object] = {
        "missing": [tmp_path / "absent.onnx"],
        "no manifest": [lone],
        "unrelated": [made["fp16"], "--reference", other],  # (an INT8 graph shares its input's Q/DQ with any)
        "other shape": [lone, "--reference", other],
        "quantized reference": [lone, "--reference", made["int8"]],
    }[case]
    onnx.save(tiny(prefix="other_") if case == "unrelated" else tiny(size=8), other)
    result = run_cli("debug", *args, "--data", made["calib"])
    assert result.exit_code == 1
    assert expected.format(folder=tmp_path) in error_line(result.output)


def test_options_refuse_bad_values() -> None:
    with pytest.raises(BadInput, match="'jump_factor' must be at least 1"):
        DebugOptions(jump_factor=0.5)


def test_only_the_first_non_finite_tensor_jumps() -> None:
    from trtpipe.debug.report import LayerRow, mark_jumps

    def row(index: int, error: float, inputs: tuple[str, ...]) -> LayerRow:
        return LayerRow(index, f"t{index}", f"t{index}", Relation.SAME, "Conv", f"n{index}", (1,), 1.0, error, 0.0,
                        error, inputs=inputs)

    rows = [row(1, 0.01, ()), row(2, float("inf"), ("t1",)), row(3, float("nan"), ("t2",)), row(4, 0.5, ("t3",))]
    mark_jumps(rows, 0.1, 4.0)
    assert [r.jump for r in rows] == [False, True, False, False]
