"""The untrusted side: one process per candidate, never reused. Pre-warms (imports torch and
Triton, installs the Triton launch counter, snapshots the timer/sync functions) and greets;
then `load` imports the candidate file as its own module and builds ModelNew, `run` makes a
trial's inputs from the seed it is given (inputs.py), runs ModelNew on them and writes its
outputs with the facts the cheat rules need; the time_* requests make up the timed loop. It
never sees the reference's outputs, another trial's seed or the judge's secret."""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, List

import torch

# The first switch into deterministic mode rebinds some torch functions (torch.manual_seed among
# them) once; do it now, before any identity snapshot, so _filled_uninitialized() below does not
# read as the candidate patching them.
torch.use_deterministic_algorithms(True, warn_only=True)
torch.use_deterministic_algorithms(False)

from . import accounting, inputs, protocol, region, rules, timing, triton_warm
from .guard import GUARD
from .protocol import WorkerError

try:
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
except Exception as _e:  # no Triton: the candidate cannot launch kernels; reported in hello
    triton = None
    _TRITON_IMPORT_ERROR = f"{type(_e).__name__}: {_e}"
else:
    _TRITON_IMPORT_ERROR = None

DEFAULT_MAX_TENSOR_BYTES = 4 << 30
PROBE = protocol.PROBE_PREFIX  # the probe set's outputs in an outputs file



@contextlib.contextmanager
def _filled_uninitialized(device: str):
    """During correctness runs on a CPU, torch.empty* memory is filled with NaN (floats) or the
    largest integer: torch does this while deterministic algorithms are on
    (torch.utils.deterministic.fill_uninitialized_memory). An output the candidate never wrote then
    reads as NaN, where the freed-memory poisoning alone is best effort on CPU. warn_only keeps ops
    without a deterministic variant working. Timed calls run without it. Not on a GPU: there the
    fill is a kernel on the current stream that an honest candidate does not order its side streams
    after (it allocates after `side.wait_stream(current)`, as it may), so it raced with the
    candidate's own writes and an honest output read as NaN (relu/correct_side_stream_joined, 3 of
    10 runs on an H200 under load). On a GPU the poisoning before forward fills the allocator's
    free cached memory with NaN instead, in stream order."""
    if device.startswith("cuda"):
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)

class _LaunchCounter:
    """Counts non-warmup `run` calls of every @triton.jit kernel (compiled or interpreted):
    `kernel[grid](...)`, autotuners and heuristics all end in one of these two methods."""

    def __init__(self) -> None:
        self.count = 0
        self.names: Dict[str, int] = {}  # launches per kernel function name (a secondary fact)
        self.wrappers: Dict[str, Any] = {}

    def install(self) -> None:
        if triton is None:
            return
        for cls in (JITFunction, InterpretedFunction):
            original = cls.run

            def counted(self_fn, *args, grid, warmup, _original=original, **kwargs):
                if not warmup:
                    _COUNTER.count += 1
                    name = str(getattr(self_fn, "__name__", "?"))[:100]
                    if name in _COUNTER.names or len(_COUNTER.names) < 64:
                        _COUNTER.names[name] = _COUNTER.names.get(name, 0) + 1
                    _STREAMS.launched()
                return _original(self_fn, *args, grid=grid, warmup=warmup, **kwargs)

            cls.run = counted
            self.wrappers[f"{cls.__module__}.{cls.__qualname__}.run"] = counted

    def current(self) -> Dict[str, Any]:
        if triton is None:
            return {}
        return {f"{c.__module__}.{c.__qualname__}.run": c.run for c in (JITFunction, InterpretedFunction)}


_COUNTER = _LaunchCounter()


