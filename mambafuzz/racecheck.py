"""Language-level race checker: record every load/store of Triton's interpreter.

Under ``TRITON_INTERPRET=1`` a kernel runs program after program, and every
block load or store runs whole, so the interpreter always produces the right
bytes: the only way to see a race there is to record *what* each lane of each
program touched and check the access pattern against the rules of the
language (SPEC section 4).

:class:`RaceRecorder` patches the module-level ``interpreter_builder``
singleton of ``triton.runtime.interpreter`` (instance attributes shadow the
class methods, and ``create_load``/``create_store`` call the masked variants
through ``self``, so this intercepts every access).  Each access event keeps
numpy arrays of the active lanes' addresses and lane ids; when a launch ends
(next ``set_grid_dim`` or :meth:`RaceRecorder.finish`) the events are
concatenated and checked with sorting and ``reduceat`` -- no per-byte Python.

Rules, per launch, masked-on lanes only:

1. intra-program: in one program and one barrier epoch (``tl.debug_barrier()``
   starts a new epoch), a byte stored by one lane and loaded or stored by a
   different lane.  Same shape + same flat element index = same lane (program
   order, never a hazard); different shapes are different lanes; scalars are
   the single lane of shape ``()``.
2. cross-program: a byte stored (non-atomic) by one program and loaded or
   stored (non-atomic) by another program of the same launch.
3. misaligned: an access whose address is not a multiple of its element size.
4. out-of-bounds: a lane whose bytes are not inside any registered region;
   :class:`OutOfBoundsAccess` is raised from the hook *before* the interpreter
   touches memory (so a wild pointer cannot segfault the process).

Atomics take part only in rules 3 and 4.
"""
from __future__ import annotations

import inspect
import linecache
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np

import triton
import triton.language as tl
from triton.runtime import interpreter as _interp

__all__ = ["Access", "Hazard", "OutOfBoundsAccess", "RaceRecorder"]

OP_LOAD, OP_STORE, OP_ATOMIC = 0, 1, 2
_OP_NAMES = ("load", "store", "atomic")
_OP_VERBS = ("loads", "stores", "atomically updates")

_PATCHED = ("create_masked_load", "create_masked_store", "create_atomic_rmw",
            "create_atomic_cas", "create_barrier", "set_grid_dim", "set_grid_idx")


# --------------------------------------------------------------------------
# public records
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Access:
    """One lane's access, as a witness of a hazard."""
    op: str                     # 'load' | 'store' | 'atomic'
    program: tuple              # (x, y, z)
    lane: int                   # flat element index within lane_shape
    lane_shape: tuple           # shape of the block op (() for scalars)
    epoch: int                  # barriers seen so far in this program
    line: str                   # "file.py:123: <source text>"
    elem_size: int              # bytes per element
    address: int                # start address of this lane's element

    def to_json(self) -> dict:
        d = asdict(self)
        d["program"] = [int(v) for v in self.program]
        d["lane_shape"] = [int(v) for v in self.lane_shape]
        return d


@dataclass(frozen=True)
class Hazard:
    kind: str                   # 'intra-program' | 'cross-program' | 'misaligned' | 'out-of-bounds'
    address: int                # byte address
    region: Optional[str]       # registered region containing it (None if none)
    offset: Optional[int]       # byte offset within that region
    first: Access
    second: Optional[Access]
    explanation: str

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "address": int(self.address),
            "region": self.region,
            "offset": None if self.offset is None else int(self.offset),
            "first": self.first.to_json(),
            "second": None if self.second is None else self.second.to_json(),
            "explanation": self.explanation,
        }


class OutOfBoundsAccess(Exception):
    """A masked-on lane would touch bytes outside every registered region."""

    def __init__(self, hazard: Hazard):
        super().__init__(hazard.explanation)
        self.hazard = hazard


