"""Turn a Case into live device memory, a snapshot, and the oracle's expectation.

The expectation is computed once, from the unmodified snapshot, by the oracle;
the target then runs on the live arena (restored from the snapshot before every
repetition) and `compare` reports what differs the way numpy.testing does:
counts first, then the first differing positions with expected and actual.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mambafuzz import contracts, oracle
from mambafuzz.contracts.base import Output, host_array
from mambafuzz.kernels.perturb import Perturb

from mambafuzz.cases import Case
from mambafuzz.control import mps
from mambafuzz.errors import CaseError, InternalError, MambafuzzError, OverBudget
from mambafuzz.instrument import perturbed_launches
from mambafuzz.judge.signature import accepts, by_position

FIRST_DIFFS = 8


def fill_bytes(seed: int, n: int) -> np.ndarray:
    """Pseudo-random, never periodic bytes: a shift by any p changes them."""
    return np.random.default_rng(np.random.PCG64(seed)).integers(0, 256, size=n, dtype=np.uint8)


@dataclass
class Mismatch:
    """What differed between a repetition and the oracle, numpy.testing style: arena bytes, then the
    elements of in-place output arguments (``outputs``: argument, index, where, expected, actual)."""

    count: int
    total: int
    first: list[dict[str, Any]]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""  # set when the first bytes could not be captured (see gpu_reps.failing_mismatch)

    def summary(self) -> str:
        parts = []
        if self.count and not self.first:
            parts.append(f"{self.count} of {self.total} bytes differ ({100 * self.count / self.total:.3g}%)")
        elif self.count:
            f = self.first[0]
            parts.append(f"{self.count} of {self.total} bytes differ ({100 * self.count / self.total:.3g}%); "
                         f"first at arena+{f['offset']} ({f['where']}): expected 0x{f['expected']:02x}, "
                         f"got 0x{f['actual']:02x}")
        if self.outputs:
            a = self.outputs[0]
            parts.append(f"{a['argument']}[{a['index']}] ({a['where']}): expected {a['expected']}, "
                         f"got {a['actual']}")
        if self.note:
            parts.append(self.note)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = {"count": self.count, "total": self.total, "first": self.first, "outputs": self.outputs}
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "Mismatch":
        outputs = list(body.get("outputs", []))
        # crash files from before the generic outputs: one contract's accepted counts
        outputs += [{"argument": "num_accepted", "index": a["request"], "where": f"request {a['request']}",
                     "expected": a["expected"], "actual": a["actual"]} for a in body.get("accepted", [])]
        return cls(count=body["count"], total=body["total"], first=list(body.get("first", [])),
                   outputs=outputs, note=body.get("note", ""))


def host_values(tensor, output: Output) -> np.ndarray:
    """A tensor argument's values on the host, as numpy holds them: a bfloat16 one as its int16 bits
    when compared exactly (as the contract stored it), as float32 values within a tolerance."""
    import torch  # deferred: torch takes seconds to import

    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16) if output.exact else t.float()
    return t.numpy()


def differing(output: Output, got: np.ndarray, want: np.ndarray | None = None) -> np.ndarray:
    """Indices of `got`'s elements outside `output`'s expectation (exactly, or within its tolerance);
    `want` its expected values on the host, when the caller has them already."""
    want = (host_array(output.expected) if want is None else want).reshape(-1)
    got = got.reshape(-1)
    # don't-care elements hold whatever the target left (an engine's torch.empty: NaN, inf), and a wrong
    # cared one may too: numpy's floating-point warnings would be noise in the log, an error under -W error
    with np.errstate(all="ignore"):
        if not output.tolerant:
            close = got == want
        else:
            want64, got64 = want.astype(np.float64), got.astype(np.float64)
            close = np.abs(got64 - want64) <= host_array(output.atol).reshape(-1) + output.rtol * np.abs(want64)
            close |= np.isnan(want64) & np.isnan(got64)
    if output.care is not None:
        close |= ~host_array(output.care).reshape(-1)
    return np.flatnonzero(~close)


@dataclass
class Materialized:
    """One case on one device: live memory, its snapshot, and the expectation."""

    case: Case
    device: str
    arena: torch.Tensor
    snapshot: np.ndarray
    expected: np.ndarray
    args: dict[str, Any]
    kwargs: dict[str, Any]
    # arguments the target updates in place: what each must hold, and its value before the run
    outputs: tuple[Output, ...] = ()
    output_snapshots: dict[str, torch.Tensor] = field(default_factory=dict)
    arena_snapshot: torch.Tensor | None = None  # the snapshot's live bytes on the device (what restore writes)
    positions: np.ndarray | None = None  # sparse mode: arena offset of each snapshot byte
    device_positions: torch.Tensor | None = None  # sparse mode: `positions` of the live bytes, on the device
    perturb: Perturb | None = None  # the case's race amplification, validated
    # the latest run's record of a non-amplifiable target's perturbed launches (instrument.LaunchRecord):
    # which kernels got warp delays and why others did not; None when nothing was perturbed
    instrumented: Any = None
    # what the arena may hold besides the snapshot: "nothing" (just made or restored), "changes" (only
    # bytes a correct run changes: how a chunk-judged batch leaves it), "anything" (a target ran since)
    arena_holds: str = "nothing"
    # compare's expectation on the device (None: not made yet; False: the host compares)
    _device_expect: tuple | bool | None = field(default=None, repr=False)

    def restore(self) -> None:
        self.arena_holds = "nothing"
        if self.device_positions is None:
            self.arena.copy_(self.arena_snapshot)
        else:
            self.arena[self.device_positions] = self.arena_snapshot
        for name, before in self.output_snapshots.items():
            live = self.args[name]
            if before.shape != live.shape:  # a self-overlapping view (a broadcast): its storage's bytes
                live = _storage_bytes(live)
            live.copy_(before)

    def run(self, fn, amplifiable: bool | None = None) -> None:
        """Call ``fn`` on the live arena, as its contract says (``signature``).

        The contract's arguments go positionally (in contract order), its
        options by keyword, ``arena=`` only when ``fn`` accepts it, and
        ``perturb=`` only when the case has one and the target is amplifiable
        (``amplifiable``, or else ``fn.amplifiable``).  Any other target with a
        perturbed case runs, when compiled, with its Triton launches
        intercepted (``mambafuzz.instrument``): instrumented variants with the
        warp delays, at the perturbation's warp count; ``self.instrumented``
        keeps the record.  Interpreted, the delays compile to nothing: no
        interception.
        """
        if amplifiable is None:
            amplifiable = bool(getattr(fn, "amplifiable", False))
        self.arena_holds = "anything"
        extra = {"arena": self.arena} if accepts(fn, "arena") else {}
        if self.perturb is not None and amplifiable:
            extra["perturb"] = self.perturb
        if self.perturb is not None and not amplifiable and self.device != "cpu":
            with perturbed_launches(self.perturb) as record:
                self.instrumented = record
                self._call(fn, extra)
        else:
            self._call(fn, extra)

    def _call(self, fn, extra: dict[str, Any]) -> None:
        if by_position(fn, len(self.args)):
            fn(*self.args.values(), **self.kwargs, **extra)
        else:
            fn(**self.args, **self.kwargs, **extra)

    @property
    def device_judgeable(self) -> bool:
        """Whether the GPU judge can count this case's differences: at most one in-place output, exact
        (it rides along as the check kernel's byte-compared aux buffer); else the host compares."""
        return len(self.outputs) <= 1 and all(o.exact for o in self.outputs)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor a target may touch, by name (the race recorder's regions)."""
        import torch  # deferred: torch takes seconds to import

        named = {"arena": self.arena}
        named.update({k: v for k, v in self.args.items() if isinstance(v, torch.Tensor)})
        return named

    def compare(self) -> Mismatch | None:
        if self.device != "cpu" and self._same_on_device():
            return None  # the usual verdict, without the arena and outputs crossing to the host
        if self.device_positions is None:
            actual = self.arena.cpu().numpy()
        else:  # sparse: filler bytes of the image (position -1) are never touched
            actual = self.snapshot.copy()
            actual[self.positions >= 0] = self.arena[self.device_positions].cpu().numpy()
        diff = np.flatnonzero(actual != self.expected)
        bad_out: list[dict[str, Any]] = []
        for out in self.outputs:
            got = host_values(self.args[out.name], out).reshape(-1)
            want = host_array(out.expected).reshape(-1)
            for i in differing(out, got, want)[:FIRST_DIFFS]:
                bad_out.append({"argument": out.name, "index": int(i), "where": out.what.format(i=int(i)),
                                "expected": want[i].item(), "actual": got[i].item()})
        if diff.size == 0 and not bad_out:
            return None
        offsets = diff if self.positions is None else self.positions[diff]
        first = [{"offset": int(a), "expected": int(self.expected[o]), "actual": int(actual[o]),
                  "where": contracts.of(self.case).locate(self.case, int(a))} for o, a in zip(diff[:FIRST_DIFFS], offsets)]
        return Mismatch(int(diff.size), int(actual.size), first, bad_out)

    def values_at(self, other: Mismatch) -> list[tuple[str, Any, Any]]:
        """(where, `other`'s value, this run's value) at the first differences another run of the same case
        recorded (a compiled run's, read back from its verdict): arena bytes, then output elements."""
        if self.device_positions is None:
            actual = self.arena.cpu().numpy()
        else:
            actual = self.snapshot.copy()
            actual[self.positions >= 0] = self.arena[self.device_positions].cpu().numpy()
        out: list[tuple[str, Any, Any]] = []
        for f in other.first:
            offset = int(f["offset"])
            index = offset if self.positions is None else next(iter(np.flatnonzero(self.positions == offset)), None)
            if index is not None and 0 <= index < actual.size:
                out.append((f"arena+{offset} ({f.get('where', '')})", f"0x{int(f['actual']):02x}",
                            f"0x{int(actual[index]):02x}"))
        outputs = {o.name: o for o in self.outputs}
        for o in other.outputs:
            mine = outputs.get(o.get("argument"))
            if mine is None:
                continue
            got = host_values(self.args[mine.name], mine).reshape(-1)
            index = int(o["index"])
            if 0 <= index < got.size:
                out.append((f"{o['argument']}[{index}] ({o.get('where', '')})", o["actual"], got[index].item()))
        return out

    def differs(self) -> bool:
        """Whether the latest run differs from the expectation, without saying where: what a repetition
        after the first failing one needs (on a GPU the device's answer, with nothing copied)."""
        if self.device != "cpu":
            if self._same_on_device():
                return False
            if self._device_expect is not False:  # the device compared, and something differs
                return True
        return self.compare() is not None

    def _same_on_device(self) -> bool:
        """Whether the arena and every output match on the device (one sync).  False says only "look
        closer": the host comparison below finds what differs (or not) and reports it."""
        import torch  # deferred: torch takes seconds to import

        if self._device_expect is False:
            return False
        try:
            return self._device_match(torch)
        except (RuntimeError, TypeError, ValueError):  # no room, or a dtype torch cannot compare there
            self._device_expect = False  # the host comparison, from now on, tells (and raises what is real)
            return False

    def _device_match(self, torch) -> bool:
        if self._device_expect is None:  # the expectation on the device, made at the first compare
            live = None if self.positions is None else self.positions >= 0
            arena = self.expected if live is None else self.expected[live]
            self._device_expect = (torch.from_numpy(np.ascontiguousarray(arena)).to(self.arena.device),
                                   [_device_output(o, self.args[o.name]) for o in self.outputs])
        arena_want, outputs = self._device_expect
        actual = self.arena if self.device_positions is None else self.arena[self.device_positions]
        bad = [torch.ne(actual, arena_want).any()]
        for out, (want, atol, care) in zip(self.outputs, outputs):
            got = self.args[out.name].detach().reshape(-1)
            if got.dtype == torch.bfloat16:  # as host_values reads it: its bits when exact, else its values
                got = got.view(torch.int16) if out.exact else got.float()
            if atol is None:
                close = torch.eq(got, want)
            else:
                got = got.double()
                close = (got - want).abs() <= atol
                close |= want.isnan() & got.isnan()
            if care is not None:
                close |= ~care
            bad.append(~close.all())
        return not bool(torch.stack(bad).any())


def _device_output(out: Output, live) -> tuple:
    """An output's expectation on `live`'s device: (expected, atol or None when exact, care or None),
    flat; float64 where it has a tolerance, as `differing` computes on the host."""
    import torch  # deferred: torch takes seconds to import

    dev = live.device
    def flat(a, dtype=None):  # an oracle's tensor stays where it is; numpy crosses once
        t = a if isinstance(a, torch.Tensor) else torch.as_tensor(np.ascontiguousarray(np.asarray(a)))
        return t.reshape(-1).to(device=dev, dtype=dtype)
    care = None if out.care is None else flat(out.care)
    if not out.tolerant:
        return flat(out.expected), None, care
    want = flat(out.expected, torch.float64)
    return want, flat(out.atol, torch.float64) + out.rtol * want.abs(), care


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """All of `t`'s storage as one uint8 tensor (a view: writing it writes `t`'s memory)."""
    import torch  # deferred: torch takes seconds to import

    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _before(t: torch.Tensor) -> torch.Tensor:
    """What ``restore`` writes back into `t`: a clone, or for a view whose elements share memory
    (a stride-0 broadcast, which copy_ refuses to write) its storage's bytes."""
    if any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape)):
        return _storage_bytes(t).clone()
    return t.clone()


