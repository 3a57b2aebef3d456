"""Run one target on one case, N repetitions, and give one Verdict.

Compare mode checks every repetition's bytes against the oracle.  Race mode
(the CPU default) additionally runs the first repetition under the race
recorder: a hazard is a failure even when the bytes came out right, which they
always do in Triton's interpreter.  On the CPU the recorder's bounds fence
runs in both modes: an access outside every live region is kind ``oob``.

An exception from the target is judged by ``blame.classify``: the kernel's or
the user's own (a finding of kind ``exception``), Triton's interpreter's
(``Inconclusive``: nothing was checked) or mambafuzz's (``InternalError``).
On ``cuda`` a CUDA error is a ``fault`` (the context is lost with it).  A
target that declines the case (``mambafuzz.reject``) is never judged:
``run_case`` raises its ``Rejected``.

A case with ``perturb`` runs an amplifiable target (``fn.amplifiable``, set by
the registry for the project's Triton kernels and zoo variants) with
``perturb=``: chosen warps sleep so that GPU races show.  Other targets run the
case unperturbed.  In the interpreter the perturbation compiles to nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mambafuzz.control import mps  # the worker's sharing of its GPU, as the session set it up
from mambafuzz.control.clock import Deadline, progressed
from mambafuzz.judge import blame
from mambafuzz.cases import Case
from mambafuzz.errors import CaseError, Inconclusive, InternalError, Rejected, rejection
from mambafuzz.judge.materialize import Materialized, Mismatch, cuda_fault, materialize
from mambafuzz.judge.stats import rate_upper_bound

MODES = ("compare", "race")
# What a failure is, the same word in tables, JSON reports and crash files: wrong bytes, a recorded
# hazard, the target raised, Triton could not compile the kernel for this input, a CUDA fault, the
# process died, the process stopped answering.
KINDS = ("mismatch", "race", "oob", "exception", "compile", "fault", "crash", "hang")
OUT_OF_BOUNDS = "out-of-bounds"  # the hazard kind of the recorder's bounds fence: verdict kind "oob"
FAULT_KINDS = ("fault", "crash", "hang")  # the process or its CUDA context is gone: replay in a child


@dataclass(frozen=True)
class SavedHazard:
    """A hazard read back from JSON: its record as written, with the two fields verdicts show.

    The recorder's own ``Hazard`` needs the interpreter's witnesses; a report or a
    crash file only needs to show and re-write them.
    """

    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.body.get("kind", "?")

    @property
    def explanation(self) -> str:
        return self.body.get("explanation", "")

    def to_json(self) -> dict[str, Any]:
        return self.body


@dataclass
class Verdict:
    """k failing repetitions out of N, with the evidence of the first one."""

    reps: int
    failures: int
    mode: str
    mismatch: Mismatch | None = None
    hazards: list[Any] = field(default_factory=list)
    fault: str | None = None        # the process or CUDA context is gone: what happened, one line
    exception: str | None = None    # the kernel or the user's function raised (blame.KERNEL)
    compile: str | None = None      # Triton could not compile the kernel for this input (blame.COMPILE)
    fault_kind: str = "fault"       # with `fault`: fault (CUDA), crash (the process died) or hang
    instrumented: dict | None = None  # a user kernel's perturbed launches (instrument.LaunchRecord JSON)
    divergence: str | None = None   # interpreted, where a compiled run of the case recorded other values

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.hazards or self.fault or self.exception or self.compile)

    @property
    def kind(self) -> str | None:
        """One of KINDS, or None when nothing failed."""
        if self.fault:
            return self.fault_kind
        if self.compile:
            return "compile"
        if self.exception:
            return "exception"
        if self.hazards:
            # an access outside every live region (the fence stopped the kernel there) wins over races of
            # the launches before it: it is what would fault or corrupt memory on a GPU
            return "oob" if any(h.kind == OUT_OF_BOUNDS for h in self.hazards) else "race"
        if self.failures:
            return "mismatch"
        return None

    @property
    def rate_upper95(self) -> float:
        return rate_upper_bound(self.failures, self.reps) if self.reps else 1.0

    def summary(self) -> str:
        if self.fault:
            return f"{self.fault_kind}: {self.fault}"
        if self.compile:
            return f"compile: {self.compile}"
        if self.exception:
            return f"exception: {self.exception}"
        parts = []
        if self.hazards:
            h = self.hazards[0]
            more = f" (+{len(self.hazards) - 1} more)" if len(self.hazards) > 1 else ""
            parts.append(f"{h.kind} hazard{more}: {h.explanation}")
        if self.mismatch is not None:
            parts.append(f"{self.failures}/{self.reps} repetitions differ from the oracle: {self.mismatch.summary()}")
        if not parts:
            return f"0/{self.reps} failed (rate < {self.rate_upper95:.2g} at 95%)"
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """kind, rate_upper95 and summary are derived (for readers); from_json ignores them."""
        return {"kind": self.kind, "mode": self.mode, "reps": self.reps, "failures": self.failures,
                "rate_upper95": self.rate_upper95, "summary": self.summary(),
                "mismatch": self.mismatch.to_json() if self.mismatch else None,
                "hazards": [h.to_json() for h in self.hazards], "fault": self.fault,
                "exception": self.exception,
                **({"compile": self.compile} if self.compile else {}),
                **({"instrumented": self.instrumented} if self.instrumented else {}),
                **({"divergence": self.divergence} if self.divergence else {})}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "Verdict":
        """The inverse of to_json; hazards come back as SavedHazard.  Raises ValueError on a bad body."""
        try:
            kind = body.get("kind")
            if kind is not None and kind not in KINDS:
                raise ValueError(f"'kind' must be one of {', '.join(KINDS)} or null, got {kind!r}")
            mismatch = body.get("mismatch")
            counts = {k: body[k] for k in ("reps", "failures")}
            for name, value in counts.items():
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"{name!r} must be a non-negative integer, got {value!r}")
            if body["mode"] not in MODES:
                raise ValueError(f"'mode' must be one of {', '.join(MODES)}, got {body['mode']!r}")
            verdict = cls(**counts, mode=body["mode"],
                          mismatch=Mismatch.from_json(mismatch) if mismatch else None,
                          hazards=[SavedHazard(dict(h)) for h in body.get("hazards") or []],
                          fault=body.get("fault"), exception=body.get("exception"), compile=body.get("compile"),
                          fault_kind=kind if kind in FAULT_KINDS else "fault",
                          instrumented=body.get("instrumented") if isinstance(body.get("instrumented"), dict)
                          else None,
                          divergence=body.get("divergence") if isinstance(body.get("divergence"), str) else None)
        except KeyError as exc:
            raise ValueError(f"missing {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(str(exc)) from None
        if verdict.kind != kind and (kind, verdict.kind) != ("race", "oob"):  # before oob was a kind
            raise ValueError(f"'kind' is {kind!r} but its evidence says {verdict.kind!r}")
        return verdict


def _judge_exception(verdict: Verdict, exc: Exception, device: str) -> None:
    """Record a target's exception on `verdict`, or raise Inconclusive / InternalError."""
    cause = blame.root_cause(exc)
    hazard = getattr(cause, "hazard", None)
    if hazard is not None:  # the recorder's bounds fence stopped a wild access
        verdict.hazards.append(hazard)
    elif device == "cuda" and cuda_fault(cause):
        verdict.fault = f"{type(cause).__name__}: {cause}"
    else:
        who = blame.classify(exc)
        if who.who == blame.INTERPRETER:
            raise Inconclusive(who.message) from exc
        if who.who == blame.MAMBAFUZZ:
            raise InternalError(who.message, who.traceback) from exc
        if who.who == blame.COMPILE:
            verdict.compile = who.message
        else:
            verdict.exception = who.message
    verdict.reps += 1
    verdict.failures += 1


