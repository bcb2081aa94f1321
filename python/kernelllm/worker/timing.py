"""The worker side of timing (docs/verification.md, Timing). The clock that counts is the
orchestrator's: it sends one `time_call` per round trip of timed calls and measures it, so
nothing here decides a published time. A worker only keeps the timed batch's input sets on the
device, runs the calls a request names (each: forward on its own set, the copy of its outputs
into its own slot of the judge's output region), then a device-wide synchronize, and reports
its own CUDA-event time as an untrusted side fact.
The judge checks the values in its region (region.py) and flushes the L2 between calls (the L2
is shared by every process on the GPU)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import torch

from .protocol import WorkerError

# Taken at import, before any candidate code runs; the candidate worker re-checks them.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event


# Cached, unused GPU memory a worker keeps after a request, at most; more is given back.
RELEASE_ABOVE_BYTES = 256 << 20


def release_cached() -> None:
    """Gives this worker's cached, unused GPU memory back to the device when it is more than
    RELEASE_ABOVE_BYTES. The judge's fp64 references and comparisons of a large problem peak far
    above what it keeps, and a candidate's run leaves its inputs' and outputs' blocks cached, while
    the other shares the GPU. A small problem's few MiB stay cached: giving them back (cudaFree,
    which waits for the device) and taking them again in the next request (cudaMalloc) cost more
    than the memory is worth (a candidate's empty_cache after every run: 1-2 s of a throughput
    run's exclusive holds on an H200, its profiled runs being held exclusively)."""
    if torch.cuda.is_initialized() and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > RELEASE_ABOVE_BYTES:
        torch.cuda.empty_cache()


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
    right before its first call. A request runs one call per set it names (at most `slots`),
    call j copying its outputs into slot j of the output region and ending in a device-wide
    synchronize: `outputs` is the flat list of the region's tensors, slot after slot; during
    call j `self.outputs` is slot j's."""

    def __init__(self, fn: Callable[..., Any], device: str, outputs: List[torch.Tensor], slots: int = 1) -> None:
        if slots < 1 or len(outputs) % slots:
            raise WorkerError("protocol", f"{len(outputs)} output tensors cannot fill {slots} slot(s)")
        self.fn = fn
        self.sets: List[List[Any]] = []
        self.cuda = device.startswith("cuda")
        per = len(outputs) // slots
        self.slots = [list(outputs[j * per:(j + 1) * per]) for j in range(slots)]
        self.outputs = self.slots[0]

    def add_all(self, sets: List[List[Any]]) -> List[int]:
        """Keeps a request's loaded sets, their work done on the device before it returns (one
        synchronize for all of them: one a set cost a device-wide wait 64 times a round trip of a
        fast kernel, inside the GPU's exclusive hold); their indices, for `call`."""
        first = len(self.sets)
        self.sets.extend(sets)
        if self.cuda:
            _synchronize()
        return list(range(first, len(self.sets)))

    def call(self, indices: List[int]) -> Dict[str, Any]:
        """The calls on the sets `indices` names, in order."""
        if not isinstance(indices, list) or not indices or len(indices) > len(self.slots):
            raise WorkerError("protocol", f"time_call: 'sets' must list 1..{len(self.slots)} sets (one per output slot), "
                                          f"found {indices!r}")
        for k in indices:
            if type(k) is not int or not 0 <= k < len(self.sets):
                raise WorkerError("protocol", f"time_call: set {k!r} out of range 0..{len(self.sets) - 1}")
        bound: Dict[str, Any] = {"output_bound": True}
        with torch.no_grad():
            if self.cuda:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                start.record()
            else:
                t0 = _perf_counter()
            for j, k in enumerate(indices):
                self.outputs = self.slots[j]
                bound = self._bind(self.fn(*self.sets[k]))
                if not bound.get("output_bound"):
                    if len(indices) > 1:
                        bound = dict(bound, output_unbound=f"call {j} of {len(indices)}: {bound.get('output_unbound')}")
                    break
                if self.cuda and j + 1 < len(indices):
                    _synchronize()  # each call ends before the next begins, as one call per request did
            if self.cuda:
                end.record()
                _synchronize()
                event_ms = start.elapsed_time(end)
            else:
                event_ms = (_perf_counter() - t0) * 1e3
        return dict(bound, event_ms=event_ms)

    def _bind(self, out: Any) -> Dict[str, Any]:
        """Copies the call's outputs into the region: {"output_bound": true}, else false and why
        (outputs unlike the reference's, which the correctness trials already required)."""
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.outputs):
            return {"output_bound": False, "output_unbound": f"{len(outs)} output(s), the reference has {len(self.outputs)}"}
        for i, (o, dst) in enumerate(zip(outs, self.outputs)):
            if type(o) is not torch.Tensor or o.layout != torch.strided:
                return {"output_bound": False, "output_unbound": f"output {i} is a {type(o).__name__}, not a plain tensor"}
            if tuple(o.shape) != tuple(dst.shape) or o.dtype != dst.dtype or o.device != dst.device:
                return {"output_bound": False,
                        "output_unbound": f"output {i} is {o.dtype} {list(o.shape)} on {o.device}, the reference's is "
                                          f"{dst.dtype} {list(dst.shape)} on {dst.device}"}
        for o, dst in zip(outs, self.outputs):
            dst.copy_(o)
        return {"output_bound": True}


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