# --------------------------------------------------------------------------
# source lines of the kernel that issued an access
# --------------------------------------------------------------------------
_TRITON_DIR = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
_THIS_FILE = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_THIS_FILE)) + os.sep
_internal_code: dict = {}       # code object -> bool (inside triton / this module)
_line_cache: dict = {}          # (code object, f_lasti) -> line string


def _display_path(filename: str) -> str:
    path = os.path.abspath(filename)
    for base in (_ROOT, os.getcwd() + os.sep):
        if path.startswith(base):
            return path[len(base):].replace(os.sep, "/")
    return filename


def _is_internal(code) -> bool:
    r = _internal_code.get(code)
    if r is None:
        fn = code.co_filename
        r = os.path.abspath(fn).startswith(_TRITON_DIR) or os.path.abspath(fn) == _THIS_FILE
        _internal_code[code] = r
    return r


def _issuing_line() -> str:
    """'file.py:123: source' of the first frame outside triton and this module."""
    f = sys._getframe(2)
    internal = _internal_code
    while f is not None:
        code = f.f_code
        r = internal.get(code)
        if r is None:
            r = _is_internal(code)
        if not r:
            break
        f = f.f_back
    if f is None:
        return "<unknown>"
    key = (f.f_code, f.f_lasti)
    s = _line_cache.get(key)
    if s is None:
        lineno = f.f_lineno
        fn = f.f_code.co_filename
        text = linecache.getline(fn, lineno).strip()
        s = f"{_display_path(fn)}:{lineno}: {text}"
        _line_cache[key] = s
    return s


# --------------------------------------------------------------------------
# element sizes
# --------------------------------------------------------------------------
_elem_cache: dict = {}
_TensorHandle = _interp.TensorHandle


