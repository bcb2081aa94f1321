"""The trusted side: one process per device for a problem, and one more for all of the problem's
size variants, each a slot of its own (slot_handlers); released, a process serves the next problem
(judge_reuse.py). Loads the problem file as its own
module, derives the construct and trial seeds from the secret per-run seed (which never
leaves this process, except under the opt-in exact KernelBench seed scheme), makes each
trial's inputs, runs the reference (and an fp64 copy in the strict profile), compares
candidate outputs, evaluates the cheat rules on a candidate's run facts, times the reference."""
from __future__ import annotations

import collections
import contextlib
import copy
import hashlib
import importlib.util
import os
import secrets
import sys
import time
import traceback
import weakref
from typing import Any, Dict, List, Optional

import torch

from . import accounting, compare, inputs, judge_reuse, protocol
from .judge_compare import Comparisons
from .judge_history import AcrossTrials, as_list as _as_list
from .judge_kernels import KernelChecks
from .judge_timing import KEPT_BLOCK_FIRST, KEPT_BLOCK_MOST, Blocks, TimedCalls, release_cached as _release_cached
from .protocol import WorkerError

PRECISIONS = inputs.PRECISIONS
DEFAULT_TRIALS = 5  # KernelBench's num_correct_trials in its eval scripts
derive_seed = inputs.derive_seed
# What the judge keeps of a trial beyond its fingerprint: the full references (fp32 and fp64) of
# the trials used last, on its device, up to KEEP_BYTES (always the last one). Others are made
# again from the seed when a comparison needs them.
KEEP_BYTES = 4 << 30
KEEP_MIN_TRIALS = 1
# A trial's fingerprint: its references at fixed element positions, every element up to
# FINGERPRINT_MAX, a fixed random sample of that many beyond, with the tolerance the whole output
# gives. The history rules (cached_result, closed_form, stale_memory), the per-element
# discrimination and the checks of timed calls (the judge reads the output region at every
# fingerprint position) work on it, so no timed call needs the full references.
FINGERPRINT_MAX = 1 << 22


def kernelbench_trial_seeds(base: int, n: int) -> List[int]:
    """KernelBench: torch.manual_seed(base), then n draws of torch.randint(0, 2**32 - 1, (1,))."""
    g = torch.Generator().manual_seed(base)
    return [int(torch.randint(0, 2 ** 32 - 1, (1,), generator=g).item()) for _ in range(n)]


def split_init(init: Any) -> tuple:
    """The init-input rule: `[args, kwargs]` (KernelBook) iff the value is a list or tuple of
    exactly two items whose first is a list/tuple and whose second is a dict; anything else
    is positional (KernelBench). A positional problem whose two init args happen to be a list
    and a dict must write them as `[[a_list, a_dict], {}]`."""
    if (isinstance(init, (list, tuple)) and len(init) == 2 and isinstance(init[0], (list, tuple))
            and isinstance(init[1], dict)):
        return list(init[0]), dict(init[1]), "args_kwargs"
    if isinstance(init, (list, tuple)):
        return list(init), {}, "positional"
    raise WorkerError("problem_error", f"get_init_inputs() must return a list or tuple, found {type(init).__name__}")


