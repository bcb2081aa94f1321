"""The output region of a timed batch, and its input region (docs/trust-boundary.md, Times).

The judge owns both: on a GPU a driver-API (VMM) allocation exported as a POSIX descriptor, on a
CPU a sealed memfd. The judge makes a fresh one for each candidate's timed batch and sends its
descriptor over fd 5 (a socket the orchestrator holds); the orchestrator passes it on to the
candidate's fd 5. Each timed call copies its outputs into the region before the call's reply, so
the work is inside the orchestrator's clock, and the judge reads the values it checks from its own
mapping, at positions it picks after the call. Nothing the candidate says about its outputs is used.
The input region holds a round trip's input sets, one slot per call, written by the judge before
the round trip while the candidate's process is stopped: the candidate makes no inputs while timed.
"""
from __future__ import annotations

import ctypes
import fcntl
import math
import mmap
import os
import socket
from typing import Any, Dict, List, Optional, Sequence

import torch

from .protocol import WorkerError

CHANNEL_FD = 5
ALIGN = 256  # byte offset of each output in the region

_channel: Optional[socket.socket] = None


def _sock() -> socket.socket:
    global _channel
    if _channel is None:
        try:
            _channel = socket.socket(fileno=CHANNEL_FD)
        except OSError as e:
            raise WorkerError("protocol", f"no descriptor channel on fd {CHANNEL_FD}: {e}") from None
    return _channel


def send_fd(fd: int) -> None:
    """Sends one descriptor to the orchestrator (the judge's side)."""
    socket.send_fds(_sock(), [b"F"], [fd])


def receive_fd(timeout_s: float = 10.0) -> int:
    """Receives the one descriptor the orchestrator sent before this request."""
    s = _sock()
    s.settimeout(timeout_s)
    try:
        _, fds, _, _ = socket.recv_fds(s, 1, 4)
    except (OSError, socket.timeout) as e:
        raise WorkerError("protocol", f"no output region descriptor arrived: {e}") from None
    if len(fds) != 1:
        for f in fds:
            os.close(f)
        raise WorkerError("protocol", f"expected one output region descriptor, found {len(fds)}")
    return fds[0]


def layout(shapes: Sequence[Sequence[int]], dtypes: Sequence[torch.dtype]) -> tuple:
    """Each output's place in a region: ([{"offset", "shape", "dtype"}], bytes needed)."""
    out, at = [], 0
    for shape, dtype in zip(shapes, dtypes):
        n = math.prod(shape) * dtype.itemsize
        out.append({"offset": at, "shape": [int(d) for d in shape], "dtype": str(dtype).replace("torch.", "")})
        at += (n + ALIGN - 1) // ALIGN * ALIGN
    return out, max(at, ALIGN)


def inputs_layout(args: Sequence[Any], device: str) -> tuple:
    """One input set's place in a slot of an input region: ([{"offset", "shape", "dtype"}] per
    argument, bytes per slot), or (None, why) when the set cannot be handed over that way (the
    candidate then makes its sets itself): every argument must be a plain contiguous tensor on
    `device` that needs no grad, so that a view of the region is the same argument."""
    shapes, dtypes, want = [], [], torch.device(device)
    for i, a in enumerate(args):
        if type(a) is not torch.Tensor or a.layout != torch.strided:
            return None, f"argument {i} is a {type(a).__name__}, not a plain tensor"
        on = a.device.type == want.type and (want.index is None or a.device.index == want.index)
        if not a.is_contiguous() or a.requires_grad or not on:
            return None, f"argument {i} is not a contiguous tensor on {device} without grad"
        shapes.append(list(a.shape))
        dtypes.append(a.dtype)
    if not shapes:
        return None, "no arguments"
    return layout(shapes, dtypes)


def dtype_named(name: str) -> torch.dtype:
    d = getattr(torch, str(name), None)
    if not isinstance(d, torch.dtype):
        raise WorkerError("protocol", f"unknown dtype {name!r} in the output region's layout")
    return d


# ---- CUDA driver API (virtual memory management), through ctypes -----------------------

class _Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Loc),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Loc), ("flags", ctypes.c_int)]


_PINNED, _POSIX_FD, _LOC_DEVICE, _READ_WRITE = 1, 1, 1, 3
_cu = None


def _driver() -> Any:
    global _cu
    if _cu is None:
        _cu = ctypes.CDLL("libcuda.so.1")
    return _cu


def _ck(result: int, what: str) -> None:
    if result != 0:
        raise WorkerError("environment", f"output region: {what} failed (CUresult {result})")


