"""The accuracy budget: when full INT8 loses too much, keep as few layers as possible in FP32.

Every mix is the chosen INT8 model (after AdaRound and bias correction, when asked for) with some nodes taken
back to FP32 by graph surgery (:mod:`keep_fp32`): no re-quantization, so a try costs one evaluation, and what was
learned for the other layers stays.

1. Units: the quantised nodes that read one activation tensor fall back together, because a tensor's Q/DQ only
   disappears when none of its readers is quantised (the two convolutions after a residual block, say). Where
   quantised nodes also write their outputs through Q/DQ (the cpu target's integer kernels), the node that writes
   the tensor joins them: an FP32 reader of an INT8 node still reads that node's quantised output. (On PP-OCRv4's
   detector, most units of readers alone did not change the figure at all; the unit of one tensor with its writer
   removed over a third of the drop.)
2. Rank in two stages. First, every unit by the error it removes where it is computed, all units in one run: a
   probe model computes the FP32 graph and, beside every quantised node, its INT8 twin (the same Q/DQ, scales and
   learned weights) fed with the FP32 values, plus, where an input would stay quantised after the fallback
   (written by an INT8 node outside the unit), an FP32 twin reading it through that Q/DQ; the graph itself reduces
   each twin's squared error against the FP32 node's output, channel by channel. That local error is free of what
   earlier layers did to the unit's inputs, but blind to what later layers do with its error: on PP-OCRv4's
   detector the convolutions that mattered most to the output ranked 20th to 60th of 88 by it. So then the first
   MEASURED_UNITS by it are each kept alone in FP32 and scored by the share of the output error that removes: one
   inference per unit and sample, on a quarter of the probe (two 640x640 images, sixteen 224x224 ones), where the
   ranking used to run every unit on all 64 probe samples (a 640x640 detector's ranking alone took over ten
   minutes on two cores). Units whose fallback alone removes nothing, or makes things worse, follow in order of
   their own error: theirs can be masked by another's until that one is in FP32 (an outlier tensor's readers and
   the Add that wrote it). The probe is calibration data, not the eval data the budget is judged on, so the
   ranking does not fit the test.
3. Add in rank order, judged by the task's measure on the eval data, in steps: one unit while single units close
   the gap fast, growing (at most doubling) to about half of what the last step's rate says is still needed when
   they do not. A step joins only if the figure improves (or, on an unchanged figure, the output error drops),
   so the figure never gets worse as layers are added. A step that does not help is halved and tried again; a
   single unit that does not help is passed over, and tried once more after the rest (others may have joined).
   A step that reaches the budget is bisected back to its shortest prefix that still does. Evaluations are
   capped (``max_attempts``, about three per doubling of the unit count), and a few are held back for a last
   resort: every unit not in yet that fits under the node limit at once (units too small to show on their own
   may add up), bisected the same way.

The per-unit table (the share of the output error each removed alone, whether it was kept, and with the attempts,
the drop its step removed) is printed, and the ranking and attempts are recorded in the manifest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe import console
from trtpipe.comparison import Comparison, compare
from trtpipe.errors import TrtpipeError
from trtpipe.graph_index import GraphIndex
from trtpipe.inputs import Batch, count, take
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.evaluate import outputs
from trtpipe.optimize.int8.keep_fp32 import keep_in_fp32, reading_dequantized
from trtpipe.optimize.int8.profiles import QuantProfile
from trtpipe.optimize.int8.quantize import quantizable_nodes
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import Task

PROBE_SAMPLES = 64  # the most calibration samples the ranking runs on (the caller hands over at most this many)
PROBE_ELEMENTS = PROBE_SAMPLES * 3 * 224 * 224  # input values the ranking reads: fewer samples for larger inputs
MIN_PROBE_SAMPLES = 4
MEASURED_UNITS = 128  # units (the largest own errors first) whose effect on the output is measured one by one
MIN_MEASURE_SAMPLES = 2  # probe samples each of those measurements runs on, at least (a quarter of the probe)


class FallbackAttempt(TypedDict):
    """One evaluation of a mix (the manifest's ``int8.fallback_attempts`` entries, as JSON writes them)."""

    nodes: list[str]  # the nodes this attempt added to the ones already kept in FP32
    units: int  # how many units those nodes make
    fp32_layers: int  # nodes in FP32 before it, or with it once kept
    kept: bool
    accuracy: float | None
    drop_pp: float | None
    drop_removed_pp: float  # what it removed of the drop before it


@dataclass
class FallbackResult:
    model: onnx.ModelProto
    excluded: list[str]
    ranking: list[tuple[tuple[str, ...], float]]
    comparison: Comparison
    attempts: list[FallbackAttempt]
    probe_samples: int = 0  # calibration samples the one-run ranking read
    measured_units: int = 0  # units whose effect on the output was measured alone (the ranking's first ones)


def fallback_units(model: onnx.ModelProto, profile: QuantProfile,
                   quantized: onnx.ModelProto | None = None) -> list[tuple[str, ...]]:
    """Groups of quantisable nodes that go back to FP32 together, in graph order: the readers of one activation
    tensor (its Q/DQ only disappears when none of them is quantised); where quantised nodes also write their
    output through Q/DQ (``profile.int8_outputs``), the node that wrote the tensor too, since an FP32 reader of
    an INT8 node's output still reads it after that Q/DQ. A node whose inputs are all weights or graph constants
    is a unit of its own. With ``quantized``: only the nodes that read a dequantized tensor there (an activation
    the quantizer folded into its layer has nothing to give back)."""
    quantizable = quantizable_nodes(model, profile)
    if quantized is not None:
        dequantized_readers = reading_dequantized(quantized)
        quantizable = [name for name in quantizable if name in dequantized_readers]
    wanted = set(quantizable)
    constants = {i.name for i in model.graph.initializer}
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.name in wanted:
            for name in node.input:
                if name and name not in constants:
                    readers.setdefault(name, []).append(node.name)
    if quantized is not None and profile.int8_outputs:
        writer = _Writers(model, quantized, wanted)
        groups = [(*names, *((w,) if (w := writer.of(tensor)) and w not in names else ()))
                  for tensor, names in readers.items()]
    else:
        groups = [tuple(names) for names in readers.values()]
    units = list(dict.fromkeys(groups))
    covered = {n for unit in units for n in unit}
    return units + [(n,) for n in quantizable if n not in covered]


class _Writers:
    """The quantised node whose output Q/DQ an FP32 tensor is read through, if there is one: its producer, or
    the layer before an activation the quantizer folded into it (a Relu or Clip the quantized graph lacks)."""

    def __init__(self, model: onnx.ModelProto, quantized: onnx.ModelProto, wanted: set[str]) -> None:
        index = GraphIndex.of(model)
        self.producer = index.producer
        self.present = {node.name for node in quantized.graph.node}
        self.constants = set(index.constants)
        self.wanted = wanted

    def of(self, tensor: str) -> str | None:
        node = self.producer.get(tensor)
        while node is not None and node.name not in self.wanted:
            data = [name for name in node.input if name and name not in self.constants]
            if node.name in self.present or len(data) != 1:
                return None  # a float node of the INT8 model: its readers read its float output
            node = self.producer.get(data[0])
        return node.name if node is not None else None


def probe_samples(probe: Batch) -> int:
    """How many of ``probe``'s samples the ranking reads: PROBE_SAMPLES at 224x224 RGB, fewer for larger inputs
    (the ranking's cost is the pixels it computes), never fewer than MIN_PROBE_SAMPLES."""
    arrays = [probe] if isinstance(probe, np.ndarray) else list(probe.values())
    per_sample = max((int(np.prod(a.shape[1:])) for a in arrays), default=1) or 1
    wanted = max(MIN_PROBE_SAMPLES, min(PROBE_SAMPLES, PROBE_ELEMENTS // per_sample))
    return min(wanted, count(probe))


def _probe_count(probe: Batch, batch: int | None) -> int:
    """:func:`probe_samples`, in whole batches of a static batch size."""
    samples = probe_samples(probe) if count(probe) else 0
    if batch:
        samples = max(batch, samples - samples % batch) if count(probe) >= batch else 0
    return samples


def _measure_count(probe: Batch, batch: int | None) -> int:
    """Samples for measuring each unit alone: a quarter of the ranking's probe, at least MIN_MEASURE_SAMPLES."""
    available = count(probe)
    samples = min(available, max(MIN_MEASURE_SAMPLES, probe_samples(probe) // 4)) if available else 0
    if batch:
        samples = max(batch, samples - samples % batch) if available >= batch else 0
    return samples


class _ProbeBuilder:
    """The FP32 graph plus twins of chosen nodes, all reading the FP32 model's values: an INT8 twin per node
    (its Q/DQ, scales and learned weights, from the quantized graph), and where an input would stay quantised
    after a unit's fallback (an INT8 writer outside the unit), an FP32 twin reading that input through its Q/DQ.
    Each twin adds one output, its squared error against the FP32 node's outputs; each node one more, their
    energy."""

    def __init__(self, fp32: onnx.ModelProto, quantized: onnx.ModelProto, writers: _Writers | None) -> None:
        self.model = onnx.ModelProto()
        self.model.CopyFrom(fp32)
        del self.model.graph.output[:]
        domains = {o.domain: o for o in self.model.opset_import}
        for opset in quantized.opset_import:
            if opset.domain not in domains:
                self.model.opset_import.append(opset)
            elif domains[opset.domain].version < opset.version:
                domains[opset.domain].version = opset.version
        self.graph = self.model.graph
        self.writers = writers
        self.fp32 = {node.name: node for node in fp32.graph.node}
        self.twins = {node.name: node for node in quantized.graph.node}
        self.producer = {o: node for node in quantized.graph.node for o in node.output if o}
        self.q_initializers = {t.name: t for t in quantized.graph.initializer}
        self.constant = set(self.q_initializers)
        for node in quantized.graph.node:  # topological: a node of constants is a constant
            if all(not name or name in self.constant for name in node.input):
                self.constant.update(o for o in node.output if o)
        self.taken = ({n.name for n in self.graph.node} | {o for n in self.graph.node for o in n.output}
                      | {t.name for t in self.graph.initializer} | {i.name for i in self.graph.input})
        self.copied: dict[str, str] = {}  # quantized-graph tensor -> its copy in the probe
        self.shape_one = self._fresh("probe_shape_one")
        self.graph.initializer.append(helper.make_tensor(self.shape_one, TensorProto.INT64, [1], [1]))
        self.ranks = _ranks(fp32)
        self.axes_as_input = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 0) >= 18
        self.outputs: list[str] = []
        # Indices into ``outputs``, one per output of the node (None for an unnamed one): each output's energy,
        # its INT8 twin's error, and for (unit, node) its FP32 twin's error.
        self.energy: dict[str, list[int | None]] = {}
        self.int8: dict[str, list[int | None]] = {}
        self.after: dict[tuple[tuple[str, ...], str], list[int | None]] = {}

    def _fresh(self, name: str) -> str:
        candidate, index = f"{name}__probe", 1
        while candidate in self.taken:
            index += 1
            candidate = f"{name}__probe{index}"
        self.taken.add(candidate)
        return candidate

    def _constant(self, name: str) -> str:
        """A copy of the quantized graph's constant ``name`` (an initializer, or nodes computing one)."""
        if name not in self.copied:
            if name in self.q_initializers:
                tensor = TensorProto()
                tensor.CopyFrom(self.q_initializers[name])
                tensor.name = self._fresh(name)
                self.graph.initializer.append(tensor)
                self.copied[name] = tensor.name
            else:
                node = self.producer[name]
                twin = self._append(node, [self._constant(i) if i else i for i in node.input])
                for original, copy in zip(node.output, twin.output, strict=True):
                    if original:
                        self.copied.setdefault(original, copy)
        return self.copied[name]

    def _append(self, node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
        twin = onnx.NodeProto()
        twin.CopyFrom(node)
        twin.name = self._fresh(node.name or node.op_type)
        twin.input[:] = inputs
        twin.output[:] = [self._fresh(o) if o else o for o in node.output]
        self.graph.node.append(twin)
        return twin

    def _activation_qdq(self, name: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
        """The QuantizeLinear and DequantizeLinear that make ``name`` from an activation, if that is how."""
        dq = self.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or name in self.constant:
            return None
        q = self.producer.get(dq.input[0])
        return (q, dq) if q is not None and q.op_type == "QuantizeLinear" else None

    def _quantized(self, float_value: str, tensor: str) -> str:
        """The FP32 value ``float_value`` through the Q/DQ that makes ``tensor`` in the quantized graph."""
        if tensor not in self.copied:
            qdq = self._activation_qdq(tensor)
            assert qdq is not None
            q, dq = qdq
            q_copy = self._append(q, [float_value, *(self._constant(i) if i else i for i in q.input[1:])])
            dq_copy = self._append(dq, [q_copy.output[0], *(self._constant(i) if i else i for i in dq.input[1:])])
            self.copied[tensor] = dq_copy.output[0]
        return self.copied[tensor]

    def add(self, name: str) -> bool:
        """Give node ``name`` its INT8 twin; False where the two graphs do not hold it alike."""
        reference, twin = self.fp32.get(name), self.twins.get(name)
        if (reference is None or twin is None or twin.op_type != reference.op_type
                or len(twin.input) != len(reference.input) or len(twin.output) != len(reference.output)):
            return False
        inputs = []
        for float_value, tensor in zip(reference.input, twin.input, strict=True):
            if not tensor:
                inputs.append(tensor)
            elif tensor in self.constant:
                inputs.append(self._constant(tensor))
            elif self._activation_qdq(tensor) is not None:
                inputs.append(self._quantized(float_value, tensor))
            else:
                inputs.append(float_value)  # read in float in the INT8 model too
        copy = self._append(twin, inputs)
        self.energy[name] = [self._energy(o) if o else None for o in reference.output]
        self.int8[name] = [self._error(a, b) if a and b else None
                           for a, b in zip(copy.output, reference.output, strict=True)]
        return True

    def add_after(self, unit: tuple[str, ...], name: str) -> None:
        """The FP32 twin of ``name`` as it computes once ``unit`` is in FP32: inputs written by an INT8 node
        outside the unit are still read through that node's output Q/DQ (none where nothing is)."""
        if self.writers is None or name not in self.int8:
            return
        reference, twin = self.fp32[name], self.twins[name]
        inputs, quantized = [], False
        for float_value, tensor in zip(reference.input, twin.input, strict=True):
            writer = self.writers.of(float_value) if tensor and self._activation_qdq(tensor) else None
            if writer is not None and writer not in unit:
                inputs.append(self._quantized(float_value, tensor))
                quantized = True
            else:
                inputs.append(float_value)
        if quantized:
            copy = self._append(reference, inputs)
            self.after[unit, name] = [self._error(a, b) if a and b else None
                                      for a, b in zip(copy.output, reference.output, strict=True)]

    def _node(self, op_type: str, inputs: list[str], **attributes: Any) -> str:
        output = self._fresh(f"probe_{op_type.lower()}")
        self.graph.node.append(helper.make_node(op_type, inputs, [output], name=self._fresh(op_type), **attributes))
        return output

    def _output(self, tensor: str) -> int:
        """``tensor`` as a graph output; its index among the outputs."""
        self.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
        self.outputs.append(tensor)
        return len(self.outputs) - 1

    def _float(self, tensor: str) -> str:
        return self._node("Cast", [tensor], to=TensorProto.FLOAT)

    def _sum_of_squares(self, tensor: str, like: str) -> int:
        """Per channel (axis 1) where ``like``'s rank is known and at least 2, else over the whole tensor (shaped
        [1] then): sums of ``tensor``'s squares over the batch and every other axis."""
        rank = self.ranks.get(like)
        if rank is None or rank < 2:
            total = self._node("ReduceSumSquare", [tensor], keepdims=0)
            return self._output(self._node("Reshape", [total, self.shape_one]))
        axes = [0, *range(2, rank)]
        if self.axes_as_input:
            name = self._fresh("probe_axes")
            self.graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(axes)], axes))
            return self._output(self._node("ReduceSumSquare", [tensor, name], keepdims=0))
        return self._output(self._node("ReduceSumSquare", [tensor], keepdims=0, axes=axes))

    def _error(self, twin: str, fp32: str) -> int:
        return self._sum_of_squares(self._node("Sub", [self._float(twin), self._float(fp32)]), fp32)

    def _energy(self, fp32: str) -> int:
        return self._sum_of_squares(self._float(fp32), fp32)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of every tensor shape inference can tell (none where it fails: a model over 2 GB, say)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises several types, and the ranks are only a refinement
        return {}
    return {v.name: len(v.type.tensor_type.shape.dim) for v in (*inferred.graph.value_info, *inferred.graph.output,
                                                                 *inferred.graph.input)
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}


CHANNEL_ENERGY_FLOOR = 1e-3  # a channel's energy counts as at least this share of the mean channel's


def _relative(error: np.ndarray, energy: np.ndarray) -> float:
    """The mean over channels of each one's error relative to its energy: a later layer may scale any channel
    up or down (a folded BatchNorm, the next convolution's weights), so a channel that carries little energy
    here can matter as much as one that carries most of it (an outlier channel that takes a per-tensor scale
    wipes out all the others: by energy they are nothing, channel by channel they are everything)."""
    floor = CHANNEL_ENERGY_FLOOR * float(np.mean(energy)) if energy.size else 0.0
    if floor <= 0:
        return 0.0 if not np.any(error) else math.inf
    return float(np.mean(error / np.maximum(energy, floor)))


def removed_errors(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile,
                   units: Sequence[tuple[str, ...]], probe: Batch, batch: int | None,
                   on_chunk: Callable[[int], None] | None = None) -> list[float]:
    """For each unit, the INT8 error that keeping it in FP32 removes where it is computed, on ``probe``: for
    each of its nodes, the squared error of its INT8 twin (fed with FP32 values) against the FP32 node's
    outputs, less that of its FP32 twin where some input stays quantised after the fallback, relative to the
    outputs' energy. All units in one run of one model (``on_chunk`` is told the samples each step covered).
    Nodes the two graphs do not hold alike count for nothing."""
    nodes = list(dict.fromkeys(n for unit in units for n in unit))
    writers = _Writers(fp32, quantized, set(nodes)) if profile.int8_outputs else None
    builder = _ProbeBuilder(fp32, quantized, writers)
    for name in nodes:
        builder.add(name)
    for unit in units:
        for name in unit:
            builder.add_after(unit, name)
    if not builder.outputs:
        return [0.0] * len(units)
    sums: list[np.ndarray] | None = None
    with OnnxRuntimeBackend(builder.model, RunOptions(optimization=profile.evaluation_optimization)) as backend:
        total = count(probe)
        size = batch or 1  # one sample a step: a large input's probe stays small in memory, and the bar moves
        for start in range(0, total - total % size, size):
            values = [np.asarray(v, np.float64) for v in backend.run(take(probe, start, start + size))]
            sums = values if sums is None else [a + b for a, b in zip(sums, values, strict=True)]
            if on_chunk is not None:
                on_chunk(size)
    if sums is None:
        return [0.0] * len(units)

    def relative(errors: list[int | None], node: str) -> float:
        return sum(_relative(sums[e], sums[n]) for e, n in zip(errors, builder.energy[node], strict=True)
                   if e is not None and n is not None)

    removed = []
    for unit in units:
        total_removed = 0.0
        for name in unit:
            if name in builder.int8:
                left = relative(builder.after[unit, name], name) if (unit, name) in builder.after else 0.0
                total_removed += max(0.0, relative(builder.int8[name], name) - left)
        removed.append(total_removed)
    return removed


def output_gains(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile,
                 units: Sequence[tuple[str, ...]], probe: Batch, batch: int | None,
                 on_unit: Callable[[], None] | None = None) -> list[float]:
    """For each unit, the share of ``quantized``'s output error on ``probe`` that keeping that unit alone in FP32
    removes (1.0: all of it; 0 or less: none). The error is each output's mean squared error relative to the
    FP32 output's mean square, summed over the outputs (a detector's heads all count)."""
    run = profile.evaluation_optimization
    reference = outputs(fp32, probe, batch=batch)

    def error(model: onnx.ModelProto) -> float:
        values = outputs(model, probe, optimization=run, batch=batch)
        return sum(float(np.mean((np.asarray(v, np.float64) - r[: len(v)]) ** 2) / (np.mean(r.astype(np.float64) ** 2)
                                                                                   or 1.0))
                   for v, r in zip(values, reference, strict=True))

    full = error(quantized)
    gains = []
    for unit in units:
        gains.append((full - error(keep_in_fp32(quantized, fp32, unit, profile))) / (full or 1.0))
        if on_unit is not None:
            on_unit()
    return gains


def rank_layers(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, probe: Batch,
                batch: int | None) -> list[tuple[tuple[str, ...], float]]:
    """Fallback units, most sensitive first. The first MEASURED_UNITS by their own error (:func:`removed_errors`,
    one run) are then each kept alone in FP32 and scored by the share of the output error that removes
    (:func:`output_gains`), on a few probe samples; the rest follow in own-error order, scored 0."""
    units = fallback_units(fp32, profile, quantized)
    samples = _probe_count(probe, batch)
    alone = _measure_count(probe, batch)
    with console.progress() as bar:
        task = bar.add_task(f"Sensitivity: every unit's own INT8 error, in one run over {samples} calibration "
                            "samples", total=samples)
        own = removed_errors(fp32, quantized, profile, units, take(probe, 0, samples), batch,
                             on_chunk=lambda n: bar.advance(task, n)) if samples else [0.0] * len(units)
    by_own = sorted(zip(units, own, strict=True), key=lambda item: item[1], reverse=True)
    measured = [unit for unit, _ in by_own[:MEASURED_UNITS]] if alone else []
    with console.progress() as bar:
        task = bar.add_task(f"Sensitivity: each unit alone in FP32, on {alone} calibration sample(s)",
                            total=len(measured))
        gains = output_gains(fp32, quantized, profile, measured, take(probe, 0, alone), batch,
                             on_unit=lambda: bar.advance(task)) if measured else []
    # A unit whose fallback alone does not help (or hurts) may still be needed once others are in: its error is
    # masked by theirs (the readers of an outlier tensor and the Add that wrote it). Those are ordered by their
    # own error, which sees them regardless.
    own_of = dict(zip(units, own, strict=True))
    ranked = sorted(zip(measured, gains, strict=True), key=lambda item: (max(item[1], 0.0), own_of[item[0]]),
                    reverse=True)
    return ranked + [(unit, 0.0) for unit, _ in by_own[len(measured):]]


def default_fp32_limit(quantizable: int) -> int:
    """Past half of its nodes in FP32 a model is no longer an INT8 model: FP16 serves better then."""
    return max(1, quantizable // 2)


def default_max_attempts(units: int) -> int:
    """The evaluation cap: doubling steps, the bisection of the last and the last resort take about three per
    doubling of the unit count, so a model ten times larger costs a few evaluations more, not ten times as many."""
    return 3 * max(1, math.ceil(math.log2(units + 1))) + 2


TIE_ERROR_GAIN = 0.01  # on an unchanged accuracy, a node must cut the mean logit error by 1 % to earn its place


def _better(candidate: Comparison, current: Comparison) -> bool:
    """Strictly better on the budget's figure; on a tie, a clearly smaller output error (a node that changes
    nothing would spend the FP32 allowance for nothing)."""
    new, old = candidate.drop_pp, current.drop_pp
    assert new is not None and old is not None
    if abs(new - old) > 1e-9:
        return new < old
    return candidate.mean_abs_err < (1 - TIE_ERROR_GAIN) * current.mean_abs_err


Judge = Callable[[list[str]], tuple[Any, Comparison]]


def _next_step(size: int, gained: float, gap: float) -> int:
    """The next step's unit count after ``size`` units gained ``gained`` pp with ``gap`` pp still to go: about
    half of what that rate says is needed, at least one and at most twice ``size``."""
    if gained <= 0:
        return size  # a tie won on output error alone: the figure shows no rate to go by
    return min(2 * size, max(1, math.ceil(size * gap / gained / 2)))


@dataclass
class GreedyResult:
    excluded: list[str]
    model: Any  # what ``judge`` made for ``excluded``; None while nothing joined
    comparison: Comparison
    attempts: list[FallbackAttempt]


class _Trial(NamedTuple):
    """One judged mix: the nodes it keeps in FP32, what ``judge`` made of it, its figure and its attempt record."""

    nodes: list[str]
    model: Any
    comparison: Comparison
    record: FallbackAttempt


@dataclass
class _GreedySearch:
    """What the steps of :func:`add_until_within_budget` share: the mix taken so far (``excluded``, the ``model``
    judged for it and its figure ``best``), every attempt made, and the limits each step keeps to."""

    judge: Judge
    budget_pp: float
    limit: int
    max_attempts: int
    on_attempt: Callable[[], None] | None
    best: Comparison
    excluded: list[str] = field(default_factory=list)
    model: Any = None
    attempts: list[FallbackAttempt] = field(default_factory=list)

    def within(self, result: Comparison) -> bool:
        """Whether ``result``'s drop meets the budget."""
        return (result.drop_pp or 0.0) <= self.budget_pp

    def nodes_of(self, chunk: Sequence[tuple[str, ...]]) -> list[str]:
        """The nodes in FP32 once ``chunk`` joins the mix taken: the taken ones first, each node once."""
        return list(dict.fromkeys([*self.excluded, *(n for unit in chunk for n in unit)]))

    def attempt(self, chunk: Sequence[tuple[str, ...]]) -> _Trial:
        """Judge the mix taken plus ``chunk`` and record the attempt (not kept: :meth:`accept` takes it)."""
        trial = self.nodes_of(chunk)
        candidate, result = self.judge(trial)
        record: FallbackAttempt = {
            "nodes": trial[len(self.excluded):], "units": len(chunk), "fp32_layers": len(self.excluded),
            "kept": False, "accuracy": result.accuracy, "drop_pp": result.drop_pp,
            "drop_removed_pp": round((self.best.drop_pp or 0.0) - (result.drop_pp or 0.0), 9)}
        self.attempts.append(record)
        if self.on_attempt is not None:
            self.on_attempt()
        return _Trial(trial, candidate, result, record)

    def accept(self, trial: _Trial) -> None:
        """Take ``trial``'s mix as the new one to build on, mark its attempt kept, and say so."""
        added = trial.nodes[len(self.excluded):]
        trial.record["kept"], trial.record["fp32_layers"] = True, len(trial.nodes)
        self.excluded, self.model, self.best = trial.nodes, trial.model, trial.comparison
        console.note(f"{len(self.excluded)} layer(s) in FP32 (+{', '.join(added)}): {trial.comparison.line()}")

    def fitting(self, waiting: Sequence[tuple[str, ...]], most: int | None = None) -> list[tuple[str, ...]]:
        """The next units of ``waiting`` (at most ``most``) that add nodes and still fit under the limit."""
        chunk: list[tuple[str, ...]] = []
        for unit in waiting:
            if most is not None and len(chunk) == most:
                break
            grown = self.nodes_of([*chunk, unit])
            if len(grown) > len(self.nodes_of(chunk)) and len(grown) <= self.limit:
                chunk.append(unit)
        return chunk

    def bisect(self, chunk: list[tuple[str, ...]], reached: _Trial) -> None:
        """``chunk`` on top of the mix taken meets the budget: take its shortest prefix that still does."""
        low, high, chosen = 0, len(chunk), reached
        while high - low > 1 and len(self.attempts) < self.max_attempts:
            middle = (low + high) // 2
            shorter = self.attempt(chunk[:middle])
            if self.within(shorter.comparison):
                high, chosen = middle, shorter
            else:
                low = middle
        self.accept(chosen)

    def in_rank_order(self, units: Sequence[tuple[str, ...]]) -> None:
        """Steps in rank order, each taken only if it improves the figure. The step grows while progress is slow
        (at most doubling: to about half the units the last step's rate says are still needed) and stays at one
        unit while single units close the gap fast. A step that does not help is halved and tried again; a single
        unit that does not help is passed over, and tried once more after the rest (others may have joined since).
        Enough attempts are held back for :meth:`last_resort`."""
        reserve = 1 + math.ceil(math.log2(len(units) + 1))
        waiting, step = list(units), 1
        passed: list[tuple[str, ...]] = []
        retried = False
        while len(self.attempts) < self.max_attempts - reserve and not self.within(self.best):
            if not waiting:
                if retried or not passed:
                    break
                waiting, passed, step, retried = passed, [], 1, True
            chunk = self.fitting(waiting, step)
            if not chunk:
                if retried or not passed:
                    break
                waiting = []
                continue
            before = self.best.drop_pp or 0.0
            tried = self.attempt(chunk)
            result = tried.comparison
            if self.within(result):
                self.bisect(chunk, tried)
                break
            if _better(result, self.best):
                self.accept(tried)
                step = _next_step(len(chunk), before - (result.drop_pp or 0.0),
                                  (result.drop_pp or 0.0) - self.budget_pp)
            elif step > 1:
                step = max(1, len(chunk) // 2)
                continue
            else:
                passed.extend(chunk)
            waiting = [unit for unit in waiting if unit not in chunk]

    def last_resort(self, units: Sequence[tuple[str, ...]]) -> None:
        """Every unit not in yet (passed over ones too) that fits, in order, bisected back if it meets the budget:
        units whose effect is below the measure's resolution on their own may add up."""
        if self.within(self.best) or len(self.attempts) >= self.max_attempts:
            return
        chunk = self.fitting(units)
        if not chunk:
            return
        tried = self.attempt(chunk)
        if self.within(tried.comparison):
            self.bisect(chunk, tried)
        elif _better(tried.comparison, self.best):
            self.accept(tried)


def add_until_within_budget(units: Sequence[tuple[str, ...]], judge: Judge, start: Comparison, budget_pp: float, *,
                            limit: int, max_attempts: int,
                            on_attempt: Callable[[], None] | None = None) -> GreedyResult:
    """Few of ``units`` (in the order given) in FP32, enough to bring the drop within ``budget_pp``, found as the
    module's docstring says; ``judge`` makes and measures the mix with the given nodes in FP32, ``start`` is the
    figure with none. At most ``max_attempts`` calls of ``judge`` and ``limit`` nodes. A mix is taken only if
    it improves on the last one taken (:func:`_better`), so the figure never gets worse as nodes are added; each
    attempt is recorded (nodes added, kept or not, figure, drop removed)."""
    search = _GreedySearch(judge, budget_pp, limit, max_attempts, on_attempt, best=start)
    search.in_rank_order(units)
    search.last_resort(units)
    return GreedyResult(search.excluded, search.model, search.best, search.attempts)


def fall_back_until_within_budget(
    fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, *, probe: Batch,
    evaluation: Dataset, fp32_outputs: list[np.ndarray], task: Task | None, budget_pp: float,
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None,
    batch: int | None, max_fp32_nodes: int | None = None, full_int8: Comparison | None = None,
    max_attempts: int | None = None,
) -> FallbackResult:
    """``quantized`` (made from ``fp32`` with ``profile``) with few units in FP32, enough to bring the drop on
    the eval data within ``budget_pp``: the task's accuracy drop with labels, else its agreement drop against
    ``fp32_outputs`` (every output compared). At most ``max_attempts`` evaluations of the eval data (default:
    :func:`default_max_attempts`)."""
    run = profile.evaluation_optimization
    names = [o.name for o in fp32.graph.output]

    def judge(excluded: list[str]) -> tuple[onnx.ModelProto, Comparison]:
        candidate = keep_in_fp32(quantized, fp32, excluded, profile)
        out = outputs(candidate, evaluation.images, optimization=run, batch=batch)
        usable = len(out[0])
        return candidate, compare([o[:usable] for o in fp32_outputs], out, evaluation.labels, task=task,
                                  names=names, decoder=decoder)

    ranking = rank_layers(fp32, quantized, profile, probe, batch)
    quantizable = len({n for unit, _ in ranking for n in unit})
    limit = min(quantizable, max_fp32_nodes if max_fp32_nodes is not None else default_fp32_limit(quantizable))
    tries = max_attempts if max_attempts is not None else default_max_attempts(len(ranking))
    start = full_int8 if full_int8 is not None else judge([])[1]
    with console.progress() as bar:
        progress = bar.add_task(f"Keeping nodes in FP32 until the drop is within {budget_pp} pp (at most {tries} "
                                "evaluations)", total=tries)
        found = add_until_within_budget([unit for unit, _ in ranking], judge, start, budget_pp, limit=limit,
                                        max_attempts=tries, on_attempt=lambda: bar.advance(progress))
    drop = found.comparison.drop_pp
    if drop is not None and drop <= budget_pp and found.model is not None:
        return FallbackResult(found.model, found.excluded, ranking, found.comparison, found.attempts,
                              _probe_count(probe, batch), min(MEASURED_UNITS, len(ranking)))
    print_table(ranking, found.excluded, attempts=found.attempts)  # what was tried, before the error says so
    raise TrtpipeError(
        f"No INT8 mix meets the accuracy budget of {budget_pp} pp: tried keeping up to {limit} of {quantizable} "
        f"quantised nodes in FP32 (--max-fp32-nodes) in {len(found.attempts)} evaluations; the best "
        f"({len(found.excluded)} in FP32) still lost {drop:.2f} pp. Raise --max-accuracy-drop or --max-fp32-nodes, "
        "try another --calib-method, or use --precision fp16."
    )


def print_table(ranking: list[tuple[tuple[str, ...], float]], kept: list[str], rows: int = 15, *,
                attempts: Sequence[FallbackAttempt] | None = None) -> None:
    """The most sensitive units (and every kept one), with the share of full INT8's output error that keeping
    each alone in FP32 removed on the probe, and whether it was kept; with ``attempts``, the drop the step that
    brought it in removed on the eval data."""
    from rich.table import Table

    joined: dict[str, str] = {}
    for record in attempts or ():
        if record.get("kept"):
            removed = record.get("drop_removed_pp")
            text = f"yes ({removed:.2f} pp removed)" if isinstance(removed, float | int) else "yes"
            for node in record.get("nodes", []):
                joined[str(node)] = text
    table = Table(title="Sensitivity: the share of full INT8's output error that keeping each unit alone in FP32 "
                  "removes", title_justify="left")
    for header in ("Nodes that fall back together", "Error removed", "Kept in FP32"):
        table.add_column(header, justify="left" if header.startswith("Nodes") else "right")
    kept_set = set(kept)
    shown = [entry for index, entry in enumerate(ranking) if index < rows or set(entry[0]) <= kept_set]
    for unit, score in shown:
        is_kept = set(unit) <= kept_set
        mark = next((joined[n] for n in unit if n in joined), "yes") if is_kept else ""
        table.add_row(", ".join(unit), f"{100 * score:.1f} %", mark)
    if len(shown) < len(ranking):
        table.caption = f"{len(ranking) - len(shown)} less sensitive unit(s) not shown"
    console.err.print(table)