class _StreamTracker:
    """Streams other than the default that Triton kernels were launched on and that no
    wait_stream / wait_event / synchronize has joined yet (side_stream). torch.cpu streams are
    no-ops but are tracked the same way, so CPU mode sees the same pattern as a GPU."""

    def __init__(self) -> None:
        self.pending: Dict[Any, str] = {}
        self.event_streams: Dict[int, Any] = {}

    @staticmethod
    def _key(stream: Any) -> Any:
        handle = getattr(stream, "cuda_stream", None)
        return ("cuda", handle) if handle is not None else ("obj", id(stream))

    def launched(self) -> None:
        if torch.cuda.is_initialized():
            cur, default = torch.cuda.current_stream(), torch.cuda.default_stream()
            if cur.cuda_stream != default.cuda_stream:
                self.pending[self._key(cur)] = f"cuda stream {cur.cuda_stream:#x}"
        cur = torch.cpu.current_stream()
        if cur is not _CPU_DEFAULT_STREAM:
            self.pending[self._key(cur)] = "torch.cpu.Stream"

    def joined(self, stream: Any) -> None:
        self.pending.pop(self._key(stream), None)

    def install(self) -> None:
        tracker = self
        for cls in (torch.cpu.Stream, torch.cuda.Stream):
            orig_wait_stream, orig_wait_event = cls.wait_stream, cls.wait_event
            orig_record = cls.record_event

            def wait_stream(self_s, other, _o=orig_wait_stream):
                tracker.joined(other)
                return _o(self_s, other)

            def record_event(self_s, event=None, _o=orig_record):
                ev = _o(self_s, event)
                tracker.event_streams[id(ev)] = self_s
                return ev

            def wait_event(self_s, event, _o=orig_wait_event):
                if id(event) in tracker.event_streams:
                    tracker.joined(tracker.event_streams[id(event)])
                return _o(self_s, event)

            cls.wait_stream, cls.record_event, cls.wait_event = wait_stream, record_event, wait_event
        orig_sync = torch.cuda.Stream.synchronize

        def synchronize(self_s, _o=orig_sync):
            tracker.joined(self_s)
            return _o(self_s)

        torch.cuda.Stream.synchronize = synchronize
        orig_dev_sync = torch.cuda.synchronize

        def device_synchronize(*a, _o=orig_dev_sync, **k):
            tracker.pending = {key: v for key, v in tracker.pending.items() if key[0] != "cuda"}
            return _o(*a, **k)

        torch.cuda.synchronize = device_synchronize


_CPU_DEFAULT_STREAM = torch.cpu.current_stream()
_STREAMS = _StreamTracker()


_MISSING = object()


def _guarded() -> Dict[str, Any]:
    funcs = dict(timing.trusted_functions())
    funcs.update(_COUNTER.current())
    funcs["threading.enumerate"] = threading.enumerate
    funcs["hashlib.sha256"] = hashlib.sha256
    funcs["torch.Tensor.untyped_storage"] = torch.Tensor.untyped_storage
    funcs["os._Environ.__getitem__"] = type(os.environ).__getitem__
    funcs["os._Environ.__iter__"] = type(os.environ).__iter__
    for name in rules.RANDOM_FUNCTIONS:
        obj = torch
        for part in name.split(".")[1:]:
            obj = getattr(obj, part, _MISSING)  # (a module replaced by one without it: changed, not a crash)
        funcs[name] = obj
    return funcs