class Judge(Comparisons, TimedCalls, AcrossTrials, KernelChecks):
    def __init__(self, slot: str = "") -> None:
        self.slot = slot  # "" for a problem's own judge; a size variant's name in the variants' shared process
        self.seed_label = ""  # derived seeds' label prefix (load_problem)
        self.loaded = False
        self.trials: Dict[int, Dict[str, Any]] = {}
        self.private_key = secrets.token_hex(32)  # see _private_int
        self.kept_blocks = Blocks(KEPT_BLOCK_FIRST, KEPT_BLOCK_MOST)  # fingerprints, timing sets as made
        self.keep_whole: set = set()  # timing sets whose whole references are kept (time_prepare)
        self._steps: Optional[protocol.Steps] = None  # a compare request's breakdown (its steps_ms)

    def load_problem(self, msg: dict) -> dict:
        if self.loaded:
            raise WorkerError("protocol", "load_problem: a slot serves one problem until `release`")
        # Where the request's time goes (the reply's steps_ms; the report's judge_ms adds them as
        # load_problem.<step>): the problem's module run and its Model built on the host, the model
        # moved to the device, its fp64 copy, the inputs made and checked for repeating, the
        # degenerate elements' statistics, and the rest. It runs under a shared hold of the GPU,
        # which every timer waits out (12 s of a throughput run's timers' waits, H200).
        steps = protocol.Steps()
        step = steps.mark
        self.device = msg.get("device", "cpu")
        self.profile = msg.get("profile", "strict")
        if self.profile not in ("strict", "kernelbench"):
            raise WorkerError("protocol", f"profile: expected strict or kernelbench, found {self.profile!r}")
        self.kb_tolerance = msg.get("kernelbench_tolerance", "v0")
        if self.kb_tolerance not in compare.KERNELBENCH_TOLERANCES:
            raise WorkerError("protocol", f"kernelbench_tolerance: expected v0 or current, found {self.kb_tolerance!r}")
        precision = msg.get("precision", "fp32")
        if precision not in PRECISIONS:
            raise WorkerError("protocol", f"precision: expected one of {sorted(PRECISIONS)}, found {precision!r}")
        self.precision = PRECISIONS[precision]
        self.work_dir = msg["work_dir"]
        self.max_tensor_bytes = int(msg.get("max_tensor_bytes", 4 << 30))
        secret = int(msg["secret_seed"])
        self.seed_scheme = msg.get("seed_scheme", "derived")
        # Derived seeds are keyed by the whole secret (62 bits from the orchestrator), never by a
        # 31-bit seed a candidate is shown: from one trial's seed no other can be searched out.
        # (KernelBench's scheme keeps its predictable draws: it is for agreement with its eval.)
        if self.seed_scheme == "kernelbench":
            self.construct_seed, self.trial_base = secret, secret
        elif self.seed_scheme == "derived":
            # A size variant's seeds have labels of their own: with the main judge's, a variant's
            # trial t had the seed of main trial t, whose inputs the candidate was shown.
            self.seed_label = ("" if msg.get("size_scale") is None and not msg.get("size_odd")
                               else f"size {msg.get('size_scale')} odd {bool(msg.get('size_odd'))}:")
            self.construct_seed, self.trial_base = derive_seed(secret, self.seed_label + "construct"), secret
        else:
            raise WorkerError("protocol", f"seed_scheme: expected derived or kernelbench, found {self.seed_scheme!r}")
        self.n_trials = int(msg.get("n_trials", DEFAULT_TRIALS))
        # The orchestrator profiles a candidate's last trial on the main problem only, not on the
        # multi-shape variants: only there does the judge profile its own baseline and reference.
        self.kernel_baseline = msg.get("size_scale") is None and not msg.get("size_odd")
        if self.device.startswith("cuda"):
            torch.cuda.set_device(self.device)
        path = msg["problem_path"]
        # Each slot's own module object: a size variant changes its size globals.
        name = f"kllm_problem_{hashlib.sha256(path.encode()).hexdigest()[:12]}" + (f"_{self.slot}" if self.slot else "")
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            self.module = importlib.util.module_from_spec(spec)
            sys.modules[name] = self.module
            spec.loader.exec_module(self.module)
            self.size_globals = inputs.scale_size_globals(self.module, msg.get("size_scale"), bool(msg.get("size_odd", False)))
            for attr in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(self.module, attr):
                    raise AttributeError(f"problem defines no {attr}")
            torch.manual_seed(self.construct_seed)
            args, kwargs, self.init_convention = split_init(self.module.get_init_inputs())
            init_dev = [self._to_device(a, cast=False) for a in args]
            kw_dev = {k: self._to_device(a, cast=False) for k, a in kwargs.items()}
            torch.manual_seed(self.construct_seed)
            with torch.no_grad():
                model = self.module.Model(*init_dev, **kw_dev)
                step("module")
                self.model = model.to(self.device)
                del model
            step("to_device")
        except WorkerError:
            raise
        except BaseException as e:
            raise WorkerError("problem_error", f"loading problem {path}: {type(e).__name__}: {e}",
                              traceback.format_exc()) from None
        self.model64, self.fp64_note = None, "not used in the kernelbench profile"
        if self.profile == "strict":
            try:
                self.model64 = copy.deepcopy(self.model).to(torch.float64)
                self.fp64_note = "fp64 copy of the reference"
            except Exception as e:
                self.fp64_note = f"no fp64 reference: {type(e).__name__}: {e}"
        step("fp64")
        tensors: List[Any] = []
        init_value = protocol.encode_value({"args": args, "kwargs": kwargs}, tensors, "init.safetensors")
        if tensors:
            protocol.save_tensors(os.path.join(self.work_dir, "init.safetensors"), {str(i): t for i, t in enumerate(tensors)})
        self.loaded = True
        # Inputs are made in each process that uses them (inputs.py): here for the references, in
        # a candidate's process for its runs. Derived seeds make the problem's tensors on the device.
        self.recipe = inputs.Recipe(self.module, self.precision, self.device, on_device=self.seed_scheme == "derived")
        self.kept: "collections.OrderedDict[int, Dict[str, Any]]" = collections.OrderedDict()
        self.kept_bytes = 0  # of the references in `kept`
        self.fp_index: Dict[int, torch.Tensor] = {}
        self.fp_index_on: Dict[int, torch.Tensor] = {}  # the same, on the judge's device
        try:
            first = inputs.combine(inputs.checksums(self.recipe.raw(self.construct_seed)))
            raw = self.recipe.raw(self.construct_seed)
            second = inputs.combine(inputs.checksums(raw))
            sample = self.recipe.finish(raw, self.construct_seed)
        except Exception as e:
            raise WorkerError("problem_error", f"get_inputs(): {type(e).__name__}: {e}") from None
        # A candidate's process makes the same inputs from the same seed; the problem must allow it.
        if second != first:
            raise WorkerError("problem_error", "get_inputs() made other values on a second call under the same seed: "
                                               "the verifier needs inputs that torch.manual_seed (or random/numpy "
                                               "seeding) determines")
        step("inputs")
        input_specs = [{"index": i, "kind": "tensor", "shape": list(a.shape), "dtype": str(a.dtype)}
                       if isinstance(a, torch.Tensor) else {"index": i, "kind": "scalar", "type": type(a).__name__}
                       for i, a in enumerate(sample)]
        distributions = ["normal"] * self.n_trials
        if self.profile == "strict" and self.n_trials >= 2:
            distributions[-1] = "heavy_tailed"
        # Per element: where the problem's own distribution leaves non-zero reference elements
        # below the tolerance's noise (zero would pass there), add a trial that does not.
        self.degenerate = self._degenerate_elements(sample) if self.profile == "strict" else None
        del sample
        _release_cached()
        step("degenerate")
        self.discrimination: Dict[int, Dict[str, Any]] = {}
        if self.degenerate and self.degenerate["share"] >= compare.DEGENERATE_SHARE and \
                self.degenerate["zero_passes"] >= compare.DEGENERATE_MIN_COUNT:
            distributions.insert(len(distributions) - 1 if distributions[-1:] == ["heavy_tailed"] else len(distributions),
                                 "near_unit")
            self.n_trials = len(distributions)
        recipe = dict(self.recipe.describe(), size_scale=msg.get("size_scale"), size_odd=bool(msg.get("size_odd", False)))
        return {"init": init_value["v"], "init_convention": self.init_convention,
                "construct_seed": self.construct_seed, "n_trials": self.n_trials, "model_bytes": self._model_bytes(),
                "trial_distributions": distributions, "input_specs": input_specs, "fp64_reference": self.model64 is not None,
                "fp64_note": self.fp64_note, "size_globals": self.size_globals,
                "degenerate_elements": self.degenerate, "inputs_recipe": recipe,
                "steps_ms": steps.ms()}

    def _model_bytes(self) -> int:
        """Bytes of the reference Model's parameters and buffers: a candidate that builds the same
        layers holds them in host memory while it is constructed (before moving to the device)."""
        model = self.model if isinstance(self.model, torch.nn.Module) else None
        if model is None:
            return 0
        return int(sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())))

    def _to_device(self, x: Any, cast: bool) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if cast and self.precision is not None and x.is_floating_point():
            x = x.to(self.precision)
        return x.to(self.device)

    def _trial_seed(self, trial: int) -> int:
        if trial < 0:
            raise WorkerError("protocol", f"trial must be >= 0, found {trial}")
        if self.seed_scheme == "kernelbench":
            return kernelbench_trial_seeds(self.trial_base, max(trial + 1, self.n_trials))[trial]
        # One sha256 of the secret per trial: a candidate shown one trial's seed learns nothing of another's.
        return derive_seed(self.trial_base, f"{self.seed_label}trial:{trial}")

    def make_inputs(self, msg: dict) -> dict:
        """Declares a trial: its seed (for the candidate's process to make the same inputs) and
        distribution. Unless `lazy`, also makes its inputs and references now and reports their
        sizes (the first trial's tell the orchestrator how large the problem is)."""
        self._need_problem()
        trial = int(msg["trial"])
        dist = msg.get("distribution", "normal")
        if dist not in inputs.DISTRIBUTIONS:
            raise WorkerError("protocol", f"distribution: expected normal, near_unit or heavy_tailed, found {dist!r}")
        rec = self.trials.get(trial)
        if rec is None:
            probe = self.profile == "strict" and trial == 0 and bool(msg.get("probe", True))
            # outputs: {candidate id: its output fingerprints for this trial}, for the history
            # rules; never shared between candidates (one must not make another's wrong output
            # read as a cheat).
            rec = self.trials[trial] = {"seed": self._trial_seed(trial), "distribution": dist, "probe": probe, "outputs": {}}
        elif rec["distribution"] != dist:
            raise WorkerError("protocol", f"make_inputs: trial {trial} was declared with distribution {rec['distribution']!r}")
        reply = {"seed": rec["seed"], "distribution": dist, "probe": rec["probe"], "seed_index": trial}
        if not msg.get("lazy"):
            reply.update(self._full(trial)["meta"])
        return reply

    def declare_trials(self, msg: dict) -> dict:
        """Declares many trials at once, lazily (make_inputs with `lazy` for each of `trials`, a
        list of {trial, distribution}): their seeds, in order. Nothing is made, so the orchestrator
        asks without holding the GPU."""
        self._need_problem()
        trials = msg.get("trials")
        if not isinstance(trials, list) or not all(isinstance(t, dict) and type(t.get("trial")) is int for t in trials):
            raise WorkerError("protocol", "declare_trials: 'trials' must be a list of {trial, distribution}")
        seeds = [self.make_inputs({"trial": t["trial"], "distribution": t.get("distribution", "normal"), "lazy": True})["seed"]
                 for t in trials]
        return {"seeds": seeds}

    def _make(self, trial: int) -> List[Any]:
        """A declared trial's inputs, made from its seed."""
        if trial not in self.trials:
            raise WorkerError("protocol", f"no inputs were made for trial {trial}")
        rec = self.trials[trial]
        try:
            return self.recipe.make(rec["seed"], rec["distribution"])
        except Exception as e:
            raise WorkerError("problem_error", f"get_inputs(): {type(e).__name__}: {e}") from None

    def _full(self, trial: int, timing: bool = False, pending: Optional[list] = None) -> Optional[Dict[str, Any]]:
        """A trial's inputs' references (fp32, fp64), made from its seed now unless kept.
        `timing`: for a timing set, which no candidate runs in an accounted span: no accounting
        baseline (made when a plain run of the set is compared), and the cached GPU memory is
        released by the caller once for all its sets. `pending` (with `timing`, a trial not made
        yet): what must be read back from the device (the inputs' checksums, the tolerance's
        statistics) is left there and appended to `pending` as (tensors, finish), and None is
        returned; the caller reads many sets' at once and calls each finish with its values
        (finish_pending): one device synchronize for them all instead of a few per set, each of
        which waits for the GPU's time slice when other processes use it."""
        if trial not in self.trials:
            raise WorkerError("protocol", f"no inputs were made for trial {trial}")
        rec = self.trials[trial]
        if trial in self.kept and (timing or "baseline" in rec):
            self.kept.move_to_end(trial)
            return self.kept[trial]
        # What a candidate's process does in its accounted span besides forward (make the inputs,
        # checksum them before and after, checksum the outputs), measured here on the same trial:
        # the baseline taken off its report (accounting.py). Torch's compute ops here; on a GPU
        # also the kernels, for the trial the orchestrator profiles (the last), together with the
        # reference forward's own kernels: those are profiled by kernel_check, which the
        # orchestrator sends under its exclusive hold of the GPU (_profile_baseline), not here,
        # so the references may be made before, under a shared hold, beside other work.
        measure = "baseline" not in rec and not timing
        acc_make, acc_sums, acc_out = accounting.AtenCompute(), accounting.AtenCompute(), accounting.AtenCompute()
        nothing = contextlib.nullcontext
        steps = getattr(self, "prep_steps", None) if timing else None  # time_prepare's breakdown
        t_make = time.perf_counter()
        with (acc_make if measure else nothing()):
            args = self._make(trial)
        if timing and self._handed_over(args):
            # Kept as made (the reference below may write into its inputs) for the batches
            # whose inputs are handed over: the first one then copies them too instead of
            # making them again under its exclusive hold of the GPU.
            self._keep_set(trial, args, copy=True)
        if steps is not None:
            steps["make"] += time.perf_counter() - t_make
        defer = pending is not None and timing and "fp" not in rec  # (timing: nothing measured)
        with (acc_sums if measure else nothing()):
            if defer:
                started = [inputs.checksum_begin(a) if isinstance(a, torch.Tensor) else None for a in args]
            else:
                sums = inputs.checksums(args)
        n_inputs, input_bytes = len(args), inputs.nbytes(args)
        with torch.no_grad():
            # The fp64 copy first: the fp32 reference may change its inputs in place, and they are
            # not needed after it (no clone of a set that may be most of the device's memory).
            a64 = [(a.to(torch.float64, copy=True) if a.is_floating_point() else a.clone()) if isinstance(a, torch.Tensor)
                   else a for a in args] if self.model64 is not None else None
            try:
                ref = _as_list(self.model(*args))
            except torch.OutOfMemoryError:
                raise  # (the GPU's memory, which other processes share: not the problem's fault)
            except Exception as e:  # the problem's own forward on its own inputs
                raise WorkerError("problem_error", f"the reference's forward on trial {trial}'s inputs: {type(e).__name__}: {e}",
                                  traceback.format_exc()) from None
            del args
            if not all(isinstance(r, torch.Tensor) for r in ref):
                raise WorkerError("problem_error", f"reference output must be tensors, found {[type(r).__name__ for r in ref]}")
            if any(r.is_complex() for r in ref):
                # The comparisons, fingerprints and output files handle real tensors only: said
                # here, at set-up, instead of an internal error in the first statistics.
                dtypes = [str(r.dtype).replace("torch.", "") for r in ref]
                raise WorkerError("problem_error", f"the reference returns a complex tensor (outputs: {', '.join(dtypes)}); "
                                                   "complex outputs cannot be verified yet: return torch.view_as_real(...) "
                                                   "of them from the problem's Model instead")
            ref = [r.detach() for r in ref]
            if measure:
                with acc_out:
                    for r in ref:
                        inputs.checksum(r)
                rec["baseline"] = {"ops": accounting.merge_ops(acc_make.ops, acc_sums.ops, acc_out.ops, times=[1, 2, 1])}
                if self._profiled_trial(trial):
                    rec["kernels_pending"] = True
            ref64 = None
            if a64 is not None:
                try:
                    ref64 = [r.detach().double() if isinstance(r, torch.Tensor) else r for r in _as_list(self.model64(*a64))]
                except Exception as e:
                    self.fp64_note = f"fp64 forward failed: {type(e).__name__}: {e}"
                del a64
        meta = {"n_inputs": n_inputs, "input_bytes": input_bytes, "input_checksum": None,
                "output_bytes": sum(r.numel() * r.element_size() for r in ref),
                "output_sizes": [r.numel() * r.element_size() for r in ref], "output_numels": [r.numel() for r in ref]}
        checkers = None  # the whole-output checkers, when made here
        fp = None
        if "fp" not in rec:
            probe_fp = None
            if rec["probe"]:
                probe_ref = self._probe_reference(rec["seed"], len(ref))
                if probe_ref is not None and [tuple(p.shape) for p in probe_ref] == [tuple(r.shape) for r in ref]:
                    probe_fp = [self._fp(p, i, kept=True) for i, p in enumerate(probe_ref)]
            r64s = [r if isinstance(r, torch.Tensor) and r.shape == ref[i].shape else None for i, r in enumerate(ref64)] \
                if ref64 else [None] * len(ref)
            whole = [compare.Checker(self.profile, r, r64s[i], self.kb_tolerance, defer=defer) for i, r in enumerate(ref)]
            # Kept for the comparisons (_whole) unless a checker holds an fp64 copy of its own.
            checkers = {i: c for i, c in enumerate(whole) if c.profile == "kernelbench" or r64s[i] is not None}
            fp = {"ref": [self._fp(r, i, kept=True) for i, r in enumerate(ref)],
                  "ref64": [self._fp(r, i, kept=True) if r is not None else None for i, r in enumerate(r64s)] if ref64 else None,
                  "probe_ref": probe_fp, "shapes": [tuple(r.shape) for r in ref], "limits": None,
                  "dtypes": [r.dtype for r in ref]}
        full = {"ref": ref, "ref64": ref64, "meta": meta,
                "bytes": sum(r.numel() * r.element_size() for r in ref + (ref64 or []) if isinstance(r, torch.Tensor))}
        if checkers is not None:
            full["checkers"] = checkers

        def finish(checksum: str) -> Dict[str, Any]:
            if rec.setdefault("checksum", checksum) != checksum:
                raise WorkerError("problem_error", f"trial {trial}: get_inputs() made other values from the same seed")
            meta["input_checksum"] = checksum
            if fp is not None:
                fp["limits"] = [c.limits() for c in whole]
                rec["fp"] = fp
            # A timing set's whole references only where a whole comparison is to come (the
            # last round trip's sets, time_prepare's `keep_whole`): the timed calls are checked at
            # the fingerprint. Kept, every set's made the judge's memory grow by thousands of
            # allocations per problem (relu: 1,472 sets, 3 MiB each) while the GPU was shared.
            if not timing or trial in self.keep_whole:
                old = self.kept.pop(trial, None)
                self.kept[trial] = full
                self.kept_bytes += full["bytes"] - (old["bytes"] if old else 0)
                while len(self.kept) > KEEP_MIN_TRIALS and self.kept_bytes > KEEP_BYTES:
                    self.kept_bytes -= self.kept.popitem(last=False)[1]["bytes"]
            self._note_discrimination(trial, full)
            if not timing:
                _release_cached()
            return full

        if not defer:
            return finish(inputs.combine(sums))
        stats = [c for c in whole if c.pending is not None]
        reads = [s[1] for s in started if s is not None and s[1] is not None] + [c.pending for c in stats]

        def finish_read(values: List[list]) -> None:
            k = 0
            sums = []
            for s in started:
                if s is None or s[1] is None:
                    sums.append(inputs.checksum_end(s, None) if s is not None else None)
                else:
                    sums.append(inputs.checksum_end(s, values[k]))
                    k += 1
            for c in stats:
                c.finish(values[k])
                k += 1
            finish(inputs.combine(sums))

        # What waits for the read-back: the references, and the fp64 copies of its own a strict
        # checker made where there is no fp64 reference.
        own64 = sum(c.ref64.nbytes for i, c in enumerate(whole) if r64s[i] is None and c.profile == "strict" and not c.exact)
        pending.append((reads, finish_read, full["bytes"] + own64))
        return None

    def _profiled_trial(self, trial: int) -> bool:
        """Whether the orchestrator profiles the kernels of candidates' runs on this trial: the
        last, on a GPU, of the main problem (not a multi-shape variant)."""
        return self.device.startswith("cuda") and trial == self.n_trials - 1 and self.kernel_baseline

    def _profile_baseline(self, trial: int) -> None:
        """The last trial's kernels on a GPU, for kernel_check: what a candidate's process launches
        in its profiled run besides forward (the inputs made from the seed, their checksums before
        and after, the outputs' checksums), taken off its profile, and the reference forward's own
        (the yardstick of its torch work), each under the profiler. Made once, when the first
        kernel_check of the trial asks, which the orchestrator sends under its exclusive hold of the
        GPU: kernel times beside other processes' work would say little."""
        rec = self.trials[trial]
        prof_base, prof_ref, prof_out = (accounting.KernelProfiler(self.device) for _ in range(3))
        try:
            with prof_base:
                args = self._make(trial)
                inputs.checksums(args)
                inputs.checksums(args)  # the candidate's second pass (inputs after forward)
                torch.cuda.synchronize()
            with torch.no_grad():
                with prof_ref:
                    ref = _as_list(self.model(*args))
                    torch.cuda.synchronize()
                del args
                with prof_out:
                    for r in ref:
                        if isinstance(r, torch.Tensor):
                            inputs.checksum(r)
            del ref
            baseline = rec.setdefault("baseline", {})
            made = [p.result(allow_empty=True) for p in (prof_base, prof_out)]
            if all(m.get("available") for m in made):
                baseline["kernels"] = accounting.kernel_counts(*made)
            baseline["reference"] = prof_ref.result()
            # Only now: a profile that failed (the GPU's memory taken by the candidate under whose
            # hold it runs) fails that candidate's check and is made again by the next one, instead
            # of leaving every later check without the baseline to take off (red team, session 29).
            rec.pop("kernels_pending", None)
        finally:
            _release_cached()

    def finish_pending(self, pending: list) -> None:
        """Reads back what the timing sets made with `_full(..., pending=...)` left on the device, all
        at once (one synchronize), and completes each set in the order made."""
        # Checksums are int64 sums, statistics fp64: one int64 buffer holds both (the fp64 ones by
        # their bits), read back in one copy. A reference may return a tensor on another device
        # than its inputs': such a read is brought to the first one's device first.
        flat = [t.reshape(-1) if t.dtype == torch.int64 else t.reshape(-1).to(torch.float64)
                for reads, _, _ in pending for t in reads]
        if flat:
            on = flat[0].device
            host = torch.cat([(t if t.device == on else t.to(on)).view(torch.int64) for t in flat]).cpu()
        else:
            host = torch.zeros(0, dtype=torch.int64)
        as_int, as_float = host.tolist(), host.view(torch.float64).tolist()
        k = 0
        for reads, finish, _ in pending:
            values = []
            for t in reads:
                values.append((as_int if t.dtype == torch.int64 else as_float)[k:k + t.numel()])
                k += t.numel()
            finish(values)
        pending.clear()

    def _probe_reference(self, seed: int, n_out: int) -> Optional[List[torch.Tensor]]:
        """The reference for the probe inputs (another seed, same shapes), or None when it fails."""
        try:
            with torch.no_grad():
                ref = _as_list(self.model(*self.recipe.probe(seed)))
        except Exception:
            return None
        if len(ref) != n_out or not all(isinstance(r, torch.Tensor) for r in ref):
            return None
        return [r.detach() for r in ref]

    def _private_int(self, label: str, n: int) -> int:
        """A number in [0, n) from this judge's own random key, which no other process has: the
        fingerprint positions (where timed calls are checked too). Not torch's global generator
        (the input seeds, which candidates are sent, reseed it) nor anything derived from a seed a
        candidate is shown."""
        return int(hashlib.sha256(f"{self.private_key}:{label}".encode()).hexdigest(), 16) % n

    def _fp_positions(self, i: int, numel: int) -> Optional[torch.Tensor]:
        """Output i's fingerprint positions: None (every element) up to FINGERPRINT_MAX, else a fixed
        sorted random sample of that many (the same for every trial and candidate of this judge),
        kept on the host (and once on the judge's device, for `_at_fp`)."""
        if numel <= FINGERPRINT_MAX:
            return None
        if i not in self.fp_index or int(self.fp_index[i][-1]) >= numel:
            g = torch.Generator().manual_seed(self._private_int(f"fingerprint:{i}", 2 ** 63))
            self.fp_index[i] = torch.randint(0, numel, (FINGERPRINT_MAX,), generator=g).unique(sorted=True)
            self.fp_index_on.pop(i, None)
        return self.fp_index[i]

    def _fp_index_on(self, i: int, numel: int, device: torch.device) -> Optional[torch.Tensor]:
        """Output i's fingerprint positions on `device` (copied there once), or None when they are
        every element."""
        idx = self._fp_positions(i, numel)
        if idx is None:
            return None
        on = self.fp_index_on.get(i)
        if on is None or on.device != device:
            on = self.fp_index_on[i] = idx.to(device)
        return on

    def _at_fp(self, flat: torch.Tensor, i: int) -> torch.Tensor:
        """A flat output's values at output i's fingerprint positions: `flat` itself when they are
        every element, else a gather."""
        on = self._fp_index_on(i, flat.numel(), flat.device)
        return flat if on is None else flat[on]

    def _keep_outputs(self, rec: Dict[str, Any], outs: List[torch.Tensor], ref: List[torch.Tensor]) -> None:
        """What the history rules keep of self.candidate's outputs `outs` of trial record `rec`: each
        output's fingerprint (where its shape is the reference's)."""
        rec["outputs"][self.candidate] = [self._fp(o, i) if tuple(o.shape) == tuple(r.shape) else None
                                          for i, (o, r) in enumerate(zip(outs, ref))]

    def _fp(self, x: torch.Tensor, i: int, kept: bool = False) -> torch.Tensor:
        """Output i's values at its fingerprint positions (flat), on the judge's device (a copy).
        `kept`: a trial's own, kept for the judge's lifetime (placed in its kept blocks)."""
        flat = self._on_compare_device(x).reshape(-1)
        got = self._at_fp(flat, i)
        if got is not flat:
            return got
        return self.kept_blocks.copy(flat) if kept else flat.clone()

    def _fp_checker(self, trial: int, i: int) -> compare.Checker:
        """The checker of output i's fingerprint, with the tolerance of the whole output; made once
        per trial (building it reduces the whole fingerprint: most of a timed call's check)."""
        fp = self._fingerprint(trial)
        made = fp.setdefault("checkers", {})
        if i not in made:
            made[i] = compare.Checker(self.profile, fp["ref"][i], fp["ref64"][i] if fp["ref64"] else None, self.kb_tolerance,
                                      limits=fp["limits"][i])
        return made[i]

    def _fingerprint(self, trial: int, timing: bool = False) -> Dict[str, Any]:
        if trial not in self.trials:
            raise WorkerError("protocol", f"no inputs were made for trial {trial}")
        if "fp" not in self.trials[trial]:
            self._full(trial, timing)
        return self.trials[trial]["fp"]

    def close(self) -> None:
        """Gives back the output and input regions this slot holds (release: its process goes on)."""
        for name in ("own", "shared", "given", "own_given"):
            self._release(name)

    def _need_problem(self) -> None:
        if not self.loaded:
            raise WorkerError("protocol", "load_problem must come first")


