"""NNCF's post-training quantization of the OpenVINO model as a peer of trtpipe's (``bench --peers``):
``nncf.quantize`` with its default preset over the calibration samples, its IR run on OpenVINO, where both are
installed (``pip install 'trtpipe[peers]'``); otherwise one line says so and bench goes on without it.

It returns plain values (the row's label, the tool and its version, the file) so the runtime knows nothing of
bench's records; bench pairs them with this folder's kind.
"""

from __future__ import annotations

from pathlib import Path

from trtpipe import console
from trtpipe.inputs import Batch, count, named, take

INSTALL = "pip install 'trtpipe[peers]'"
LABEL = "peer: openvino-int8 (NNCF PTQ)"
tools: tuple[str, ...] = ("nncf",)  # the packages it needs beyond OpenVINO (capability QuantizesAsPeer)


def nncf_peer(fp32: Path, calibration: Batch, folder: Path) -> tuple[str, str, Path] | None:
    """``fp32`` read by OpenVINO and quantized by NNCF into ``folder``: (label, ``nncf <version>``, the IR's
    ``.xml``); None, after one line saying so, where NNCF or OpenVINO is not installed."""
    try:
        import nncf
        import openvino as ov
    except ImportError:
        console.warn(f"Peer OpenVINO + NNCF skipped: NNCF or OpenVINO is not installed ({INSTALL}).")
        return None
    output = folder / "openvino_nncf_int8.xml"
    model = ov.Core().read_model(str(fp32))
    names = [port.get_any_name() for port in model.inputs]
    samples = count(calibration)
    dataset = nncf.Dataset([take(calibration, i, i + 1) for i in range(samples)], lambda x: named(x, names))
    ov.save_model(nncf.quantize(model, dataset, subset_size=samples), str(output))
    return LABEL, f"nncf {nncf.__version__}", output


quantize = nncf_peer  # capability QuantizesAsPeer