def footprint(arena_size: int, positions: np.ndarray | None) -> int:
    """What materialising a case allocates on its device, about (bytes): the arena, its snapshot and the
    expectation (three arenas when dense; a sparse image's live bytes and their int64 offsets otherwise)."""
    if positions is None:
        return 3 * arena_size
    return arena_size + 11 * int(positions.size)


def over_budget(limit: int) -> str:
    """The rejection's reason: one per worker budget (not per case), so the report counts them together."""
    size = f"{limit / (1 << 30):.1f} GiB" if limit >= 1 << 30 else f"{limit / (1 << 20):.0f} MiB"
    return f"over this worker's memory budget ({size})"


def cuda_fault(exc: BaseException) -> bool:
    """A CUDA error as torch raises it (AcceleratorError, "CUDA error: ...") or as a compiled Triton
    kernel's launch does ("Triton Error [CUDA]: ...", the next launch after a faulting one)."""
    text = str(exc)
    return (type(exc).__name__ == "AcceleratorError" or "CUDA error" in text or "Triton Error [CUDA]" in text
            or "illegal memory access" in text)


def gpu_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError, or a CUDA call's ``cudaErrorMemoryAllocation`` (an AcceleratorError: an
    allocation outside torch's caching allocator, as an H100 shared by three runs raised building a case)."""
    import torch  # deferred: only after a failure on a GPU

    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    return type(exc).__name__ == "AcceleratorError" and "out of memory" in str(exc)