class Candidate:
    def __init__(self) -> None:
        self.model = None
        self.device = "cpu"
        self.module_name = ""
        self._guards: List[Any] = []
        self._probe_seed: Any = None
        self.recipe: Any = None
        self.model_cls: Any = None
        self.variant = ""
        self.device_ready = ""  # init_device's device: its CUDA context made before the load
        _COUNTER.install()
        _STREAMS.install()
        self.trusted = _guarded()
        # Pre-warm the intra-op pool so its threads are not counted against the candidate.
        torch.ones(1 << 16).sum()
        self.baseline_threads = {t.ident for t in threading.enumerate()}

    # ---- helpers ----------------------------------------------------------------------

    def _patched(self) -> List[str]:
        now = _guarded()
        return sorted(k for k, f in self.trusted.items() if now.get(k) is not f)

    def _check_patched(self, when: str) -> None:
        patched = self._patched()
        if patched:
            first = rules.evaluate_run({"patched": patched}, require_triton=False)[0]
            raise WorkerError("cheat", f"functions replaced {when}: {', '.join(patched)}",
                              rule=first["rule"], evidence=f"{first['evidence']} ({when})")

    def _check_sandbox(self, when: str, since: int = 0) -> None:
        """Raises the sandbox violation shown by the attempts recorded after event `since`."""
        facts = GUARD.facts()
        facts["sandbox_events"] = facts["sandbox_events"][since:]
        found = rules.sandbox_violations(facts)
        if found:
            raise WorkerError("sandbox_violation", f"sandbox attempt {when}: {found[0]['evidence']}",
                              rule=found[0]["rule"], evidence=f"{found[0]['evidence']} ({when})", violations=found)

    def _candidate_error(self, e: BaseException, phase: str, what: str) -> WorkerError:
        tb = traceback.format_exc()
        kind = rules.classify_exception(e, tb, phase)
        text = str(e)
        oom = rules.allocator_refusal(e)
        if oom is not None:  # the allocator said no: the candidate's own out-of-memory error
            text = f"out of memory: {oom}"
        return WorkerError(kind, f"{what}: {type(e).__name__}: {text}", tb)

    def _load_problem(self, problem: Dict[str, Any]) -> None:
        """The problem module (its source sent by the orchestrator, the text the judge loaded),
        run before any candidate code: only its get_inputs() is used, to make input sets here."""
        import types
        try:
            source = protocol.decode_source(problem).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as e:
            raise WorkerError("protocol", f"load: problem.source_b64: {type(e).__name__}: {e}") from None
        spec = problem.get("recipe") or {}
        name = f"kllm_problem_{hashlib.sha256(source.encode()).hexdigest()[:12]}_{os.getpid()}"
        module = types.ModuleType(name)
        module.__file__ = "<kernelllm problem>"
        sys.modules[name] = module
        try:
            exec(compile(source, "<kernelllm problem>", "exec"), module.__dict__)
            inputs.scale_size_globals(module, spec.get("size_scale"), bool(spec.get("size_odd", False)))
            self.recipe = inputs.recipe_from(module, spec, self.device)
        except BaseException as e:  # the judge loaded the same text: a failure here is ours
            raise WorkerError("environment_error", f"the problem did not load in the candidate's process: "
                                                   f"{type(e).__name__}: {e}") from None

    def _make_inputs(self, spec: Dict[str, Any]) -> List[Any]:
        """A trial's inputs, made here from its seed as the judge makes them (inputs.py); with
        `probe`, also the probe set (same shapes, other values) run after the facts are taken."""
        if self.recipe is None:
            raise WorkerError("protocol", "inputs before a successful load")
        try:
            seed, dist = int(spec["seed"]), str(spec.get("distribution", "normal"))
        except (KeyError, TypeError, ValueError) as e:
            raise WorkerError("protocol", f"inputs: expected {{seed, distribution}}: {e}") from None
        # The probe set is made after the run's outputs are saved (_run_probe), not beside its inputs.
        self._probe_seed = seed if spec.get("probe") else None
        try:
            args = self.recipe.make(seed, dist)
        except ValueError as e:
            raise WorkerError("protocol", f"inputs: {e}") from None
        except BaseException as e:  # candidate code may have changed torch's state: its failure
            raise self._candidate_error(e, "run", "making the trial's inputs (get_inputs)") from None
        return args

    def _start_cuda(self, device: str) -> None:
        """This process's CUDA context on `device`, before any candidate code: a failure is the
        GPU's or this machine's (no driver, all memory held by other processes), not the candidate's."""
        try:
            torch.cuda.set_device(device)
            torch.empty(1, device=device)
        except BaseException as e:  # RuntimeError/AssertionError from torch, never candidate code
            raise WorkerError("environment_error",
                              f"this process could not start CUDA on {device} before the candidate ran: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                              " (the GPU's memory held by other processes, or no usable GPU)") from None

    # ---- ops --------------------------------------------------------------------------

    def init_device(self, msg: dict) -> dict:
        """The CUDA context alone, before `load`: the orchestrator asks for it under a shared hold
        of the GPU's lock of its own, one process of a GPU at a time (its context turn), so that a
        timer waits for one context rather than for every load queued in the driver. No kernel runs
        here (the profiler's start-up, which launches one, stays in `load`)."""
        if self.model is not None or self.model_cls is not None or self.device_ready:
            raise WorkerError("protocol", "init_device: once, before load")
        steps = protocol.Steps()
        device = msg.get("device", "cpu")
        if device.startswith("cuda"):
            self._start_cuda(device)
            steps.mark("cuda")
        self.device_ready = device
        return {"steps_ms": steps.ms()}

    def load(self, msg: dict) -> dict:
        if self.model is not None or self.model_cls is not None:
            raise WorkerError("protocol", "load: a candidate process loads exactly one candidate")
        t0 = time.perf_counter()
        # Where the load's time goes (the reply's steps_ms, shown in reports, never used for a verdict).
        steps = protocol.Steps()
        self.device = msg.get("device", "cpu")
        if self.device_ready and self.device_ready != self.device:
            raise WorkerError("protocol", f"load: on {self.device}, but init_device started {self.device_ready}")
        if self.device == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"  # read by triton.jit at decoration time
        elif self.device.startswith("cuda"):
            # The CUDA context before any candidate code (made already when init_device asked for it).
            if self.device_ready != self.device:
                self._start_cuda(self.device)
                steps.mark("cuda")
            # The last trial's run is profiled holding the GPU to itself: the profiler's start-up in
            # this process now, under the load's shared hold, before any candidate code.
            accounting.warm_profiler(self.device)
            steps.mark("profiler")
        args, kwargs = self._init_args(msg, os.path.dirname(msg["module_path"]))
        self._load_problem(msg["problem"])
        steps.mark("problem")
        path = msg["module_path"]
        digest = hashlib.sha256(path.encode()).hexdigest()[:12]
        self.module_name = f"kllm_candidate_{digest}_{os.getpid()}"
        # Before any candidate code runs; the wrapped os.environ methods become the trusted ones.
        GUARD.install(path, os.path.dirname(os.path.realpath(path)))
        self.trusted = _guarded()
        try:
            spec = importlib.util.spec_from_file_location(self.module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[self.module_name] = module
            spec.loader.exec_module(module)
        except BaseException as e:  # SyntaxError, ImportError, SystemExit from candidate code
            self._check_sandbox("while importing the candidate")
            raise self._candidate_error(e, "load", "importing the candidate") from None
        self._check_patched("while importing the candidate")
        steps.mark("import")
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise WorkerError("compile_error", f"{path} defines no ModelNew (found: "
                                               f"{sorted(n for n in vars(module) if not n.startswith('_'))[:12]})")
        self.model_cls = model_cls
        self.model = self._construct(args, kwargs, int(msg["construct_seed"]))
        steps.mark("construct")
        n_params = sum(p.numel() for p in self.model.parameters()) if isinstance(self.model, torch.nn.Module) else 0
        return {"load_ms": (time.perf_counter() - t0) * 1e3, "n_params": n_params, "module": self.module_name,
                "steps_ms": steps.ms()}

    def load_variant(self, msg: dict) -> dict:
        """The same candidate on a size variant of the problem (the multi-shape check, after its
        verdict and its timing): the problem loaded again with the variant's recipe, ModelNew
        constructed anew from the class already imported (its module is not run twice), and the
        variant's model and input maker used by every later run. Its init inputs are the variant
        judge's, from `work_dir`."""
        if self.model is None or self.model_cls is None:
            raise WorkerError("protocol", "load_variant before a successful load")
        t0 = time.perf_counter()
        args, kwargs = self._init_args(msg, "")
        self.model = None  # the main model's memory goes back before the variant's is made
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        self._load_problem(msg["problem"])
        self.model = self._construct(args, kwargs, int(msg["construct_seed"]))
        self.variant = str(msg.get("variant", ""))
        return {"load_ms": (time.perf_counter() - t0) * 1e3, "variant": self.variant}

    def _init_args(self, msg: dict, default_dir: str) -> tuple:
        """ModelNew's arguments: the judge's `init`, its tensors read from `work_dir` (else `default_dir`)."""
        max_bytes = int(msg.get("max_tensor_bytes", DEFAULT_MAX_TENSOR_BYTES))
        init = protocol.decode_value({"t": "dict", "v": msg.get("init", {"args": {"t": "list", "v": []},
                                                                         "kwargs": {"t": "dict", "v": {}}})},
                                     lambda f: protocol.load_tensors(os.path.join(msg.get("work_dir", default_dir), f), max_bytes))
        args = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in init.get("args", [])]
        kwargs = {k: (a.to(self.device) if isinstance(a, torch.Tensor) else a) for k, a in init.get("kwargs", {}).items()}
        return args, kwargs

    def _construct(self, args: list, kwargs: dict, seed: int) -> Any:
        try:
            torch.manual_seed(seed)
            with torch.no_grad():
                model = self.model_cls(*args, **kwargs)
                if isinstance(model, torch.nn.Module):
                    model = model.to(self.device)
        except BaseException as e:
            self._check_sandbox("while constructing ModelNew")
            raise self._candidate_error(e, "load", "constructing ModelNew") from None
        self._check_patched("while constructing ModelNew")
        return model

    def _poison(self, nbytes: int, sizes: List[int]) -> int:
        """Fills memory a fresh allocation could reuse with NaN, then frees it."""
        if self.device.startswith("cuda"):
            free_cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            n = max(nbytes, free_cached) // 4
            if n > 0:
                # Allocated and freed at once: the caching allocator keeps the NaN-filled block.
                torch.full((n,), math.nan, dtype=torch.float32, device=self.device)
            return n * 4
        # CPU: malloc hands a freed block of the same size to the next allocation of that size
        # unless it merges into the heap top; a small guard kept alive after each block stops
        # the merge. Sizes are the expected outputs' (`poison_sizes`), else the inputs'.
        blocks, self._guards = [], []
        for size in sizes:
            # Several copies: the Triton interpreter's own temporaries take some of them.
            for _ in range(8 if size <= (8 << 20) else 1):
                if 0 < size <= (64 << 20):
                    blocks.append(torch.full((max(size // 4, 1),), math.nan))
                    self._guards.append(torch.empty(16))
        total = sum(b.numel() * 4 for b in blocks)
        del blocks
        return total

    def run(self, msg: dict) -> dict:
        if self.model is None:
            raise WorkerError("protocol", "run before a successful load")
        # The accounted span is the whole request up to the outputs' checksums (accounting.py):
        # on a GPU, when asked, the kernels that really ran (torch.profiler / CUPTI); always, the
        # bytes torch's own compute ops read. Work hidden in the input maker or after forward
        # returned is counted; the judge takes off what making and checksumming the inputs costs.
        profiler = accounting.KernelProfiler(self.device) if msg.get("profile_kernels") else None
        aten = accounting.AtenCompute()
        # Where the request's time goes (the reply's steps_ms): this process's own account, shown
        # in reports to take a run's time apart and never used for a verdict or a time.
        steps = protocol.Steps()
        with (profiler or contextlib.nullcontext()), aten:
            args = self._make_inputs(msg["inputs"])
            sums = inputs.checksums(args)
            inputs_checksum = inputs.combine(sums)
            steps.mark("inputs")
            tensors_in = [a for a in args if isinstance(a, torch.Tensor)]
            hashes_before = [s for s in sums if s is not None]
            poisoned = 0
            if msg.get("poison", True):  # fills: not compute ops; copy-class kernels on a GPU
                in_bytes = sum(t.numel() * t.element_size() for t in tensors_in)
                sizes = [int(x) for x in msg.get("poison_sizes") or [t.numel() * t.element_size() for t in tensors_in]]
                poisoned = self._poison(int(msg.get("poison_bytes", 2 * in_bytes + (16 << 20))), sizes)
            steps.mark("poison")
            threads_before = threading.active_count()
            launches_before = _COUNTER.count
            names_before = dict(_COUNTER.names)
            _STREAMS.pending = {}
            t0 = time.perf_counter()
            try:
                with torch.no_grad(), _filled_uninitialized(self.device):
                    out = self.model(*args)
                    unjoined = sorted(_STREAMS.pending.values())
                    if self.device.startswith("cuda"):
                        torch.cuda.synchronize()
            except BaseException as e:
                self._check_sandbox("in ModelNew.forward")
                raise self._candidate_error(e, "run", "running ModelNew.forward") from None
            run_ms = (time.perf_counter() - t0) * 1e3
            steps.mark("forward")
            launches = _COUNTER.count - launches_before
            input_ptrs = {}
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and a.layout == torch.strided:
                    input_ptrs.setdefault(a.untyped_storage().data_ptr(), i)
            outputs = list(out) if isinstance(out, (tuple, list)) else [out]
            output_types = [_describe_output(o, input_ptrs) for o in outputs]
            plain = all(t["type"] == "torch.Tensor" and t["layout"] == "torch.strided" for t in output_types)
            hashes_after = [inputs.checksum(t) for t in tensors_in]
            # The values the judge will read, bound here: an output changed after this point
            # (filled in lazily when copied or saved) no longer matches its checksum.
            output_checksums = [inputs.checksum(o) for o in outputs] if plain else None
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
            steps.mark("checksums")
        steps.mark("profile_stop")
        launched_names = {k: v - names_before.get(k, 0) for k, v in _COUNTER.names.items() if v != names_before.get(k, 0)}
        threads = threading.enumerate()
        new_threads = [f"{t.name} ({type(t).__name__})" for t in threads if t.ident not in self.baseline_threads]
        report = {
            "run_ms": run_ms,
            "n_outputs": len(outputs),
            "triton_launches": launches,
            "triton_launched_kernels": launched_names,
            "threads_before": threads_before,
            "threads_after": len(threads),
            "new_threads": new_threads,
            "inputs_checksum": inputs_checksum,
            "input_hash_before": inputs.combine(hashes_before),
            "input_hash_after": inputs.combine(hashes_after),
            "input_hashes_before": hashes_before,
            "input_hashes_after": hashes_after,
            "output_types": output_types,
            "output_checksums": output_checksums,
            "patched": self._patched(),
            "poisoned_bytes": poisoned,
            "unjoined_streams": unjoined,
            "aten_compute": aten.facts(sum(t.numel() * t.element_size() for t in tensors_in)),
        }
        if profiler is not None:
            report["kernel_profile"] = profiler.result()
            steps.mark("profile_read")
        # Cumulative since the hook was installed, so attempts made while loading show here too.
        report.update(GUARD.facts())
        report["violations"] = rules.evaluate_run(report, require_triton=bool(msg.get("require_triton", True)))
        if plain:
            # Host copies now, so that the probe run below may reuse the device memory.
            saved = {str(i): o.detach().to("cpu", copy=True) for i, o in enumerate(outputs)}
            n_out = len(outputs)
            del out, outputs, args, tensors_in
            steps.mark("copies")
            saved.update(self._run_probe(n_out, report))
            steps.mark("probe")
            protocol.save_tensors(msg["outputs_file"], saved)
            del saved
            steps.mark("save")
        if self.device.startswith("cuda"):
            timing.release_cached()  # the judge compares next, on the same GPU
        report["outputs_written"] = plain
        report["steps_ms"] = steps.ms()
        return report

    def _run_probe(self, n_outputs: int, report: dict) -> Dict[str, torch.Tensor]:
        """A second forward on the judge's probe inputs (same shapes, other values), after the
        run's facts are taken: the judge tells outputs that ignore the input values from them."""
        if self._probe_seed is None:
            return {}
        try:
            probe_args = self.recipe.probe(self._probe_seed)
            with torch.no_grad(), _filled_uninitialized(self.device):
                out = self.model(*probe_args)
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
        except BaseException as e:
            report["probe_error"] = f"{type(e).__name__}: {e}"[:500]
            return {}
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != n_outputs or not all(type(o) is torch.Tensor and o.layout == torch.strided for o in outs):
            report["probe_error"] = "probe outputs differ in number or type from the run's"
            return {}
        return {f"{PROBE}{i}": o for i, o in enumerate(outs)}

    # ---- timing: one request per timed call, clocked by the orchestrator (timing.py) ------

    def time_prepare(self, msg: dict) -> dict:
        if self.model is None:
            raise WorkerError("protocol", "time_prepare before a successful load")
        if self.variant:
            raise WorkerError("protocol", f"time_prepare after load_variant ({self.variant}): only the problem's own sizes are timed")
        self._check_patched("before timing")
        spec = msg.get("region")
        if not isinstance(spec, dict) or not isinstance(spec.get("bytes"), int) or not isinstance(spec.get("outputs"), list):
            raise WorkerError("protocol", "time_prepare: expected the judge's output region ({bytes, outputs, slots})")
        slots = spec.get("slots", 1)
        if type(slots) is not int or slots < 1:
            raise WorkerError("protocol", f"time_prepare: the output region's 'slots' must be a positive integer, found {slots!r}")
        given = spec.get("inputs")
        if given is not None and (not isinstance(given, dict) or not isinstance(given.get("bytes"), int)
                                  or not isinstance(given.get("slots"), list) or len(given["slots"]) != slots
                                  or not all(isinstance(p, list) for p in given["slots"])):
            raise WorkerError("protocol", "time_prepare: 'inputs' must be the judge's input region ({bytes, slots}), "
                                          "one slot per output slot")
        self._timer = None
        for name in ("_region", "_inputs_region"):
            old = getattr(self, name, None)
            setattr(self, name, None)
            if old is not None:
                for f in old.close():  # best effort (region.py); the reason reaches the report's stderr tail
                    protocol.stderr_note(f"timing region not released cleanly: {f}")
        # The judge's regions for this batch: their descriptors came over fd 5 before this request,
        # the output region's first.
        self._region = region.Region.attach(region.receive_fd(), spec["bytes"], self.device)
        timer = timing.CallTimer(self.model, self.device, self._region.views(spec["outputs"]), slots)
        reply: Dict[str, Any] = {}
        if given is not None:
            # The round trips' inputs: slot j's views are call j's arguments, refilled by the judge
            # before every round trip (this process makes no inputs while timed).
            self._inputs_region = region.Region.attach(region.receive_fd(), given["bytes"], self.device)
            reply["given"] = timer.add_all([self._inputs_region.views(places) for places in given["slots"]])
        self._timer = timer
        self._timing_events = len(GUARD.events)
        return reply

    def time_load(self, msg: dict) -> dict:
        """A round trip's timing sets made on the device from their seeds (`inputs`), given to this
        process only now (their calls follow)."""
        timer = self._need_timer("time_load")
        specs = msg["inputs"]
        if not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs):
            raise WorkerError("protocol", "time_load: 'inputs' must be a non-empty list of input specs")
        return {"sets": timer.add_all([self._make_inputs(dict(s, probe=False)) for s in specs])}

    def _need_timer(self, op: str) -> "timing.CallTimer":
        timer = getattr(self, "_timer", None)
        if timer is None:
            raise WorkerError("protocol", f"{op} before time_prepare")
        return timer

    def time_call(self, msg: dict) -> dict:
        timer = self._need_timer("time_call")
        try:
            res = timer.call(msg["sets"])
        except WorkerError:
            raise
        except BaseException as e:
            self._check_sandbox("during timing", self._timing_events)
            raise self._candidate_error(e, "run", "timed call of ModelNew.forward") from None
        self._check_patched("during timing")
        self._check_sandbox("during timing", self._timing_events)
        return res


def _describe_output(o: Any, input_ptrs: Dict[int, int]) -> Dict[str, Any]:
    if not isinstance(o, torch.Tensor):
        return {"type": f"{type(o).__module__}.{type(o).__qualname__}", "layout": None, "aliases_input": None}
    desc = {"type": "torch.Tensor" if type(o) is torch.Tensor else f"{type(o).__module__}.{type(o).__qualname__}",
            "layout": str(o.layout), "shape": list(o.shape), "dtype": str(o.dtype), "aliases_input": None}
    if o.layout == torch.strided:
        desc["aliases_input"] = input_ptrs.get(o.untyped_storage().data_ptr())
    return desc


def main() -> int:
    # Before any candidate code: what the zygote built of Triton's into this process's own cache.
    warm_placed = triton_warm.place(os.environ.get("TRITON_CACHE_DIR", ""))
    cand = Candidate()
    hello = {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", None),
        "triton_error": _TRITON_IMPORT_ERROR,
        "numpy": __import__("numpy").__version__,
        "cuda_initialized": torch.cuda.is_initialized(),
        "launch_hook": sorted(_COUNTER.wrappers),
        "triton_warm_placed": warm_placed,
    }
    return protocol.serve({"init_device": cand.init_device, "load": cand.load, "run": cand.run, "load_variant": cand.load_variant,
                           "time_prepare": cand.time_prepare, "time_load": cand.time_load,
                           "time_call": cand.time_call}, hello)


if __name__ == "__main__":
    sys.exit(main())