def main() -> int:
    import numpy
    device = os.environ.get("KERNELLLM_JUDGE_DEVICE", "")
    if device.startswith("cuda"):
        # The CUDA context now, before the greeting: the orchestrator waits for that without
        # holding the GPU, and for load_problem with it held. A failure shows again there.
        try:
            torch.cuda.set_device(device)
            torch.empty(1, device=device)
            # And the profiler's start-up: the judge profiles its reference inside a candidate's
            # exclusive hold of the GPU (the profiled run's check), the first time of the problem.
            accounting.warm_profiler(device)
        except Exception as e:
            protocol.stderr_note(f"CUDA context on {device} not made before the greeting: {type(e).__name__}: {e}")
    hello = {"pid": os.getpid(), "python": sys.version.split()[0], "torch": torch.__version__,
             "numpy": numpy.__version__, "cuda_initialized": torch.cuda.is_initialized(),
             "started": time.time()}
    # The snapshot a release compares with (~40 ms), for a judge the orchestrator may keep only.
    state: Optional[judge_reuse.ProcessState] = None
    if os.environ.get("KERNELLLM_JUDGE_KEEPABLE") == "1":
        try:
            state = judge_reuse.ProcessState()
        except Exception as e:  # (the judge then serves, but is never kept: its release says why)
            protocol.stderr_note(f"no snapshot of the judge process for its reuse: {type(e).__name__}: {e}")
    return protocol.serve(slot_handlers(state), hello)


