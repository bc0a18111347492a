"""The probe that picks how ONNX Runtime runs an artifact (runtime/onnxruntime/tune.py, timed by bench's loop), its
record beside the artifact, and the runs that read it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from trtpipe.artifact.description import describe_artifact
from trtpipe.artifact.records.tuned import tuned_path
from trtpipe.bench.environment import device_name
from trtpipe.bench.timing import measure
from trtpipe.errors import BadInput
from trtpipe.runtime.onnxruntime.settings import CudnnSearch
from trtpipe.runtime.onnxruntime.tune import _differs, candidates, tune_artifact
from trtpipe.vocab import OnnxExecution, Precision


@pytest.fixture()
def artifact(digits_onnx: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model.onnx"
    shutil.copy(digits_onnx, copy)
    shutil.copy(digits_onnx.with_suffix(".manifest.json"), tmp_path / "model.manifest.json")
    return copy


def test_the_probe_records_its_choice_and_every_later_run_uses_it(artifact: Path) -> None:
    import trtpipe

    x = np.random.default_rng(0).standard_normal((8, 1, 32, 32), dtype=np.float32)
    run = tune_artifact(artifact, OnnxExecution.CPU, x, rounds=2, seconds=0.05, timer=measure, device=device_name)
    record = json.loads(tuned_path(artifact).read_text())["executions"]["onnxruntime"]
    assert len(record["candidates"]) == 2 and all(c["p50_ms"] > 0 and c["rejected"] is None
                                                 for c in record["candidates"])
    fastest = min(record["candidates"], key=lambda c: c["p50_ms"])
    assert record["settings"]["io_binding"] is fastest["settings"]["io_binding"] is run.settings["io_binding"]
    assert describe_artifact(artifact).tuned[OnnxExecution.CPU]["io_binding"] is run.settings["io_binding"]
    with trtpipe.load(artifact) as model:
        assert model.backend.io_binding is run.settings["io_binding"]
    with trtpipe.load(artifact, io_binding=not run.settings["io_binding"]) as model:  # the caller's setting wins
        assert model.backend.io_binding is not run.settings["io_binding"]


def test_a_record_for_other_bytes_is_ignored_and_a_damaged_one_refused(artifact: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    x = np.zeros((2, 1, 32, 32), np.float32)
    tune_artifact(artifact, OnnxExecution.CPU, x, rounds=1, seconds=0.02, timer=measure, device=device_name)
    record = json.loads(tuned_path(artifact).read_text())
    tuned_path(artifact).write_text(json.dumps(record | {"artifact_sha256": "0" * 64}))
    assert describe_artifact(artifact).tuned == {}
    assert "written for other bytes" in capsys.readouterr().err
    record["executions"]["onnxruntime"]["settings"]["threads"] = 64  # not a setting a probe chooses
    tuned_path(artifact).write_text(json.dumps(record))
    with pytest.raises(BadInput, match=r"model\.tuned\.json is damaged \(unknown setting threads\)"):
        describe_artifact(artifact)


def test_a_candidate_that_computes_otherwise_is_rejected() -> None:
    want = [np.linspace(-1, 1, 100, dtype=np.float32)]
    assert _differs(want, [want[0] + 1e-6], Precision.FP32) is None
    assert "differs from the plain run" in str(_differs(want, [want[0] * -1], Precision.FP32))
    assert "differs from the plain run" in str(_differs(want, [want[0] + 0.01], Precision.FP32))
    assert _differs(want, [want[0] + 0.01], Precision.FP16) is None  # FP16 kernels may differ that much


def test_the_cuda_candidates_cover_graph_layout_and_search(artifact: Path) -> None:
    cuda = candidates(OnnxExecution.CUDA)
    assert len(cuda) == 8 and all(c.io_binding for c in cuda)
    assert {(c.cuda_graph, c.prefer_nhwc, c.cudnn_search) for c in cuda} == {
        (g, n, s) for g in (True, False) for n in (True, False) for s in (CudnnSearch.EXHAUSTIVE,
                                                                          CudnnSearch.HEURISTIC)}
    assert candidates(OnnxExecution.OPENVINO) == []
    with pytest.raises(BadInput, match="Nothing to tune on onnxruntime-tensorrt"):
        tune_artifact(artifact, OnnxExecution.TENSORRT, np.zeros((1, 1, 32, 32), np.float32), timer=measure,
                      device=device_name)
    assert not tuned_path(artifact).exists()


def _fails_at_run_time(folder: Path) -> Path:
    """A model that takes the digits model's input and fails inside ONNX Runtime when run (a Reshape to 3 rows of
    8192 values): a candidate whose session opens but whose run raises ONNX Runtime's own error type."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["input", "rows"], ["logits"])], "fails",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [helper.make_tensor("rows", TensorProto.INT64, [2], [3, -1])])
    path = folder / "fails.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_a_failing_candidate_is_rejected_closed_at_once_and_the_probe_goes_on(artifact: Path, tmp_path: Path) -> None:
    from trtpipe.runtime.onnxruntime.tune import _Candidate, _probe_one
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.registry import open_artifact

    x = np.random.default_rng(0).standard_normal((8, 1, 32, 32), dtype=np.float32)
    with open_artifact(artifact) as plain:
        expected = plain.run(x)
    failing = _fails_at_run_time(tmp_path)
    opened: list = []

    def opener(path: Path):  # type: ignore[no-untyped-def]
        def open_one(settings: RunOptions):  # type: ignore[no-untyped-def]
            assert all(not hasattr(b, "session") for b in opened), "a candidate opened before the last was closed"
            opened.append(open_artifact(path, settings))
            return opened[-1]
        return open_one

    probe = [_Candidate(RunOptions(io_binding=False)), _Candidate(RunOptions(io_binding=True)),
             _Candidate(RunOptions(io_binding=True))]
    for candidate, path in zip(probe, (artifact, failing, artifact), strict=True):
        _probe_one(candidate, opener(path), {"input": x}, expected, Precision.FP32, rounds=2, seconds=0.02,
                   timer=measure)
    good, bad, after = probe
    assert bad.rejected is not None and "reshape" in bad.rejected.lower() and bad.samples == []
    assert good.rejected is None and after.rejected is None and len(after.samples) >= 6  # the one after it ran
    assert all(c.backend is None and c.call is None for c in probe)
    assert all(not hasattr(b, "session") for b in opened)  # every session closed, the failing one too