def _elem_size(handle) -> int:
    """Bytes per element addressed by a pointer handle (its dtype is a pointer)."""
    t = handle.dtype
    if isinstance(t, tl.block_type):
        t = t.element_ty
    if isinstance(t, tl.pointer_type):
        t = t.element_ty
    if isinstance(t, tl.pointer_type):     # pointer to pointer: a 64-bit address
        return 8
    try:
        return _elem_cache[t]
    except (KeyError, TypeError):
        pass
    try:
        size = int(_interp._get_np_dtype(t).itemsize)
    except Exception:
        size = max(1, int(getattr(t, "primitive_bitwidth", 8)) // 8)
    try:
        _elem_cache[t] = size
    except TypeError:
        pass
    return size


# --------------------------------------------------------------------------
# builder hooks: where each patched method takes the arguments we read
# --------------------------------------------------------------------------
# hook -> the parameters the recorder reads, each a tuple of accepted names
_HOOK_PARAMS = {
    "create_masked_load": (("ptrs", "ptr"), ("mask",)),
    "create_masked_store": (("ptrs", "ptr"), ("mask",)),
    "create_atomic_rmw": (("ptr", "ptrs"), ("mask",)),
    "create_atomic_cas": (("ptr", "ptrs"),),
    "set_grid_idx": (("x",), ("y",), ("z",)),
}


def _param_reader(builder, hook: str):
    """``read(args, kwargs) -> tuple`` of the `_HOOK_PARAMS` arguments of ``builder.<hook>``.

    Positions come from the method's signature (feature detection, no version
    strings): Triton 3.9 renamed the interpreter's cache arguments and dropped
    one, ``create_masked_load(ptrs, mask, other, cache_policy, is_volatile)`` and
    ``create_masked_store(ptrs, value, mask, cache_policy)``, where 3.5..3.8 have
    ``(ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)`` and
    ``(ptrs, value, mask, cache_modifier, eviction_policy)``.  The class's own
    method is read (an instance attribute may be another recorder's wrapper);
    a release without one of the names fails here, at patch time, not with
    wrong records.
    """
    method = getattr(type(builder), hook)
    names = list(inspect.signature(method).parameters)[1:]     # drop self
    found = []
    for accepted in _HOOK_PARAMS[hook]:
        name = next((n for n in accepted if n in names), None)
        if name is None:
            raise RuntimeError(f"the race recorder does not support Triton {triton.__version__}: its "
                               f"interpreter's {hook}{tuple(names)} has no parameter named "
                               f"{' or '.join(accepted)}")
        found.append((names.index(name), name))
    found = tuple(found)
    last = max(pos for pos, _ in found)

    def read(args, kwargs):
        if len(args) > last:        # the interpreter's own calls: all positional
            return tuple(args[pos] for pos, _ in found)
        return tuple(args[pos] if len(args) > pos else kwargs.get(name) for pos, name in found)

    return read


def _first_per_group(groups_sorted_positions, positions):
    """For positions (ascending) with their group ids, first position per group."""
    g, idx = np.unique(groups_sorted_positions, return_index=True)
    return g, positions[idx]


# --------------------------------------------------------------------------
# the recorder
# --------------------------------------------------------------------------
class RaceRecorder:
    """Record every interpreted load/store and report hazards (SPEC 4).

    Use as a context manager around interpreted kernel launches::

        with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as rec:
            kernel[grid](...)
        rec.hazards, rec.stats

    An :class:`OutOfBoundsAccess` raised inside a launch reaches the caller
    wrapped in Triton's ``InterpreterError``; leaving the ``with`` block
    re-raises the ``OutOfBoundsAccess`` itself (it is also in ``.hazards``
    and ``.out_of_bounds``).  Use CPU tensors: the interpreter copies device
    tensors to the host, so their addresses would not be the recorded ones.
    """

    def __init__(self, regions: Optional[dict] = None, max_hazards: int = 16):
        self.max_hazards = int(max_hazards)
        self._regions: list = []            # (name, start, nbytes) in registration order
        self._ustarts = np.zeros(0, dtype=np.int64)
        self._uends = np.zeros(0, dtype=np.int64)
        for name, (start, nbytes) in (regions or {}).items():
            self.add_region(name, start, nbytes)
        self._saved: Optional[dict] = None
        self._active = False
        self._found: dict = {}              # (kind, line a, line b) -> Hazard
        self._hazards: Optional[list] = None
        self.out_of_bounds: Optional[OutOfBoundsAccess] = None
        self._stats = {"launches": 0, "programs": 0, "events": 0, "accesses": 0, "bytes": 0}
        self._shape_ids: dict = {(): 0}
        self._shapes: list = [()]
        self._line_ids: dict = {}
        self._lines: list = []
        self._arange_cache: dict = {}
        self._reset_launch()

    # ---- regions ---------------------------------------------------------
    def add_region(self, name: str, tensor_or_start: Any, nbytes: Optional[int] = None) -> None:
        if hasattr(tensor_or_start, "data_ptr"):
            t = tensor_or_start
            start = int(t.data_ptr())
            if nbytes is None:
                nbytes = int(t.numel()) * int(t.element_size())
        else:
            start = int(tensor_or_start)
            if nbytes is None:
                raise ValueError("add_region needs nbytes for a raw start address")
        self._regions.append((str(name), start, int(nbytes)))
        self._rebuild_union()

    def _rebuild_union(self) -> None:
        iv = sorted((s, s + n) for _, s, n in self._regions if n > 0)
        merged: list = []
        for s, e in iv:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self._ustarts = np.array([m[0] for m in merged], dtype=np.int64)
        self._uends = np.array([m[1] for m in merged], dtype=np.int64)

    def _locate(self, addr: int):
        """(region name, offset) of the smallest registered region holding addr."""
        best = None
        for name, s, n in self._regions:
            if s <= addr < s + n and (best is None or n < best[2]):
                best = (name, s, n)
        if best is None:
            return None, None
        return best[0], addr - best[1]

    def _fmt_addr(self, addr: int) -> str:
        name, off = self._locate(addr)
        return f"{name}+{off}" if name is not None else hex(addr)

    # ---- patching --------------------------------------------------------
    def __enter__(self) -> "RaceRecorder":
        if self._saved is not None:
            raise RuntimeError("RaceRecorder is already active")
        ib = _interp.interpreter_builder
        r_load = _param_reader(ib, "create_masked_load")     # before anything is patched
        r_store = _param_reader(ib, "create_masked_store")
        r_rmw = _param_reader(ib, "create_atomic_rmw")
        r_cas = _param_reader(ib, "create_atomic_cas")
        r_idx = _param_reader(ib, "set_grid_idx")
        saved = {}
        for name in _PATCHED:
            saved[name] = (name in ib.__dict__, ib.__dict__.get(name), getattr(ib, name))
        self._saved = saved
        self._hazards = None
        rec = self

        o_load = saved["create_masked_load"][2]
        o_store = saved["create_masked_store"][2]
        o_rmw = saved["create_atomic_rmw"][2]
        o_cas = saved["create_atomic_cas"][2]
        o_bar = saved["create_barrier"][2]
        o_dim = saved["set_grid_dim"][2]
        o_idx = saved["set_grid_idx"][2]

        def create_masked_load(*args, **kwargs):
            rec._record(OP_LOAD, *r_load(args, kwargs))
            return o_load(*args, **kwargs)

        def create_masked_store(*args, **kwargs):
            rec._record(OP_STORE, *r_store(args, kwargs))
            return o_store(*args, **kwargs)

        def create_atomic_rmw(*args, **kwargs):
            rec._record(OP_ATOMIC, *r_rmw(args, kwargs))
            return o_rmw(*args, **kwargs)

        def create_atomic_cas(*args, **kwargs):
            rec._record(OP_ATOMIC, *r_cas(args, kwargs), None)
            return o_cas(*args, **kwargs)

        def create_barrier(*args, **kwargs):
            rec._epoch += 1
            rec._seg += 1
            return o_bar(*args, **kwargs)

        def set_grid_dim(*args, **kwargs):
            r = o_dim(*args, **kwargs)
            rec._flush()
            rec._stats["launches"] += 1
            return r

        def set_grid_idx(*args, **kwargs):
            r = o_idx(*args, **kwargs)
            x, y, z = r_idx(args, kwargs)
            rec._programs.append((int(x), int(y), int(z)))
            rec._prog = len(rec._programs) - 1
            rec._epoch = 0
            rec._seg += 1
            rec._stats["programs"] += 1
            return r

        for fn in (create_masked_load, create_masked_store, create_atomic_rmw, create_atomic_cas,
                   create_barrier, set_grid_dim, set_grid_idx):
            setattr(ib, fn.__name__, fn)

        # Tensors a launcher passes to a kernel (a clone it made, say) are legal memory too:
        # register each launch's tensor arguments (their whole storage) as regions.
        executor = _interp.GridExecutor
        o_call = executor.__call__
        self._saved_call = o_call

        def grid_call(ex, *args_dev, **kwargs):
            for name, arg in list(zip(ex.arg_names, args_dev)) + list(kwargs.items()):
                if hasattr(arg, "untyped_storage"):
                    storage = arg.untyped_storage()
                    rec._add_launch_region(str(name), int(storage.data_ptr()), int(storage.nbytes()))
            return o_call(ex, *args_dev, **kwargs)

        executor.__call__ = grid_call
        self._active = True
        return self

    def _add_launch_region(self, name: str, start: int, nbytes: int) -> None:
        if any(s == start and n == nbytes for _, s, n in self._regions) or not self._regions:
            return  # known already, or no bounds checking asked for
        self._regions.append((name, start, nbytes))
        self._rebuild_union()

    def _restore(self) -> None:
        saved, self._saved = self._saved, None
        self._active = False
        if saved is None:
            return
        _interp.GridExecutor.__call__ = self._saved_call
        ib = _interp.interpreter_builder
        for name, (had, value, _) in saved.items():
            if had:
                setattr(ib, name, value)
            else:
                ib.__dict__.pop(name, None)

    def __exit__(self, exc_type, exc_val, tb) -> bool:
        self._restore()
        self.finish()
        oob = self.out_of_bounds
        if (exc_val is not None and oob is not None and exc_val is not oob
                and _chain_contains(exc_val, oob)):
            # the interpreter wraps kernel exceptions in InterpreterError; hand
            # the caller the OutOfBoundsAccess itself
            raise oob.with_traceback(oob.__traceback__) from None
        return False

    # ---- recording -------------------------------------------------------
    def _reset_launch(self) -> None:
        self._events: list = []
        self._programs: list = []
        self._prog = -1
        self._epoch = 0
        self._seg = 0

    def _lane_arange(self, n: int) -> np.ndarray:
        a = self._arange_cache.get(n)
        if a is None:
            a = np.arange(n, dtype=np.int64)
            self._arange_cache[n] = a
        return a

    def _record(self, op: int, ptrs, mask) -> None:
        if not self._active or ptrs is None:
            return
        data = ptrs.data
        shape = data.shape
        if len(shape) == 0 or shape == (1,):
            shape = ()
        flat = data.reshape(-1)
        n = flat.shape[0]
        if mask is None:
            addrs = flat.copy()
            lanes = None
        else:
            # block-pointer and descriptor paths pass a bare numpy mask
            m = mask.data if isinstance(mask, _TensorHandle) else mask
            if not isinstance(m, np.ndarray) or m.dtype != np.bool_:
                m = np.asarray(m, dtype=bool)
            if m.shape != data.shape:
                m = np.broadcast_to(m, data.shape)
            m = m.reshape(-1)
            if m.all():
                addrs = flat.copy()
                lanes = None
            else:
                lanes = np.flatnonzero(m)
                if lanes.shape[0] == 0:
                    return
                addrs = flat[lanes]
        if n == 0:
            return
        elem = _elem_size(ptrs)
        line = _issuing_line()
        lid = self._line_ids.get(line)
        if lid is None:
            lid = self._line_ids[line] = len(self._lines)
            self._lines.append(line)
        sid = self._shape_ids.get(shape)
        if sid is None:
            sid = self._shape_ids[shape] = len(self._shapes)
            self._shapes.append(shape)
        if self._prog < 0:          # an access outside any program: treat as one
            self._programs.append((0, 0, 0))
            self._prog = 0
            self._seg += 1
        if self._ustarts.shape[0]:
            self._check_bounds(op, addrs, lanes, elem, sid, lid)
        cnt = addrs.shape[0]
        st = self._stats
        st["events"] += 1
        st["accesses"] += cnt
        st["bytes"] += cnt * elem
        self._events.append((op, self._prog, self._epoch, self._seg, sid, elem, lid, addrs, lanes))

    def _check_bounds(self, op, addrs, lanes, elem, sid, lid) -> None:
        a = addrs.view(np.int64)
        lo = int(a.min())
        hi = int(a.max()) + elem
        us, ue = self._ustarts, self._uends
        i = int(np.searchsorted(us, lo, side="right")) - 1
        if i >= 0 and hi <= ue[i] and lo >= 0:
            return
        j = np.searchsorted(us, a, side="right") - 1
        ok = (j >= 0) & (a >= 0)
        jj = np.maximum(j, 0)
        ok &= (a + elem) <= ue[jj]
        bad = int(np.flatnonzero(~ok)[0])
        addr = int(addrs[bad])
        lane = bad if lanes is None else int(lanes[bad])
        prog = self._programs[self._prog]
        acc = Access(_OP_NAMES[op], prog, lane, self._shapes[sid], self._epoch, self._lines[lid], elem, addr)
        regions = ", ".join(f"{nm} [{hex(s)}, +{n})" for nm, s, n in self._regions)
        expl = (f"program {_fmt_prog(prog)}: lane {lane} {_OP_VERBS[op]} {elem} byte(s) at {hex(addr)} "
                f"({acc.line.split(': ', 1)[0]}), outside every registered region ({regions}); "
                f"blocked before it touched memory")
        hz = Hazard("out-of-bounds", addr, None, None, acc, None, expl)
        self._add_hazard(("out-of-bounds", acc.line, None), hz)
        exc = OutOfBoundsAccess(hz)
        self.out_of_bounds = exc
        raise exc

    # ---- analysis --------------------------------------------------------
    def _add_hazard(self, key, hz: Hazard) -> None:
        if key not in self._found:
            self._found[key] = hz
            self._hazards = None

    def finish(self) -> "RaceRecorder":
        """Analyse the launch still open (if any) and freeze the hazard list."""
        self._flush()
        hz = sorted(self._found.values(), key=lambda h: (h.address, h.kind))
        self._hazards = hz[: self.max_hazards]
        return self

    @property
    def hazards(self) -> list:
        """Hazards found so far (complete after exit or :meth:`finish`)."""
        if self._hazards is None:
            hz = sorted(self._found.values(), key=lambda h: (h.address, h.kind))
            self._hazards = hz[: self.max_hazards]
        return list(self._hazards)

    @property
    def stats(self) -> dict:
        return dict(self._stats)

    def _access(self, ev, el: int, lane_arr, addr_arr) -> Access:
        op, prog, epoch, _seg, sid, elem, lid, _a, _l = ev
        return Access(_OP_NAMES[op], self._programs[prog], int(lane_arr[el]), self._shapes[sid],
                      int(epoch), self._lines[lid], int(elem), int(addr_arr[el]))

    def _flush(self) -> None:
        events = self._events
        if not events:
            self._reset_launch()
            return
        try:
            self._analyse(events)
        finally:
            self._reset_launch()

    def _analyse(self, events: list) -> None:
        ne = len(events)
        ev_op = np.fromiter((e[0] for e in events), dtype=np.int64, count=ne)
        ev_prog = np.fromiter((e[1] for e in events), dtype=np.int64, count=ne)
        ev_seg = np.fromiter((e[3] for e in events), dtype=np.int64, count=ne)
        ev_sid = np.fromiter((e[4] for e in events), dtype=np.int64, count=ne)
        ev_elem = np.fromiter((e[5] for e in events), dtype=np.int64, count=ne)
        ev_line = np.fromiter((e[6] for e in events), dtype=np.int64, count=ne)
        counts = np.fromiter((e[7].shape[0] for e in events), dtype=np.int64, count=ne)
        A = np.concatenate([e[7] for e in events]).view(np.int64)
        L = np.concatenate([e[8] if e[8] is not None else self._lane_arange(e[7].shape[0])
                            for e in events])
        E = np.repeat(np.arange(ne, dtype=np.int64), counts)
        starts = np.zeros(ne, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        elem_el = ev_elem[E]

        # ---- rule 3: misaligned ------------------------------------------
        bad = (A & (elem_el - 1)) != 0
        misaligned_any = bool(bad.any())
        if misaligned_any:
            pos = np.flatnonzero(bad)
            pos = pos[np.argsort(A[pos], kind="stable")]          # lowest address per line
            _, first = np.unique(ev_line[E[pos]], return_index=True)
            for el in pos[np.sort(first)]:
                ev = events[int(E[el])]
                acc = self._access(ev, int(el), L, A)
                expl = (f"program {_fmt_prog(acc.program)}: lane {acc.lane} {_OP_VERBS[ev[0]]} "
                        f"{acc.elem_size} bytes at {self._fmt_addr(acc.address)} ({_where(acc)}); "
                        f"the address is not a multiple of the element size {acc.elem_size}")
                reg, off = self._locate(acc.address)
                self._add_hazard(("misaligned", acc.line, None),
                                 Hazard("misaligned", acc.address, reg, off, acc, None, expl))

        # ---- candidate events for rules 1/2 ------------------------------
        plain = ev_op != OP_ATOMIC
        if not bool((ev_op == OP_STORE).any()):
            return
        lo = np.minimum.reduceat(A, starts)
        hi = np.maximum.reduceat(A, starts) + ev_elem
        # an event whose lanes are not strictly increasing (with gaps >= elem)
        # may overlap itself
        if A.shape[0] > 1:
            same = E[1:] == E[:-1]
            irregular_el = same & (A[1:] < A[:-1] + elem_el[:-1])
            irregular = np.zeros(ne, dtype=bool)
            irregular[E[1:][irregular_el]] = True
        else:
            irregular = np.zeros(ne, dtype=bool)
        pe = np.flatnonzero(plain)
        order = pe[np.argsort(lo[pe], kind="stable")]
        lo_s, hi_s = lo[order], hi[order]
        runmax = np.maximum.accumulate(hi_s)
        newc = np.ones(order.shape[0], dtype=bool)
        newc[1:] = lo_s[1:] >= runmax[:-1]
        cid = np.cumsum(newc) - 1
        ncl = int(cid[-1]) + 1 if cid.shape[0] else 0
        cl_n = np.bincount(cid, minlength=ncl)
        cl_store = np.bincount(cid, weights=(ev_op[order] == OP_STORE), minlength=ncl) > 0
        cl_irr = np.bincount(cid, weights=irregular[order], minlength=ncl) > 0
        interesting = cl_store & ((cl_n >= 2) | cl_irr)
        if not bool(interesting.any()):
            return
        ev_keep = np.zeros(ne, dtype=bool)
        ev_keep[order[interesting[cid]]] = True

        sel = np.flatnonzero(ev_keep[E])
        Es = E[sel]
        As = A[sel]
        sizes = ev_elem[Es]
        if not misaligned_any and bool((sizes == sizes[0]).all()):
            # all aligned and one element size: two elements share a byte iff
            # they share an address, so conflicts can be found per element
            Bb = As
            elb = sel
        else:
            s = int(sizes[0]) if bool((sizes == sizes[0]).all()) else 0
            if s:
                Bb = (As[:, None] + np.arange(s, dtype=np.int64)).reshape(-1)
                elb = np.repeat(sel, s)
            else:
                tot = int(sizes.sum())
                elb = np.repeat(sel, sizes)
                first_b = np.zeros(sizes.shape[0], dtype=np.int64)
                np.cumsum(sizes[:-1], out=first_b[1:])
                Bb = np.repeat(As, sizes) + (np.arange(tot, dtype=np.int64) - np.repeat(first_b, sizes))
        Eb = E[elb]
        seg_b = ev_seg[Eb]
        bmin = int(Bb.min())
        span = int(Bb.max()) - bmin + 1
        nseg = int(seg_b.max()) + 1
        if span * nseg < (1 << 62):
            key = (Bb - bmin) * nseg + seg_b
            o = np.argsort(key, kind="stable")
            ks = key[o]
            byte_s = ks // nseg
        else:
            o = np.lexsort((seg_b, Bb))
            byte_s = Bb[o] - bmin
            ks = None
        elb = elb[o]
        Eb = Eb[o]
        is_store = ev_op[Eb] == OP_STORE
        nb = o.shape[0]

        # ---- rule 1: intra-program (group = (byte, segment)) --------------
        if ks is None:
            seg_s = seg_b[o]
            brk1 = (byte_s[1:] != byte_s[:-1]) | (seg_s[1:] != seg_s[:-1])
        else:
            brk1 = ks[1:] != ks[:-1]
        lanekey = (ev_sid[Eb] << 40) | L[elb]
        self._groups("intra-program", brk1, nb, is_store, lanekey, byte_s + bmin,
                     elb, Eb, events, L, A, ev_line)
        # ---- rule 2: cross-program (group = byte) --------------------------
        brk2 = byte_s[1:] != byte_s[:-1]
        self._groups("cross-program", brk2, nb, is_store, ev_prog[Eb], byte_s + bmin,
                     elb, Eb, events, L, A, ev_line)

    def _groups(self, kind, brk, nb, is_store, who, byte, elb, Eb, events, L, A, ev_line) -> None:
        """Groups (runs of the sorted order) holding a store and >= 2 distinct `who`."""
        gstart = np.flatnonzero(np.concatenate(([True], brk)))
        if gstart.shape[0] == nb:
            return  # every group is a single access
        has_store = np.maximum.reduceat(is_store, gstart)
        wmin = np.minimum.reduceat(who, gstart)
        wmax = np.maximum.reduceat(who, gstart)
        hz = has_store & (wmin != wmax)
        if not bool(hz.any()):
            return
        gid = np.cumsum(np.concatenate(([True], brk))) - 1
        in_hz = hz[gid]
        # the witness store: first store of the group (stable sort = program order)
        pos = np.flatnonzero(in_hz & is_store)
        g, st_pos = _first_per_group(gid[pos], pos)
        who_st = np.zeros(gstart.shape[0], dtype=who.dtype)
        who_st[g] = who[st_pos]
        # the other access: first access of the group by a different lane/program
        pos = np.flatnonzero(in_hz & (who != who_st[gid]))
        g2, ot_pos = _first_per_group(gid[pos], pos)
        assert np.array_equal(g, g2)
        ls = ev_line[Eb[st_pos]]
        lo_ = ev_line[Eb[ot_pos]]
        # one hazard per line pair: its lowest byte (groups are in byte order)
        _, first = np.unique(ls * (len(self._lines) + 1) + lo_, return_index=True)
        for k in np.sort(first):
            sp, op_ = int(st_pos[k]), int(ot_pos[k])
            e1, e2 = events[int(Eb[sp])], events[int(Eb[op_])]
            a1 = self._access(e1, int(elb[sp]), L, A)
            a2 = self._access(e2, int(elb[op_]), L, A)
            addr = int(byte[sp])
            key = (kind, a1.line, a2.line)
            if key in self._found:
                continue
            reg, off = self._locate(addr)
            where = self._fmt_addr(addr)
            verb2 = "stores it too" if a2.op == "store" else "loads it"
            if kind == "intra-program":
                same_shape = a1.lane_shape == a2.lane_shape
                l1 = f"lane {a1.lane}" + ("" if same_shape else f" of shape {a1.lane_shape}")
                l2 = f"lane {a2.lane}" + ("" if same_shape else f" of shape {a2.lane_shape}")
                expl = (f"program {_fmt_prog(a1.program)}: {l1} stores byte {where} ({_where(a1)}) "
                        f"and {l2} {verb2} ({_where(a2)}) in the same barrier epoch {a1.epoch}; "
                        f"no ordering between lanes without tl.debug_barrier()")
            else:
                expl = (f"program {_fmt_prog(a1.program)} (lane {a1.lane}) stores byte {where} "
                        f"({_where(a1)}) and program {_fmt_prog(a2.program)} (lane {a2.lane}) "
                        f"{verb2} ({_where(a2)}) in the same launch; programs of one launch are "
                        f"not ordered (only atomics may share bytes)")
            self._add_hazard(key, Hazard(kind, addr, reg, off, a1, a2, expl))


def _fmt_prog(p) -> str:
    return "(" + ",".join(str(int(v)) for v in p) + ")"


def _where(acc: Access) -> str:
    return acc.line.split(": ", 1)[0]


def _chain_contains(exc: BaseException, target: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if exc is target:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