def _close_all(judges: Dict[str, Judge]) -> List[Any]:
    """Closes every slot's judge; weak references to them (a function of its own: no local name of
    its caller's still holds the last one when the release checks that they are gone)."""
    out = []
    for j in judges.values():
        j.close()
        out.append(weakref.ref(j))
    return out


OPS = ("load_problem", "make_inputs", "declare_trials", "compare", "time_prepare", "time_load", "time_call",
       "time_region", "time_inputs_region", "time_give", "check_timed", "time_snapshot", "l2_flush", "ping", "forget",
       "audit_source", "kernel_check")
MAX_SLOTS = 4  # size variants' slots in one process, beside the default slot "" (a problem's own judge)


def slot_handlers(state: Optional[judge_reuse.ProcessState] = None) -> Dict[str, Any]:
    """Each request goes to the Judge of its `slot` (default ""): one process serves a problem
    ("" only) or all of its size variants (one slot each, made by its load_problem), so that they
    share one CUDA context. `release` drops every slot (the process then serves another problem,
    from load_problem on) and says whether the process is as it greeted (`state`, judge_reuse.py):
    the orchestrator ends it when not."""
    judges: Dict[str, Judge] = {"": Judge()}

    def release(msg: dict) -> dict:
        dropped = _close_all(judges)
        judges.clear()
        judges[""] = Judge()
        if state is None:
            return {"reusable": False, "why": "no snapshot of the process to compare with"}
        return judge_reuse.released(state, dropped)

    def judge_for(msg: dict, op: str) -> Judge:
        slot = msg.get("slot", "")
        if not isinstance(slot, str) or len(slot) > 32 or not all(c.isalnum() or c in "_-" for c in slot):
            raise WorkerError("protocol", f"slot: expected a short name, found {slot!r}")
        j = judges.get(slot)
        if j is None:
            if op != "load_problem":
                raise WorkerError("protocol", f"slot {slot!r}: load_problem must come first")
            if len(judges) - 1 >= MAX_SLOTS:
                raise WorkerError("protocol", f"slot {slot!r}: a judge serves at most {MAX_SLOTS} slots")
            j = judges[slot] = Judge(slot)
        return j

    def handler(op: str) -> Any:
        return lambda msg: getattr(judge_for(msg, op), op)(msg)

    return dict({op: handler(op) for op in OPS}, release=release)


if __name__ == "__main__":
    sys.exit(main())
