"""The Explorer's results codec: what a recompute read back, to the Bytes traits the view draws, and back.

The arrays a recompute read back become the ``results`` and ``input_data`` Bytes traits and ``results_meta``
(docs/explorer-contract.md); ``decode_results`` turns them back into plain Python arrays, NumPy-free."""

from __future__ import annotations

import array
import math
import sys

#: the arrays of ``results`` and ``input_data``, in the order they lie in them
RESULTS = (
    "x",
    "y",
    "mean",
    "rstd",
    "dy",
    "dx",
    "dweight",
    "dbias",
    "dx_norm",
    "dx_sum",
    "dx_dot_xhat",
    "bn_mean",
    "bn_var",
    "weight",
    "bias",
)
#: the arrays that travel in ``input_data``: they change with the input and dy only
INPUTS = ("x", "dy", "bn_mean", "bn_var", "weight", "bias")
#: the per-sample tensors, of which only the first samples may travel
TENSORS = ("x", "y", "dy", "dx")
#: elements per tensor (x, y, dy, dx) sent when ``max_samples`` is 0 (auto): 256 KiB of float32
SAMPLE_BUDGET = 1 << 16


def samples_sent(n, per_sample, max_samples):
    """How many of the ``n`` samples of x, y, dy and dx travel."""
    want = int(max_samples) if max_samples > 0 else SAMPLE_BUDGET // per_sample
    return min(n, max(1, want))


def encode(parts, sent):
    """{name: (float32 C-order bytes, shape)} -> ({"results": bytes, "input_data": bytes}, {name: meta}), the
    per-sample tensors cut to their first ``sent`` samples."""
    blobs = {"results": bytearray(), "input_data": bytearray()}
    meta = {}
    for name in RESULTS:
        raw, shape = parts[name]
        if name in TENSORS and sent < shape[0]:
            raw = memoryview(raw)[: len(raw) // shape[0] * sent]
            shape = [sent, *shape[1:]]
        trait = "input_data" if name in INPUTS else "results"
        blob = blobs[trait]
        meta[name] = {"offset": len(blob), "shape": list(shape), "trait": trait}
        blob += raw
    return {k: bytes(b) for k, b in blobs.items()}, meta


def decode_results(results, meta, input_data=b"") -> dict:
    """``results`` + ``results_meta`` (+ ``input_data``) -> {name: (shape, array.array("f"))}, NumPy-free."""
    raws = {"results": memoryview(bytes(results)), "input_data": memoryview(bytes(input_data))}
    out = {}
    for name, info in meta.get("arrays", {}).items():
        shape = tuple(info["shape"])
        count = math.prod(shape)
        start = info["offset"]
        raw = raws[info.get("trait", "results")]
        vals = array.array("f")
        vals.frombytes(raw[start : start + 4 * count])
        if sys.byteorder != "little":
            vals.byteswap()
        out[name] = (shape, vals)
    return out
