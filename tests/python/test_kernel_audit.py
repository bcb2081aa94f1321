"""The judge's static audit of candidate sources and the GPU kernel-profile classification
(python/kernelllm/worker/kernel_audit.py), on hand-written sources and hand-made kernel lists:
no GPU and no worker processes needed."""
from __future__ import annotations

import textwrap

import pytest

import worker_harness as wh

ka = wh.import_worker("kernel_audit")

HEAD = "import torch\nimport triton\nimport triton.language as tl\n"


def audit(body: str, **kw):
    return ka.audit_source((HEAD + textwrap.dedent(body)).encode(), "cand.py", **kw)


def verdict(r):
    lv = r["load_verdict"]
    return None if lv is None else (lv["verdict"], lv["rule"])


def test_honest_kernel_passes_with_helpers_builtins_and_methods():
    r = audit("""
        from triton.language.extra import libdevice
        LOG2E = tl.constexpr(1.4426950408889634)
        BLOCK_DEFAULT = 1024

        @triton.jit
        def helper(x):
            return tl.where(x > 0, x, 0.0)

        @triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["n"])
        @triton.jit
        def k(x_ptr, o_ptr, n, stride, BLOCK: tl.constexpr):
            pid = tl.program_id(0).to(tl.int64)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            for i in tl.static_range(2):
                pass
            for j in range(0, n, BLOCK):
                pass
            x = tl.load(x_ptr + offs * stride.to(tl.int64), mask=offs < n, other=0.0).to(tl.float32)
            y = helper(x) + tl.math.exp2(x * LOG2E) + libdevice.tanh(x) + x.sum(0) + min(BLOCK, 4)
            y += triton.cdiv(n, 2) + tl.dot(x, x, input_precision="ieee") + tl.dot(x, x, allow_tf32=False)
            tl.store(o_ptr + offs, y, mask=offs < n)
    """)
    assert verdict(r) is None, r
    assert r["kernel_names"] == ["helper", "k"]
    assert r["tl_dot"] == [] and r["after_correct"] is None


@pytest.mark.parametrize("body, needle", [
    ("""
        @triton.jit
        def k(a_ptr, b_ptr):
            c = torch.matmul(a_ptr, b_ptr)
     """, "calls torch.matmul inside @triton.jit kernel k at line 7"),
    ("""
        def helper(x):
            return x
        @triton.jit
        def k(x_ptr):
            tl.store(x_ptr, helper(tl.load(x_ptr)))
     """, "helper, a Python function of this file not decorated with @triton.jit"),
    ("""
        _G = {}
        @triton.jit
        def k(x_ptr):
            _G["a"].matmul(_G["b"])
     """, "refers to _G"),
    ("""
        import numpy as np
        @triton.jit
        def k(x_ptr):
            y = np.exp(1.0)
     """, "calls numpy.exp"),
    ("""
        @triton.jit
        def k(x_ptr, OBJ: tl.constexpr):
            OBJ.sum(x_ptr)
     """, "constexpr argument OBJ"),
    ("""
        @triton.jit
        def k(x_ptr):
            x_ptr.__class__.mro()
     """, "dunder"),
    ("""
        @triton.jit
        def k(x_ptr, f):
            f(x_ptr)
     """, "a value of the kernel"),
    ("""
        @triton.jit
        def k(x_ptr):
            import torch as t
     """, "Import inside @triton.jit kernel k"),
    ("""
        @triton.jit
        def k(x_ptr):
            open("/etc/passwd")
     """, "Python builtin open"),
    ("""
        tl.load = torch.load
        @triton.jit
        def k(x_ptr):
            tl.load(x_ptr)
     """, "rebinds triton.language.load"),
])
def test_jit_body_calls_outside_triton_are_compile_errors(body, needle):
    r = audit(body)
    assert verdict(r) == ("compile_error", "kernel_audit"), r
    messages = " | ".join(e["message"] for e in r["compile_findings"])
    assert needle in messages, messages


@pytest.mark.parametrize("src", [
    # the call form, an alias of the decorator, `from triton import jit`
    "def _k(x):\n    torch.relu(x)\nk = triton.jit(_k)\n",
    "J = triton.jit\n@J\ndef k(x):\n    torch.relu(x)\n",
    "from triton import jit as J2\n@J2\ndef k(x):\n    torch.relu(x)\n",
    "from triton.runtime.jit import jit\n@jit(do_not_specialize=['x'])\ndef k(x):\n    torch.relu(x)\n",
])
def test_every_spelling_of_jit_is_audited(src):
    r = ka.audit_source((HEAD + src).encode())
    assert verdict(r) == ("compile_error", "kernel_audit"), r
    assert "torch.relu" in r["load_verdict"]["message"]


def test_jit_used_indirectly_is_refused():
    r = audit("""
        import functools
        make = functools.partial(triton.jit)
    """)
    assert verdict(r) == ("compile_error", "kernel_audit")
    assert "other than as a decorator" in r["load_verdict"]["message"]


