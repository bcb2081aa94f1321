"""Trusted static audit of a candidate's source, and the classification of the GPU kernels a
profiled forward ran. Both run in the JUDGE: the audit on the source text the orchestrator holds
(never a file the candidate could rewrite), the classification on the kernel list a candidate
reports, matched against the @triton.jit names this audit found (never names the candidate says
are Triton).

The audit (`audit_source`) parses the source with `ast` and finds every function decorated with
triton.jit / triton.autotune / triton.heuristics (any import alias), or wrapped as
`triton.jit(f)`. Inside such a body, every call must resolve to triton.language (its submodules
included), another jit function of the file, a Python builtin Triton's code generator accepts, or a
Triton tensor method on a value; every global the body names must be a Triton module, a jit
function of the file or a constant. Anything else (torch, numpy, a plain Python helper) is what
Triton's compiler rejects on a GPU, while CPU mode's interpreter would run it as Python: it is a
`compile_error` here, so CPU mode predicts the GPU verdict. Each `tl.dot` on fp32 operands without
input_precision="ieee" (or allow_tf32=False) is listed: TF32 on a GPU, exact fp32 in the
interpreter.

Limits (docs/verification.md): the audit reads Python, so code made at run time (exec of a string,
attributes fetched by computed names, objects passed to a kernel as constexpr arguments whose
methods run torch in the interpreter) can still make CPU mode disagree with a GPU; on a GPU the
compiler and the kernel profile decide."""
from __future__ import annotations

import ast
import builtins
import math
import re
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

MAX_SOURCE_BYTES = 512 << 10  # base64 in a request stays under the protocol's 1 MiB frame
MAX_FINDINGS = 40

# Builtins Triton's code generator resolves inside a kernel (CodeGenerator.builtin_namespace:
# len, list, range, float, int, isinstance, getattr, print, min, max; later 3.x adds a few harmless
# ones, accepted here too). Any other builtin (open, exec, sum, abs...) is a NameError there.
TRITON_BUILTINS = frozenset(("range", "len", "list", "tuple", "float", "int", "bool", "isinstance", "getattr",
                             "print", "min", "max", "zip", "enumerate"))
# Host helpers of the `triton` package that are plain arithmetic on constexprs.
TRITON_HOST_FUNCS = frozenset(("triton.cdiv", "triton.next_power_of_2"))
_JIT_LEAVES = frozenset(("jit", "autotune", "heuristics", "JITFunction", "InterpretedFunction", "Autotuner",
                         "Heuristics", "JITCallable"))
_DECORATOR_LEAVES = frozenset(("jit", "autotune", "heuristics"))
# Precisions of tl.dot on fp32 operands that are fp32-accurate (tf32x3 splits into three TF32 products).
EXACT_DOT_PRECISIONS = frozenset(("ieee", "tf32x3"))
_LOW_PRECISION_DTYPES = frozenset(("float16", "bfloat16", "float8e5", "float8e4nv", "float8e4b15", "float8e5b16",
                                   "float8e4b8", "fp16", "bf16", "int8"))
# A jit function named like a vendor library kernel (cuBLAS/cuDNN/CUTLASS symbols are valid Python
# identifiers) must not make that library's kernel count as Triton in the profile.
LIBRARY_LOOKALIKE = re.compile(r"^(sm\d+_|ampere_|volta_|turing_|hopper_|maxwell_|blackwell_|nvjet)|"
                               r"cublas|cudnn|xmma|cutlass|gemv2|gemmk1|splitk", re.IGNORECASE)

# Public methods of Triton tensors and dtypes (a fallback when Triton cannot be imported here).
_STATIC_TENSOR_METHODS = frozenset((
    "to", "sum", "max", "min", "argmax", "argmin", "reshape", "view", "trans", "permute", "broadcast_to",
    "expand_dims", "split", "join", "ravel", "cumsum", "cumprod", "sort", "flip", "reduce", "associative_scan",
    "histogram", "xor_sum", "abs", "exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "sqrt_rn", "rsqrt", "floor",
    "ceil", "erf", "fma", "div_rn", "cdiv", "sigmoid", "softmax", "umulhi", "reduce_or", "gather", "item",
    "is_floating", "is_int", "is_fp8", "is_fp16", "is_bf16", "is_fp32", "is_fp64", "is_int1", "is_int8",
    "is_int16", "is_int32", "is_int64", "is_uint8", "is_uint16", "is_uint32", "is_uint64", "is_int_signed",
    "is_int_unsigned", "is_ptr", "is_block", "is_bool", "is_standard_floating", "scalar", "with_element_ty",
    "get_element_ty", "to_ir", "index", "count", "T"))