def _declined(exc: Exception) -> None:
    """Raise the target's Rejected (``mambafuzz.reject``) if `exc` is or wraps one: never judged."""
    declined = rejection(exc)
    if declined is not None:
        raise declined from None


def _run_once(m: Materialized, fn, recorder, amplifiable: bool | None = None,
              interpreted: bool = False) -> list[Any]:
    if recorder is None:
        if interpreted:  # unrecorded CPU repetitions: the recorder's interpreter adapters alone
            from mambafuzz.interp import adapters  # deferred: Triton's interpreter adapters: CPU runs only
            with adapters():
                m.run(fn, amplifiable)
        else:
            m.run(fn, amplifiable)
        return []
    with recorder as rec:
        for name, tensor in m.tensors().items():
            rec.add_region(name, tensor)
        m.run(fn, amplifiable)
    return list(rec.hazards)


def reps_verdict(m: Materialized, fn, reps: int, *, mode: str = "compare", amplifiable: bool | None = None,
                 graph: bool | None = None, deadline: Deadline = Deadline()) -> Verdict:
    """`reps` repetitions judged on the device (``gpu_reps.run_reps``: one sync per batch).

    failures = repetitions whose byte count was nonzero; the evidence is the
    ``compare()`` of a plain rerun of the case (see ``gpu_reps.failing_mismatch``).
    `graph` None reads MAMBAFUZZ_CUDA_GRAPH ("0" never, "1" always, unset auto).
    ``MAMBAFUZZ_HOST_REPS=1`` makes run_case skip this and judge every
    repetition on the host as before (timing between repetitions differs, and
    with it what a race shows).  Past `deadline` the batch
    stops launching repetitions (``gpu_reps.TimeBox``): the verdict counts the ones that ran.
    """
    from mambafuzz.judge.gpu_reps import failing_mismatch, graph_from_env, run_reps  # deferred: torch: the GPU batch only where repetitions are judged on the device

    verdict = Verdict(reps=0, failures=0, mode=mode)
    try:
        res = run_reps(m, fn, reps, graph=graph_from_env() if graph is None else graph,
                       amplifiable=amplifiable, deadline=deadline)
        verdict.reps, verdict.failures = res.reps, res.failures
        verdict.mismatch = failing_mismatch(m, fn, res, amplifiable=amplifiable, deadline=deadline)
    except Exception as exc:  # judged like any other target exception
        _declined(exc)
        _judge_exception(verdict, exc, "cuda")
    return verdict