def test_no_jit_kernel_is_no_triton_kernel():
    r = audit("""
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x)
    """)
    # decided after the trials (a crash or hang keeps its own verdict), from the source alone
    assert verdict(r) is None and r["after_correct"]["rule"] == "no_triton_kernel"
    assert r["after_correct"]["message"] == "the source defines no @triton.jit kernel"
    assert ka.audit_source(b"import torch\n", require_triton=False)["after_correct"] is None


def test_syntax_error_and_size_limit_are_compile_errors():
    assert verdict(ka.audit_source(b"def f(:\n")) == ("compile_error", "syntax_error")
    big = b"#" * (ka.MAX_SOURCE_BYTES + 1)
    r = ka.audit_source(big)
    assert verdict(r) == ("compile_error", "source_too_large")
    assert str(ka.MAX_SOURCE_BYTES) in r["load_verdict"]["message"]


def test_default_precision_dot_is_precision_downgrade_on_cpu_strict_fp32_only():
    body = """
        @triton.jit
        def k(a, b):
            c = tl.dot(a, b)
            d = tl.dot(a, b, None, "tf32")
            e = tl.dot(a.to(tl.float16), b.to(tl.float16))
            f = tl.dot(a, b, input_precision="tf32x3")
    """
    r = audit(body)
    assert [(d["line"], d["input_precision"]) for d in r["tl_dot"]] == [(7, "default"), (8, "tf32")]
    assert r["after_correct"]["rule"] == "precision_downgrade"
    assert "kernel k line 7" in r["after_correct"]["evidence"]
    for kw in (dict(device="cuda:0"), dict(profile="kernelbench"), dict(precision_fp32=False)):
        other = audit(body, **kw)
        assert other["after_correct"] is None and other["tl_dot"], kw
        assert other["notes"], kw
    gpu = audit(body, device="cuda:0")
    assert "runtime verdict decides" in gpu["notes"][0]


def test_library_lookalike_names_are_not_trusted():
    r = audit("""
        @triton.jit
        def ampere_sgemm_128x64_nn(x):
            pass
        @triton.jit
        def gemm_kernel(x):
            pass
    """)
    assert verdict(r) is None
    assert r["kernel_names"] == ["gemm_kernel"]
    assert "ampere_sgemm_128x64_nn" in r["notes"][0]


def test_repr_renaming_is_refused():
    r = audit("""
        @triton.jit(repr=lambda _: "cublas_gemm")
        def k(x):
            pass
    """)
    assert verdict(r) == ("compile_error", "kernel_audit")


def test_non_utf8_source_with_coding_declaration_parses():
    src = "# -*- coding: latin-1 -*-\n# caf\xe9\n".encode("latin-1") + HEAD.encode() + \
        b"@triton.jit\ndef k(x):\n    pass\n"
    assert verdict(ka.audit_source(src)) is None


# ---- kernel profile classification ------------------------------------------------------------

CUBLAS = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def prof(*rows):
    return {"available": True, "kernels": [{"name": n, "us": us, "count": 1} for n, us in rows]}


@pytest.mark.parametrize("name, cls", [
    ("matmul_kernel", "triton"),
    (CUBLAS, "compute"),
    ("ampere_sgemm_128x64_nn", "compute"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)", "compute"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>", "compute"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "compute"),
    ("void cudnn::engines_precompiled::implicit_convolve_sgemm<float>", "compute"),
    ("triton_poi_fused_relu_0", "compute"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("Memset (Device)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>", "copy"),
    ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda>", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>", "elementwise"),
])
def test_classify_kernel(name, cls):
    assert ka.classify_kernel(name, {"matmul_kernel", "copy_one"}) == cls


def test_torch_matmul_with_decoy_triton_copy_is_torch_fallback():
    res = ka.check_kernel_profile(prof((CUBLAS, 40.0), ("copy_one", 2.0), ("Memset (Device)", 1.0)), ["copy_one"])
    assert res["violation"]["rule"] == "torch_fallback"
    s = res["summary"]
    assert s["available"] and s["kernels_by_class"]["triton"] == 1
    assert s["top_non_triton"][0]["name"].startswith("sm90_xmma_gemm")
    assert abs(s["triton_share"] - 2.0 / 43.0) < 1e-9


def test_no_triton_kernel_in_profile():
    res = ka.check_kernel_profile(prof(("void at::native::vectorized_elementwise_kernel<4, relu>", 5.0)), ["relu_kernel"],
                                  triton_launches=1)
    assert res["violation"]["rule"] == "no_triton_kernel"
    assert "launch counter said 1" in res["violation"]["evidence"]