def materialize(case: Case, device: str) -> Materialized:
    """Allocate and fill the case's memory on `device`; raise CaseError if it is impossible.

    A case that passed its field checks (``CaseBase.FIELD_CHECKS``: types and
    ranges, one line each) and the contract's own (``OracleError``) is
    mambafuzz's to materialise: anything else raised here is an InternalError.

    The contract says which bytes are live (a sparse image for pools past 2
    GiB) and what the target gets and the oracle expects; this fills, keeps
    the snapshot and puts it on the device.  A case past this process's memory budget (``control.mps``:
    a worker sharing its GPU) is declined first (``OverBudget``, a rejection), never half-allocated.
    """
    import torch  # deferred: a crash file's Verdict (engine, findings) loads without torch

    contract = contracts.of(case)
    if not 0 < case.arena_size <= contract.max_arena:
        raise CaseError(f"arena size {case.arena_size} is outside 1..{contract.max_arena} bytes")
    perturb = None
    if getattr(case, "perturb", None) is not None:
        try:
            perturb = Perturb.from_tuple(case.perturb)
        except (TypeError, ValueError) as exc:
            raise CaseError(f"bad perturb {case.perturb!r}: {exc}") from None
    limit = mps.budget()
    if limit is not None and case.arena_size > limit:  # the arena alone: no image needed to say no
        raise OverBudget(over_budget(limit))
    try:
        image = contract.image(case)
        positions = image.positions
        if limit is not None and footprint(case.arena_size, positions) > limit:
            raise OverBudget(over_budget(limit))
        snapshot = fill_bytes(case.seed, case.arena_size if positions is None else len(positions))
        contract.fill(case, image, snapshot)  # e.g. finite floats where the oracle does float math
        snapshot.flags.writeable = False
        arena_snapshot = torch.from_numpy(snapshot.copy()).to(device)
        if positions is not None:
            arena = torch.empty(case.arena_size, dtype=torch.uint8, device=device)
            live = positions >= 0
            positions_dev = torch.from_numpy(positions[live]).to(device)
            arena_snapshot = arena_snapshot[torch.from_numpy(live).to(device)]
            arena[positions_dev] = arena_snapshot
        else:
            arena, positions_dev = arena_snapshot.clone(), None
        prepared = contract.prepare(case, image, snapshot, arena, device)
    except oracle.OracleError as exc:  # the contract's checks: geometry it cannot hold, an ill-posed step
        raise CaseError(str(exc)) from None
    except MemoryError:  # sizes that each passed their field check, together more than the host holds
        raise CaseError("the case needs more memory than this machine has") from None
    except MambafuzzError:
        raise
    except Exception as exc:  # past the field checks and the contract's: a bug in the oracle or case builder
        if device != "cpu" and gpu_out_of_memory(exc):  # other processes on the GPU hold the rest: not a bug
            torch.cuda.empty_cache()
            raise OverBudget("the GPU ran out of memory building it (what other processes on it hold "
                             "counts too)") from None
        if device != "cpu" and cuda_fault(exc) and mps.under_mps():  # a neighbour's fault: run_case's to judge
            raise
        raise InternalError.of("preparing the case (the oracle or the contract's case builder)", exc) from exc
    return Materialized(case, device, arena, snapshot, prepared.expected, prepared.args, prepared.kwargs,
                        outputs=prepared.outputs,
                        output_snapshots={o.name: _before(prepared.args[o.name]) for o in prepared.outputs},
                        arena_snapshot=arena_snapshot, positions=positions, device_positions=positions_dev,
                        perturb=perturb)