def _tensor_methods() -> Set[str]:
    names = set(_STATIC_TENSOR_METHODS)
    try:
        import triton.language as tl  # the judge's own Triton, when it has one
        for cls in (tl.tensor, tl.dtype, tl.constexpr, getattr(tl, "pointer_type", tl.dtype),
                    getattr(tl, "block_type", tl.dtype)):
            names.update(n for n in dir(cls) if not n.startswith("_"))
    except Exception:
        pass
    return names


_METHODS: Optional[Set[str]] = None


def tensor_methods() -> Set[str]:
    global _METHODS
    if _METHODS is None:
        _METHODS = _tensor_methods()
    return _METHODS


def _dotted(node: ast.AST) -> Optional[Tuple[ast.AST, List[str]]]:
    """(root, [attr, ...]) of an attribute chain `root.a.b`."""
    attrs: List[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


class _Module:
    """Module-level bindings: name -> set of ("import", qualified) / ("def", name) /
    ("const", None) / ("alias", qualified) / ("other", description)."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.bindings: Dict[str, Set[Tuple[str, Optional[str]]]] = {}
        self.imports: Dict[str, Set[str]] = {}  # every import alias anywhere (decorators may sit in a function)
        self.star_imports: List[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.imports.setdefault(a.asname, set()).add(a.name)
                    else:
                        top = a.name.split(".")[0]
                        self.imports.setdefault(top, set()).add(top)
            elif isinstance(node, ast.ImportFrom):
                base = ("." * node.level) + (node.module or "")
                for a in node.names:
                    if a.name == "*":
                        self.star_imports.append(base)
                    else:
                        self.imports.setdefault(a.asname or a.name, set()).add(f"{base}.{a.name}")
        for stmt in self._top_statements(tree.body):
            self._bind_statement(stmt)

    def _top_statements(self, body: List[ast.stmt]) -> Iterable[ast.stmt]:
        for s in body:
            yield s
            if isinstance(s, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody"):
                    yield from self._top_statements(getattr(s, field, []) or [])
                for h in getattr(s, "handlers", []) or []:
                    yield from self._top_statements(h.body)

    def _add(self, name: str, kind: str, detail: Optional[str]) -> None:
        self.bindings.setdefault(name, set()).add((kind, detail))

    def _bind_statement(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Import):
            for a in s.names:
                name = a.asname or a.name.split(".")[0]
                self._add(name, "import", a.name if a.asname else a.name.split(".")[0])
        elif isinstance(s, ast.ImportFrom):
            base = ("." * s.level) + (s.module or "")
            for a in s.names:
                if a.name != "*":
                    self._add(a.asname or a.name, "import", f"{base}.{a.name}")
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._add(s.name, "def", s.name)
        elif isinstance(s, ast.ClassDef):
            self._add(s.name, "other", f"class {s.name}")
        elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            value = s.value
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        self._add(n.id, *self._value_kind(value, single=isinstance(t, ast.Name)
                                                          and not isinstance(s, ast.AugAssign)))
        elif isinstance(s, (ast.For, ast.With)):
            for t in ([s.target] if isinstance(s, ast.For) else [i.optional_vars for i in s.items if i.optional_vars]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        self._add(n.id, "other", "a loop or with variable")
        for n in ast.walk(s) if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []:
            if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                self._add(n.target.id, "other", "an assignment expression")

    def _value_kind(self, value: Optional[ast.AST], single: bool) -> Tuple[str, Optional[str]]:
        if value is None:
            return "other", "an annotation without value"
        if _is_literal(value):
            return "const", None
        if isinstance(value, ast.Call) and not value.keywords and len(value.args) == 1 and _is_literal(value.args[0]):
            q = self.qualify(value.func)
            if q and q.endswith(".constexpr") and q.startswith("triton"):
                return "const", None
        if single and isinstance(value, (ast.Name, ast.Attribute)):
            q = self.qualify(value)
            if q:
                return "alias", q
        return "other", "a computed value"

    def qualify(self, node: ast.AST) -> Optional[str]:
        """The dotted import path a Name/Attribute chain denotes through the file's imports
        (e.g. `tl.math.exp` -> triton.language.math.exp), or None."""
        d = _dotted(node)
        if d is None or not isinstance(d[0], ast.Name):
            return None
        root, attrs = d
        targets = set()
        for kind, detail in self.bindings.get(root.id, set()):
            if kind in ("import", "alias") and detail:
                targets.add(detail)
        if not targets:
            return None
        if len(targets) > 1:
            return None
        return ".".join([next(iter(targets))] + attrs)

    def qualify_any(self, node: ast.AST) -> Set[str]:
        """Every dotted path the chain may denote, imports anywhere in the file included."""
        d = _dotted(node)
        if d is None or not isinstance(d[0], ast.Name):
            return set()
        root, attrs = d
        targets = set(self.imports.get(root.id, set()))
        for kind, detail in self.bindings.get(root.id, set()):
            if kind in ("import", "alias") and detail:
                targets.add(detail)
        return {".".join([t] + attrs) for t in targets}


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    return False


def _is_jit_path(q: str) -> bool:
    parts = q.split(".")
    return parts[0] == "triton" and parts[-1] in _JIT_LEAVES


def _triton_language_path(q: str) -> bool:
    return q == "triton.language" or q.startswith("triton.language.")


def _is_triton_module_path(q: str) -> bool:
    return q == "triton" or _triton_language_path(q)


def _resolve_triton(q: str) -> Optional[str]:
    """Why a triton.language path is not a Triton function, or None when it is (checked against
    the judge's Triton when importable; else by the path alone)."""
    parts = q.split(".")
    if any(p.startswith("_") for p in parts):
        return "a private or dunder attribute"
    try:
        import importlib
        obj: Any = importlib.import_module("triton.language")
    except Exception:
        return None
    for p in parts[2:]:
        try:
            obj = getattr(obj, p)
        except AttributeError:
            # A submodule not imported by triton.language (e.g. extra.cuda.libdevice) may still exist.
            try:
                obj = importlib.import_module(f"{getattr(obj, '__name__', '')}.{p}")
            except Exception:
                return f"no attribute {p} in Triton"
    mod = getattr(obj, "__module__", None) or getattr(obj, "__name__", "") or ""
    if type(obj).__name__ in ("module",):
        mod = obj.__name__
    if mod.startswith("triton") or type(obj).__module__.startswith("triton"):
        return None
    return f"{q} is {type(obj).__name__} from {mod or 'outside Triton'}"


class Auditor:
    def __init__(self, source: Any, filename: str = "<candidate>") -> None:
        self.source = source
        self.filename = filename
        self.errors: List[Dict[str, Any]] = []
        self.dots: List[Dict[str, Any]] = []
        self.kernels: List[Dict[str, Any]] = []
        self.notes: List[str] = []

    def error(self, kernel: Optional[str], line: int, message: str) -> None:
        if len(self.errors) < MAX_FINDINGS:
            self.errors.append({"kernel": kernel, "line": line, "message": message})

    def run(self) -> None:
        tree = ast.parse(self.source, self.filename)
        self.mod = _Module(tree)
        jit_defs: Dict[int, Tuple[ast.FunctionDef, List[str]]] = {}
        defs_by_name: Dict[str, List[ast.FunctionDef]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs_by_name.setdefault(node.name, []).append(node)
        decorator_nodes: Set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    paths = self.mod.qualify_any(target)
                    jit = sorted(p for p in paths if _is_jit_path(p))
                    for n in ast.walk(target):
                        decorator_nodes.add(id(n))
                    if jit and isinstance(node, ast.ClassDef):
                        self.error(None, node.lineno, f"triton.jit applied to class {node.name}")
                    elif jit:
                        entry = jit_defs.setdefault(id(node), (node, []))
                        entry[1].append(jit[0])
                        if isinstance(dec, ast.Call) and any(k.arg == "repr" for k in dec.keywords):
                            self.error(node.name, node.lineno, f"@triton.jit(repr=...) renames kernel {node.name}: the "
                                                               "verifier matches GPU kernels by the function's name")
        # triton.jit(f) / JITFunction(f) outside decorators, and any other use of the jit machinery.
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in decorator_nodes and \
                    isinstance(getattr(node, "ctx", None), ast.Load):
                paths = [p for p in self.mod.qualify_any(node) if _is_jit_path(p)]
                if not paths or self._is_attr_root(tree, node):
                    continue
                call = self._parent_call(tree, node)
                if call is not None and len(call.args) >= 1 and isinstance(call.args[0], ast.Name) and \
                        call.args[0].id in defs_by_name and len(defs_by_name[call.args[0].id]) == 1:
                    fn = defs_by_name[call.args[0].id][0]
                    jit_defs.setdefault(id(fn), (fn, []))[1].append(paths[0])
                    continue
                if self._is_module_alias(tree, node):
                    continue
                self.error(None, node.lineno, f"uses {sorted(paths)[0]} at line {node.lineno} other than as a "
                                              "decorator or on a function of this file (triton.jit(f)): the audit "
                                              "cannot tell which code it compiles")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute):
                        q = self.mod.qualify_any(t)
                        bad = sorted(p for p in q if _is_triton_module_path(p.rsplit(".", 1)[0]) or p.startswith("builtins."))
                        if bad:
                            self.error(None, node.lineno, f"rebinds {bad[0]} at line {node.lineno}: kernels using it "
                                                          "cannot be audited")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                    and node.args and node.func.id not in self.mod.bindings:
                q = self.mod.qualify_any(node.args[0])
                if any(_is_triton_module_path(p) or p == "builtins" for p in q):
                    self.error(None, node.lineno, f"{node.func.id} on {sorted(q)[0]} at line {node.lineno}: kernels "
                                                  "using it cannot be audited")
        self.jit_names = {fn.name for fn, _ in jit_defs.values()}
        for fn, decs in sorted(jit_defs.values(), key=lambda x: x[0].lineno):
            self.kernels.append({"name": fn.name, "line": fn.lineno, "decorators": sorted(set(decs)),
                                 "library_lookalike": bool(LIBRARY_LOOKALIKE.search(fn.name))})
            self._audit_body(fn)

    @staticmethod
    def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
        parents = {}
        for p in ast.walk(tree):
            for c in ast.iter_child_nodes(p):
                parents[id(c)] = p
        return parents

    _parent_cache: Optional[Dict[int, ast.AST]] = None

    def _parent(self, tree: ast.AST, node: ast.AST) -> Optional[ast.AST]:
        if self._parent_cache is None:
            self._parent_cache = self._parents(tree)
        return self._parent_cache.get(id(node))

    def _is_attr_root(self, tree: ast.AST, node: ast.AST) -> bool:
        p = self._parent(tree, node)
        return isinstance(p, ast.Attribute) and p.value is node

    def _parent_call(self, tree: ast.AST, node: ast.AST) -> Optional[ast.Call]:
        p = self._parent(tree, node)
        return p if isinstance(p, ast.Call) and p.func is node else None

    def _is_module_alias(self, tree: ast.AST, node: ast.AST) -> bool:
        """`my_jit = triton.jit` at module level: the alias itself is resolved where it is used."""
        p = self._parent(tree, node)
        return isinstance(p, ast.Assign) and p.value is node and len(p.targets) == 1 and \
            isinstance(p.targets[0], ast.Name) and p in self.mod.tree.body

    # ---- a jit body ---------------------------------------------------------------------

    def _audit_body(self, fn: ast.FunctionDef) -> None:
        name = fn.name
        args = fn.args
        params = [a for a in args.posonlyargs + args.args + args.kwonlyargs]
        if args.vararg:
            params.append(args.vararg)
        if args.kwarg:
            params.append(args.kwarg)
        constexpr_params = {a.arg for a in params if a.annotation is not None and
                            any(p.endswith("constexpr") for p in self.mod.qualify_any(a.annotation))}
        local: Set[str] = {a.arg for a in params}
        body_nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
        for n in body_nodes:
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                local.add(n.id)
            elif isinstance(n, ast.arg):
                local.add(n.arg)
        methods = tensor_methods()
        for n in body_nodes:
            line = getattr(n, "lineno", fn.lineno)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Import, ast.ImportFrom,
                              ast.Global, ast.Nonlocal, ast.Await, ast.Yield, ast.YieldFrom)):
                self.error(name, line, f"{type(n).__name__} inside @triton.jit kernel {name} at line {line}: Triton's "
                                       "compiler rejects this on a GPU")
                continue
            if isinstance(n, ast.Attribute) and n.attr.startswith("__"):
                self.error(name, line, f"dunder attribute .{n.attr} inside @triton.jit kernel {name} at line {line}")
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local:
                why = self._global_problem(n.id)
                if why:
                    self.error(name, line, f"refers to {n.id} ({why}) inside @triton.jit kernel {name} at line {line}: "
                                           "Triton's compiler rejects this on a GPU")
            elif isinstance(n, ast.Call):
                why = self._call_problem(n, local, constexpr_params, methods)
                if why:
                    self.error(name, line, f"calls {why} inside @triton.jit kernel {name} at line {line}: Triton's "
                                           "compiler rejects this on a GPU")
                self._check_dot(name, n)

    def _global_problem(self, ident: str) -> Optional[str]:
        kinds = self.mod.bindings.get(ident)
        if kinds is None:
            if hasattr(builtins, ident):
                return None if ident in TRITON_BUILTINS or ident in ("True", "False", "None") else \
                    f"the Python builtin {ident}, which Triton kernels cannot call"
            return "a name this file does not define" + (" (star import)" if self.mod.star_imports else "")
        for kind, detail in kinds:
            if kind == "const":
                continue
            if kind == "def" and detail in self.jit_names:
                continue
            if kind in ("import", "alias") and detail:
                if _is_triton_module_path(detail) or detail in TRITON_HOST_FUNCS or _is_jit_path(detail):
                    continue
                if _triton_language_path(detail.rsplit(".", 1)[0]):
                    continue
                return f"bound to {detail}"
            if kind == "def":
                return "a Python function of this file not decorated with @triton.jit"
            return detail or kind
        return None

    def _call_problem(self, call: ast.Call, local: Set[str], constexpr_params: Set[str], methods: Set[str]) -> Optional[str]:
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in local:
                return f"{f.id}, a value of the kernel (a function passed in or assigned cannot be audited)"
            kinds = self.mod.bindings.get(f.id)
            if kinds is None:
                if f.id == "getattr" and (len(call.args) != 2 or not isinstance(call.args[1], ast.Constant)
                                          or not isinstance(call.args[1].value, str) or call.args[1].value.startswith("_")):
                    return "getattr with a computed or private attribute name"
                return None  # builtins: judged by the name rule
            for kind, detail in kinds:
                if kind == "def" and detail in self.jit_names:
                    continue
                if kind in ("import", "alias") and detail:
                    why = self._path_problem(detail)
                    if why:
                        return why
                    continue
                if kind == "def":
                    return f"{f.id}, a Python function of this file not decorated with @triton.jit"
                return f"{f.id} ({detail or kind})"
            return None
        if isinstance(f, ast.Attribute):
            root, attrs = _dotted(f)
            if any(a.startswith("__") for a in attrs):
                return f"a dunder attribute ({'.'.join(attrs)})"
            if isinstance(root, ast.Name) and root.id not in local:
                q = self.mod.qualify(f)
                if q is None:
                    kinds = self.mod.bindings.get(root.id, set())
                    if any(k == "def" and d in self.jit_names for k, d in kinds):
                        return f"{root.id}.{'.'.join(attrs)} (an attribute of a jit function)"
                    return f"{root.id}.{'.'.join(attrs)}"
                return self._path_problem(q)
            method = attrs[-1]
            if isinstance(root, ast.Name) and root.id in constexpr_params and len(attrs) == 1:
                return (f"{root.id}.{method}() on constexpr argument {root.id} (an object passed in: the interpreter "
                        "would run its Python methods)")
            if method not in methods:
                return f".{method}() on a kernel value (not a Triton tensor method)"
            return None
        return f"a computed callable ({type(f).__name__})"

    def _path_problem(self, q: str) -> Optional[str]:
        if q in TRITON_HOST_FUNCS:
            return None
        if _triton_language_path(q) and q != "triton.language":
            why = _resolve_triton(q)
            return None if why is None else f"{q} ({why})"
        if _is_jit_path(q):
            return f"{q} (the jit machinery)"
        return q

    # ---- tl.dot precision ---------------------------------------------------------------

    def _check_dot(self, kernel: str, call: ast.Call) -> None:
        q = self.mod.qualify(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        if q not in ("triton.language.dot", "triton.language.core.dot"):
            return
        precision: Optional[str] = None
        explicit = False
        for i, a in enumerate(call.args):
            if i == 3:
                explicit, precision = True, _const_str(a)
            elif i == 4 and not explicit:
                explicit, precision = True, _tf32_flag(a)
        for k in call.keywords:
            if k.arg == "input_precision":
                explicit, precision = True, _const_str(k.value)
            elif k.arg == "allow_tf32" and not any(kk.arg == "input_precision" for kk in call.keywords):
                explicit, precision = True, _tf32_flag(k.value)
        if explicit and precision is not None and precision.lower() in EXACT_DOT_PRECISIONS:
            return
        if len(call.args) >= 2 and all(self._low_precision_cast(a) for a in call.args[:2]):
            return  # fp16/bf16/fp8 operands: input_precision does not apply; the values decide
        shown = precision if explicit and precision is not None else ("a computed value" if explicit else "default")
        self.dots.append({"kernel": kernel, "line": call.lineno, "input_precision": shown})

    def _low_precision_cast(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
            q = self.mod.qualify(node.args[0]) if isinstance(node.args[0], (ast.Name, ast.Attribute)) else None
            return bool(q) and q.rsplit(".", 1)[-1] in _LOW_PRECISION_DTYPES
        return False


def _const_str(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _tf32_flag(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return "tf32" if node.value else "ieee"
    return None


def audit_source(source: bytes, filename: str = "<candidate>", device: str = "cpu", precision_fp32: bool = True,
                 profile: str = "strict", require_triton: bool = True) -> Dict[str, Any]:
    """The audit reply: `load_verdict` (a compile_error decided before any candidate code runs, or
    None), `after_correct` (a cheat to apply if the candidate passes correctness, or None: no jit
    kernel in the source, or a default-precision tl.dot in CPU mode), the jit kernels,
    the trusted `kernel_names` for profile matching, compile findings, tl.dot findings, notes."""
    out: Dict[str, Any] = {"load_verdict": None, "after_correct": None, "kernels": [], "kernel_names": [],
                           "compile_findings": [], "tl_dot": [], "notes": [], "source_bytes": len(source)}
    if len(source) > MAX_SOURCE_BYTES:
        out["load_verdict"] = {"verdict": "compile_error", "rule": "source_too_large",
                               "message": f"the candidate source is {len(source)} bytes; the verifier audits sources "
                                          f"of up to {MAX_SOURCE_BYTES} bytes (the protocol's 1 MiB frame)"}
        return out
    a = Auditor(source, filename)  # bytes: ast honours a BOM or a coding declaration, as the import does
    try:
        a.run()
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None)
        out["load_verdict"] = {"verdict": "compile_error", "rule": "syntax_error",
                               "message": f"the source does not parse: {type(e).__name__}: {getattr(e, 'msg', e)}"
                                          + (f" (line {line})" if line else "")}
        return out
    out["kernels"] = a.kernels
    out["kernel_names"] = sorted({k["name"] for k in a.kernels if not k["library_lookalike"]})
    out["compile_findings"] = a.errors
    out["tl_dot"] = a.dots
    lookalikes = [k["name"] for k in a.kernels if k["library_lookalike"]]
    if lookalikes:
        out["notes"].append(f"jit kernels named like vendor library kernels are not counted as Triton in the GPU "
                            f"profile: {', '.join(lookalikes)}")
    if a.errors:
        first = a.errors[0]
        more = f" (+{len(a.errors) - 1} more)" if len(a.errors) > 1 else ""
        out["load_verdict"] = {"verdict": "compile_error", "rule": "kernel_audit",
                               "message": first["message"] + more, "evidence": a.errors}
        return out
    if require_triton and not a.kernels:
        # Applied if the candidate otherwise passes (a crash, hang or sandbox attempt of such a
        # candidate keeps its own, more telling verdict); the launch counter usually says it first.
        out["after_correct"] = {"rule": "no_triton_kernel", "message": "the source defines no @triton.jit kernel",
                                "evidence": "the source defines no @triton.jit kernel (static audit of the source "
                                            "text, which the candidate cannot change; its Python launch count is "
                                            "not believed)"}
        return out
    if a.dots:
        where = "; ".join(f"kernel {d['kernel']} line {d['line']} (input_precision {d['input_precision']})"
                          for d in a.dots[:5])
        text_ev = (f"tl.dot on fp32 operands without input_precision=\"ieee\" (or allow_tf32=False): {where}. "
                   "On a GPU this is TF32 (10-bit mantissa) arithmetic; the CPU interpreter computes it in exact fp32, "
                   "so CPU correctness cannot see the downgrade")
        if device == "cpu" and precision_fp32 and profile == "strict":
            out["after_correct"] = {"rule": "precision_downgrade", "message": text_ev,
                                    "evidence": text_ev + " (static audit; applied because the candidate passed "
                                                          "correctness in CPU mode)"}
        elif device == "cpu":
            out["notes"].append(text_ev + f"; not a cheat under profile {profile} / this precision (a GPU run at its "
                                          "tolerance would pass it too)")
        else:
            out["notes"].append(text_ev + "; on a GPU the strict profile's fp64 comparison sees TF32 error by value, "
                                          "so the runtime verdict decides")
    return out


# ---- the GPU kernel profile (classified in the judge) ---------------------------------------

_COMPUTE = re.compile(r"gemm|gemv|xmma|cutlass|cublas|cudnn|nvjet|matmul|conv|wgrad|dgrad|fprop|implicit|winograd|"
                      r"fft|reduce|reduction|scan|cub::|radix|sort|softmax|(layer|batch|group|instance|rms)_?norm|"
                      r"attention|fmha|flash|splitk|bmm|addmm|^triton_", re.IGNORECASE)
_COPY = re.compile(r"memcpy|memset|copy|fill|cast|convert|transpose|cat_?array|index|gather|scatter|arange|"
                   r"zero|clone|contiguous", re.IGNORECASE)
_ELEMENTWISE = re.compile(r"elementwise|vectorized|unrolled|pointwise", re.IGNORECASE)
CLASSES = ("triton", "compute", "copy", "elementwise", "other")
REFERENCE_WORK_SHARE = 0.5  # torch work of at least this share of the reference forward's: torch_fallback


def classify_kernel(name: str, triton_names: Set[str]) -> str:
    """"triton" (one of the candidate's @triton.jit kernels, by the audit's names), "compute"
    (library GEMM/conv/reduction/scan/softmax/norm kernels, and Inductor's triton_* kernels: work
    torch did), "copy" (memcpy/memset, fills, casts, copies), "elementwise" (other ATen
    elementwise kernels) or "other". Only "compute" counts against torch_fallback."""
    base = name.strip()
    if base in triton_names:
        return "triton"
    if _COMPUTE.search(base):
        return "compute"
    if _COPY.search(base):
        return "copy"
    if _ELEMENTWISE.search(base):
        return "elementwise"
    return "other"


def reference_work_us(reference: Optional[Dict[str, Any]]) -> Optional[float]:
    """GPU time of the reference forward's compute and elementwise kernels (the judge's own
    profile): how much work the problem is when torch does it. None when not measured."""
    if not isinstance(reference, dict) or not reference.get("available"):
        return None
    total = 0.0
    for k in reference.get("kernels") or []:
        if classify_kernel(str(k.get("name", "")), set()) in ("compute", "elementwise"):
            total += float(k.get("us", 0.0))
    return total


def check_kernel_profile(profile: Optional[Dict[str, Any]], triton_names: Iterable[str], mode: str = "strict",
                         triton_launches: Optional[int] = None,
                         reference: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """{"summary": {...}, "violation": {"rule", "evidence"} | None} for a candidate's reported
    `kernel_profile` ({"available", "reason", "kernels": [{"name", "us", "count"}]}). With the
    judge's profile of the reference forward (`reference`), torch work of at least half the
    reference's own is torch_fallback however much other GPU time the run spent (padding with
    fills or idle Triton kernels does not dilute it)."""
    names = {str(n) for n in triton_names}
    summary: Dict[str, Any] = {"available": False, "triton_launches_counted": triton_launches}
    if not isinstance(profile, dict) or not profile.get("available"):
        reason = profile.get("reason") if isinstance(profile, dict) else "no kernel_profile in the run reply"
        summary["reason"] = str(reason)[:500]
        summary["fallback"] = "the Python launch counter (rule no_triton_kernel) is the only fact"
        return {"summary": summary, "violation": None}
    kernels = profile.get("kernels")
    if not isinstance(kernels, list):
        summary["reason"] = "kernel_profile.kernels is not a list"
        return {"summary": summary, "violation": None}
    by_class: Dict[str, float] = {c: 0.0 for c in CLASSES}
    counts: Dict[str, int] = {c: 0 for c in CLASSES}
    rows = []
    for k in kernels[:512]:
        if not isinstance(k, dict):
            continue
        name = str(k.get("name", ""))[:400]
        try:
            us = float(k.get("us", 0.0))
            count = max(0, int(k.get("count", 1)))
        except (TypeError, ValueError, OverflowError):
            continue
        if not math.isfinite(us) or us < 0:
            continue
        cls = classify_kernel(name, names)
        by_class[cls] += us
        counts[cls] += count
        rows.append((us, name, cls, count))
    total = sum(by_class.values())
    summary.update({
        "available": True,
        "gpu_time_us": total,
        "kernels_by_class": counts,
        "time_us_by_class": by_class,
        "triton_share": (by_class["triton"] / total) if total > 0 else 0.0,
        "non_triton_compute_share": (by_class["compute"] / total) if total > 0 else 0.0,
        "top_non_triton": [{"name": n[:200], "us": us, "class": c, "count": cnt}
                           for us, n, c, cnt in sorted((r for r in rows if r[2] != "triton"), reverse=True)[:5]],
        "audit_kernel_names": sorted(names)[:50],
        "note": "profiled in the candidate's process (torch.profiler / CUPTI): a cross-check below Python, not a proof",
    })
    # torch.relu on an elementwise problem is the whole work: ATen elementwise kernels count as
    # work done outside Triton (copies, fills and casts do not), as on CPU (candidate._AtenCompute).
    work = by_class["compute"] + by_class["elementwise"]
    ref_work = reference_work_us(reference)
    summary["reference_work_us"] = ref_work
    summary["torch_work_us"] = work
    violation = None
    if mode == "strict":
        if counts["triton"] == 0:
            violation = {"rule": "no_triton_kernel",
                         "evidence": f"the profiled forward ran {sum(counts.values())} GPU kernel(s), none of them one of "
                                     f"the source's @triton.jit kernels ({', '.join(sorted(names)[:8]) or 'none'}); "
                                     f"Python launch counter said {triton_launches}"}
        elif total > 0 and work > 0.5 * total:
            top = ", ".join(f"{r['name'][:80]} {r['us']:.1f} us" for r in summary["top_non_triton"][:3])
            violation = {"rule": "torch_fallback",
                         "evidence": f"non-Triton compute and elementwise kernels took {work:.1f} of {total:.1f} us "
                                     f"({work / total:.0%}) of the profiled run's GPU time; Triton "
                                     f"{by_class['triton']:.1f} us. Top: {top}"}
        elif ref_work and work >= REFERENCE_WORK_SHARE * ref_work:
            top = ", ".join(f"{r['name'][:80]} {r['us']:.1f} us" for r in summary["top_non_triton"][:3])
            violation = {"rule": "torch_fallback",
                         "evidence": f"non-Triton compute and elementwise kernels took {work:.1f} us in the profiled "
                                     f"run, {work / ref_work:.0%} of the {ref_work:.1f} us the reference forward's own "
                                     f"kernels take; Triton {by_class['triton']:.1f} us. Top: {top}"}
    return {"summary": summary, "violation": violation}