def test_candidate_cannot_name_a_library_kernel_as_triton():
    # names come from the audit; a lookalike jit name is dropped there, so cuBLAS stays compute
    names = ka.audit_source((HEAD + "@triton.jit\ndef ampere_sgemm_128x64_nn(x):\n    pass\n"
                             "@triton.jit\ndef copy_one(x):\n    pass\n").encode())["kernel_names"]
    res = ka.check_kernel_profile(prof(("ampere_sgemm_128x64_nn", 40.0), ("copy_one", 1.0)), names)
    assert res["violation"]["rule"] == "torch_fallback"


def test_honest_profiles_pass():
    # Triton GEMM plus a transpose copy and a fill: copies are not compute
    ok = ka.check_kernel_profile(prof(("matmul_kernel", 10.0), ("void at::native::elementwise_kernel<128, 2, "
                                                                 "at::native::direct_copy_kernel_cuda>", 30.0),
                                      ("Memset (Device)", 5.0)), ["matmul_kernel"])
    assert ok["violation"] is None and ok["summary"]["triton_share"] == pytest.approx(10 / 45)
    # a small torch reduction epilogue beside the Triton work
    ok2 = ka.check_kernel_profile(prof(("row_loss_kernel", 30.0), ("void at::native::reduce_kernel<512, 1>", 5.0)),
                                  ["row_loss_kernel"])
    assert ok2["violation"] is None


def test_kernelbench_profile_only_reports():
    res = ka.check_kernel_profile(prof((CUBLAS, 40.0)), ["copy_one"], mode="kernelbench")
    assert res["violation"] is None and res["summary"]["triton_share"] == 0.0


@pytest.mark.parametrize("profile", [None, {"available": False, "reason": "CUPTI unavailable"}, {"available": True},
                                     {"available": True, "kernels": "x"}])
def test_unavailable_profile_falls_back_to_the_counter(profile):
    res = ka.check_kernel_profile(profile, ["k"], triton_launches=3)
    assert res["violation"] is None
    assert res["summary"]["available"] is False and res["summary"]["reason"]


def test_malformed_rows_are_skipped():
    res = ka.check_kernel_profile({"available": True, "kernels": [1, {"name": "k", "us": "nan"},
                                                                  {"name": "k", "us": float("inf")},
                                                                  {"name": "k", "us": 3.0}]}, ["k"])
    assert res["violation"] is None and res["summary"]["kernels_by_class"]["triton"] == 1


RELU_ATEN = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>"
RANDN = "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>"


def test_padding_the_run_does_not_dilute_torch_work_measured_against_the_reference():
    # torch.relu beside a Triton copy, padded with fills and an idle Triton kernel so that the
    # torch share of the run's GPU time is small; the reference forward's own relu took 10 us
    padded = prof((RELU_ATEN, 10.0), ("copy_one", 10.0), ("spin", 60.0), (FILL, 100.0))
    assert ka.check_kernel_profile(padded, ["copy_one", "spin"])["violation"] is None  # the share rule alone
    ref = prof((RELU_ATEN, 9.0))
    res = ka.check_kernel_profile(padded, ["copy_one", "spin"], reference=ref)
    assert res["violation"]["rule"] == "torch_fallback" and "reference forward" in res["violation"]["evidence"]
    assert res["summary"]["reference_work_us"] == pytest.approx(9.0)
    # an honest Triton relu with a small torch epilogue stays clean against the same reference
    ok = ka.check_kernel_profile(prof(("relu_kernel", 10.0), ("void at::native::reduce_kernel<512, 1>", 2.0)),
                                 ["relu_kernel"], reference=ref)
    assert ok["violation"] is None


def test_the_judges_baseline_is_taken_off_by_launch_count():
    from kernelllm.worker import accounting
    # the run: making the inputs (2 randn launches), forward (a Triton kernel) and a checksum reduce
    run = [{"name": RANDN, "us": 8.0, "count": 2}, {"name": "relu_kernel", "us": 5.0, "count": 1},
           {"name": "void at::native::reduce_kernel<512, 1>", "us": 3.0, "count": 3}, "junk"]
    base = accounting.kernel_counts({"kernels": [{"name": RANDN, "us": 7.0, "count": 2}]},
                                    {"kernels": [{"name": "void at::native::reduce_kernel<512, 1>", "us": 1.0, "count": 2}]})
    left = accounting.kernels_beyond(run, base)
    assert left == [{"name": "relu_kernel", "us": 5.0, "count": 1},
                    {"name": "void at::native::reduce_kernel<512, 1>", "us": 1.0, "count": 1}]
    # the same for torch's compute ops (CPU mode): only bytes beyond the baseline are the candidate's
    assert accounting.ops_beyond({"normal_": 400, "relu": 4096, "sum": 10, "x": "bad"}, {"normal_": 400, "sum": 20}) == \
        {"relu": 4096}
    assert accounting.merge_ops({"a": 1}, {"a": 2, "b": 3}, times=[1, 2]) == {"a": 5, "b": 6}
