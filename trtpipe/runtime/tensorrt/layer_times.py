"""Per-layer times an engine reports through TensorRT's profiler, summed over runs: pure, tested without a GPU.

TensorRT calls ``IProfiler.report_layer_time(layer_name, ms)`` once per layer for each profiled run (its Python
API, ``tensorrt.IProfiler``); the backend's profiler forwards each call to :meth:`LayerTimes.add` and marks the
end of a run with :meth:`LayerTimes.run_done`. The summary has what trtexec's ``--dumpProfile``/``--exportProfile``
print (samples/common/sampleReporting.cpp, ``Profiler::print`` and ``exportJSONProfile``): per layer the average and
median time and its share of the total, layers in the engine's order, and layers that never took time left out.
"""

from __future__ import annotations

import statistics
from typing import Any


class LayerTimes:
    """Times per layer name, in the order TensorRT first reported the layers (the engine's execution order)."""

    def __init__(self) -> None:
        self._times: dict[str, list[float]] = {}
        self.runs = 0

    def add(self, layer: str, ms: float) -> None:
        self._times.setdefault(str(layer), []).append(float(ms))

    def run_done(self) -> None:
        self.runs += 1

    def summary(self) -> dict[str, Any]:
        """``{"runs", "total_ms", "layers": [{"layer", "mean_ms", "median_ms", "share"}]}``: ``mean_ms`` per profiled
        run, ``total_ms`` the sum of the layers' means (the engine's time without launch gaps), ``share`` a layer's
        fraction of it (0..1)."""
        runs = max(self.runs, 1)
        means = {name: sum(times) / runs for name, times in self._times.items()}
        total = sum(means.values())
        layers = [{"layer": name, "mean_ms": means[name], "median_ms": statistics.median(times),
                   "share": means[name] / total if total > 0 else 0.0}
                  for name, times in self._times.items() if sum(times) > 0]
        return {"runs": self.runs, "total_ms": total, "layers": layers}