def run_case(fn, case: Case, device: str, *, reps: int = 1, mode: str = "compare",
             amplifiable: bool | None = None, deadline: Deadline = Deadline(),
             compiled: Mismatch | None = None) -> Verdict:
    """Materialise `case`, run `fn` `reps` times from the snapshot, judge each run.

    `amplifiable` says whether `fn` takes ``perturb=`` (None: ``fn.amplifiable``).
    Past `deadline` (the target's share of ``--time``, or a part of it) no further
    repetition starts, the first always runs: a kernel slow enough to outlast a run's ``--time`` in a batch
    of repetitions then costs one repetition past it, not the batch.
    Raises CaseError (the case cannot be checked), Rejected (the target declined
    it: ``mambafuzz.reject``), Inconclusive or InternalError;
    any other exception outside the target's own call is mambafuzz's, made an
    InternalError here.  `compiled`: where a compiled run of this case differed from the oracle,
    with its values (a GPU finding's evidence); run interpreted, the first of those elements whose
    value differs becomes the verdict's ``divergence``: a fact about the interpreter, never a failure.
    """
    if mode not in MODES:
        raise ValueError(f"unknown check mode {mode!r}")
    try:
        return _run_case(fn, case, device, reps, mode, amplifiable, deadline, compiled)
    except (CaseError, Rejected, Inconclusive, InternalError):
        raise
    except Exception as exc:
        if type(exc).__name__ == "OutOfMemoryError" and os.environ.get(mps.SHARE_ENV):
            # several workers share the GPU (control.mps): the case is too big for this one's share; the
            # GPU's first worker, with half the memory, draws such cases too
            raise Rejected(f"too big for this worker's share of the GPU memory "
                           f"({float(os.environ[mps.SHARE_ENV]):.0%})") from exc
        if device == "cuda" and cuda_fault(exc) and mps.under_mps():
            # under MPS a neighbour's fault reaches every client of the GPU, here too: a fault, which the
            # session replays alone before it counts (run.confirm), never mambafuzz's own error
            return Verdict(reps=1, failures=1, mode=mode, fault=f"{type(exc).__name__}: {exc} (on a GPU shared "
                           "under MPS, outside the target's call)")
        raise InternalError.of("running the case", exc) from exc


