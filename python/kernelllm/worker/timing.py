"""The worker side of timing (docs/verification.md, Timing). The clock that counts is the
orchestrator's: it sends one `time_call` per timed call and measures the round trip, so nothing
here decides a published time. A worker only keeps the timed batch's input sets on the device,
runs one call per request (forward, then a device-wide synchronize), keeps its output for the
value checks, and reports its own CUDA-event time as an untrusted side fact. The L2 flush
between calls is done by the trusted judge (the L2 is shared by every process on the GPU)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import torch

from .protocol import WorkerError, encode_value

# Taken at import, before any candidate code runs; the candidate worker re-checks them.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event

MAX_SAMPLES = 4096  # values returned per output and call (the orchestrator picks the indices)


def trusted_functions() -> Dict[str, Any]:
    """The functions whose identity must not change in a candidate process."""
    return {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "time.monotonic": time.monotonic,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "torch.cuda.current_stream": torch.cuda.current_stream,
        "torch.Tensor.zero_": torch.Tensor.zero_,
    }


class CallTimer:
    """One timed batch: `fn` over input sets loaded onto the device one at a time (`add`), each
    right before its first call; one call per request."""

    def __init__(self, fn: Callable[..., Any], device: str) -> None:
        self.fn = fn
        self.sets: List[List[Any]] = []
        self.cuda = device.startswith("cuda")
        self.last: List[Any] = []

    def add(self, args: List[Any]) -> Dict[str, Any]:
        self.sets.append(args)
        if self.cuda:
            _synchronize()
        return {"set": len(self.sets) - 1}

    def call(self, index: int) -> Dict[str, Any]:
        if not 0 <= index < len(self.sets):
            raise WorkerError("protocol", f"time_call: set {index} out of range 0..{len(self.sets) - 1}")
        args = self.sets[index]
        self.last = []
        with torch.no_grad():
            if self.cuda:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                start.record()
                out = self.fn(*args)
                end.record()
                _synchronize()
                event_ms = start.elapsed_time(end)
            else:
                t0 = _perf_counter()
                out = self.fn(*args)
                event_ms = (_perf_counter() - t0) * 1e3
        self.last = list(out) if isinstance(out, (tuple, list)) else [out]
        return {"event_ms": event_ms}

    def sample(self, picks: Any) -> Dict[str, Any]:
        """Values of the last call's outputs at the flat (row-major, logical) indices given per
        output: {"values": [[v, ...] per output]}; non-tensor outputs answer null."""
        if not isinstance(picks, list):
            raise WorkerError("protocol", "time_sample: expected a list of index lists, one per output")
        if len(picks) != len(self.last):  # no or other outputs: nothing to show, the judge says so
            return {"values": [None] * len(picks)}
        values = []
        for o, idx in zip(self.last, picks):
            if type(o) is not torch.Tensor or not isinstance(idx, list) or len(idx) > MAX_SAMPLES:
                values.append(None)
                continue
            flat = o.detach().reshape(-1)
            if any(not isinstance(i, int) or not 0 <= i < flat.numel() for i in idx):
                values.append(None)
                continue
            got = flat[torch.tensor(idx, dtype=torch.long, device=flat.device)].cpu()
            values.append([encode_value(v, [], "")["v"] if isinstance(v, float) else v for v in got.tolist()])
        return {"values": values}


class L2Flusher:
    """Evicts the GPU's L2 by writing a buffer of twice its size (the judge's, between calls)."""

    def __init__(self, device: str) -> None:
        self.buf = None
        if device.startswith("cuda"):
            l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or (50 << 20)
            self.buf = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)

    def flush(self) -> Dict[str, Any]:
        t0 = _perf_counter()
        if self.buf is not None:
            self.buf.zero_()
            _synchronize()
        return {"flush_ms": (_perf_counter() - t0) * 1e3, "flushed": self.buf is not None}