class _CudaArray:
    """A device pointer as __cuda_array_interface__, for torch.as_tensor (no copy)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


class Region:
    """One mapping of a region: `data` is its bytes as a uint8 tensor on the region's device."""

    def __init__(self) -> None:
        self.fd = -1
        self.nbytes = 0
        self.data: Optional[torch.Tensor] = None
        self._mm: Optional[mmap.mmap] = None
        self._cuda: Optional[Dict[str, Any]] = None

    @classmethod
    def create(cls, nbytes: int, device: str) -> "Region":
        r = cls()
        if device.startswith("cuda"):
            r._cuda_map(device, nbytes, None)
        else:
            fd = os.memfd_create("kernelllm-timed-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, nbytes)
            # A candidate holding the descriptor can neither shrink it (a read past the end would
            # kill the judge with SIGBUS) nor grow it.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            r._cpu_map(fd, nbytes)
        return r

    @classmethod
    def attach(cls, fd: int, nbytes: int, device: str) -> "Region":
        """The candidate's mapping of the region whose descriptor it received."""
        r = cls()
        try:
            if device.startswith("cuda"):
                r._cuda_map(device, nbytes, fd)
            else:
                if os.fstat(fd).st_size < nbytes:
                    raise WorkerError("protocol", "the output region is smaller than its layout")
                r._cpu_map(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        return r

    def _cpu_map(self, fd: int, nbytes: int) -> None:
        self.fd, self.nbytes = fd, nbytes
        self._mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.data = torch.frombuffer(self._mm, dtype=torch.uint8)

    def _cuda_map(self, device: str, nbytes: int, fd: Optional[int]) -> None:
        cu = _driver()
        dev = torch.device(device)
        ordinal = dev.index if dev.index is not None else torch.cuda.current_device()
        with torch.cuda.device(ordinal):
            torch.cuda.current_stream().synchronize()  # torch's (primary) context exists
        cudev, ctx = ctypes.c_int(), ctypes.c_void_p()
        _ck(cu.cuDeviceGet(ctypes.byref(cudev), ordinal), "cuDeviceGet")
        _ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), cudev), "cuDevicePrimaryCtxRetain")
        _ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        state: Dict[str, Any] = {}  # what to release, as it is made
        self._cuda = state
        handle = ctypes.c_uint64()
        if fd is None:
            prop = _Prop()
            prop.type, prop.requestedHandleTypes, prop.location = _PINNED, _POSIX_FD, _Loc(_LOC_DEVICE, cudev.value)
            gran = ctypes.c_size_t()
            _ck(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "cuMemGetAllocationGranularity")
            nbytes = (max(nbytes, 1) + gran.value - 1) // gran.value * gran.value
            _ck(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(nbytes), ctypes.byref(prop), ctypes.c_uint64(0)),
                "cuMemCreate")
            state["handle"] = handle
            out = ctypes.c_int(-1)
            _ck(cu.cuMemExportToShareableHandle(ctypes.byref(out), handle, _POSIX_FD, ctypes.c_uint64(0)),
                "cuMemExportToShareableHandle")
            self.fd = out.value
        else:
            _ck(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
                "cuMemImportFromShareableHandle")
            state["handle"] = handle
            self.fd = fd
        self.nbytes = nbytes
        ptr = ctypes.c_uint64()
        _ck(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                   ctypes.c_uint64(0)), "cuMemAddressReserve")
        state["ptr"] = ptr
        _ck(cu.cuMemMap(ptr, ctypes.c_size_t(nbytes), ctypes.c_size_t(0), handle, ctypes.c_uint64(0)), "cuMemMap")
        state["mapped"] = True
        access = _Access(_Loc(_LOC_DEVICE, cudev.value), _READ_WRITE)
        _ck(cu.cuMemSetAccess(ptr, ctypes.c_size_t(nbytes), ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
        self.data = torch.as_tensor(_CudaArray(ptr.value, nbytes), device=f"cuda:{ordinal}")

    def views(self, places: List[Dict[str, Any]]) -> List[torch.Tensor]:
        """Each output's tensor in the region, per `layout`."""
        out = []
        for p in places:
            dtype, shape, at = dtype_named(p["dtype"]), [int(d) for d in p["shape"]], int(p["offset"])
            n = math.prod(shape) * dtype.itemsize
            if at < 0 or at % ALIGN or at + n > self.nbytes:
                raise WorkerError("protocol", f"output region layout out of bounds: offset {at}, {n} bytes of {self.nbytes}")
            out.append(self.data[at:at + n].view(dtype).view(shape))
        return out

    def close(self) -> List[str]:
        """Releases this mapping. Best effort: a region nobody reads any more costs only its memory
        until the process ends, so a failure here never fails a request; it is returned (and the
        callers note it on stderr)."""
        failed: List[str] = []
        self.data = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view holding an export of it is alive; the mapping goes with it
                failed.append("munmap: a view of the region is still alive")
            self._mm = None
        if self._cuda is not None:
            cu, st = _driver(), self._cuda
            self._cuda = None
            try:
                torch.cuda.synchronize()
            except RuntimeError as e:
                failed.append(f"synchronize: {e}")
            steps = []
            if st.get("mapped"):
                steps.append(("cuMemUnmap", lambda: cu.cuMemUnmap(st["ptr"], ctypes.c_size_t(self.nbytes))))
            if "ptr" in st:
                steps.append(("cuMemAddressFree", lambda: cu.cuMemAddressFree(st["ptr"], ctypes.c_size_t(self.nbytes))))
            if "handle" in st:
                steps.append(("cuMemRelease", lambda: cu.cuMemRelease(st["handle"])))
            for name, step in steps:
                result = step()
                if result != 0:
                    failed.append(f"{name}: CUresult {result}")
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError as e:
                failed.append(f"close: {e}")
            self.fd = -1
        return failed