def _run_case(fn, case: Case, device: str, reps: int, mode: str, amplifiable: bool | None,
              deadline: Deadline = Deadline(), compiled: Mismatch | None = None) -> Verdict:
    m = materialize(case, device)
    verdict = _judged(fn, m, device, reps, mode, amplifiable, deadline,
                      compiled if device == "cpu" else None)
    if m.instrumented is not None:  # a user kernel's launches were perturbed: say which, and which not
        verdict.instrumented = m.instrumented.to_json()
    return verdict


def divergence_line(values) -> str | None:
    """The first (where, compiled, interpreted) whose values differ, as the one line a report shows."""
    for where, theirs, ours in values:
        if theirs != ours:
            return (f"interpreted and compiled differ on this case: first at {where}: compiled {theirs}, "
                    f"interpreted {ours} (a fact about Triton's interpreter, not a finding)")
    return None


def _judged(fn, m: Materialized, device: str, reps: int, mode: str, amplifiable: bool | None,
            deadline: Deadline = Deadline(), compiled: Mismatch | None = None) -> Verdict:
    if device == "cuda" and reps > 1 and mode == "compare":
        from mambafuzz.judge.gpu_reps import device_reps_enabled  # deferred: torch: the GPU batch only where repetitions are judged on the device
        if device_reps_enabled() and m.device_judgeable:  # MAMBAFUZZ_HOST_REPS=1 keeps the host loop below
            return reps_verdict(m, fn, reps, mode=mode, amplifiable=amplifiable, deadline=deadline)
    verdict = Verdict(reps=0, failures=0, mode=mode)
    for rep in range(max(1, reps)):
        if rep and deadline.over():
            break
        recorder = None
        if device == "cpu" and rep == 0:  # on the CPU the recorder also fences off wild pointers
            from mambafuzz.racecheck import RaceRecorder  # deferred: the race recorder patches Triton's interpreter: CPU runs only
            recorder = RaceRecorder()
        if rep:
            m.restore()
        try:
            hazards = _run_once(m, fn, recorder, amplifiable, interpreted=device == "cpu")
            if device == "cuda":
                import torch  # deferred: torch takes seconds to import
                torch.cuda.synchronize()
        except Exception as exc:
            _declined(exc)
            _judge_exception(verdict, exc, device)
            if mode == "race" and recorder is not None and recorder.out_of_bounds is not None:
                # the fence stopped the kernel; races of the launches before it are evidence too
                verdict.hazards.extend(h for h in recorder.hazards if h.kind != OUT_OF_BOUNDS)
            return verdict
        if mode != "race":
            hazards = [h for h in hazards if h.kind == OUT_OF_BOUNDS]
        verdict.hazards.extend(hazards)
        verdict.reps += 1
        progressed()
        if rep == 0 and compiled is not None:
            verdict.divergence = divergence_line(m.values_at(compiled))
        if verdict.mismatch is None:  # where it differs, once; after that only whether (no host copies)
            verdict.mismatch = m.compare()
            verdict.failures += int(verdict.mismatch is not None)
        elif m.differs():
            verdict.failures += 1
    return verdict
