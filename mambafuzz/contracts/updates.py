"""What every update contract (docs/contracts.md#update-rules) shares: stored floats to float64 and back, distinct
finite values to fill slots with, pools of distinct values at the cost of one slot (``slot_values``), tensors on the
case's device for the kernel and the oracle, the pad and min-accepted options, and the one-row-fewer
shrink step."""
from __future__ import annotations

import dataclasses

import numpy as np

from mambafuzz.errors import UsageError

from .base import CliOption, Output

# A presence option: whether the cases carry an optional input (spec decode, varlen, a per-step buffer,
# z, ...): drawn per case (the default: everything is drawn), always, or never.
DRAWN, ALWAYS, NEVER = "drawn", "always", "never"
PRESENCE = (DRAWN, ALWAYS, NEVER)

# every update contract's CLI options: the engine's pad value (docs/contracts.md#pad), whether nacc can
# be 0, and what an engine's kernel may not take (defaults: everything is drawn)
PAD = CliOption("pad", ("-1", "0"), "-1", "the pad slot id your engine uses: -1 (SGLang, vLLM before "
                                           "2026-02) or 0 (vLLM's null block: slot 0 is never stored)")
MIN_ACCEPTED = CliOption("min_accepted", ("1", "0"), "1", "whether your engine can issue num_accepted_tokens = 0 "
                                                          "(0) or always at least 1")
SPEC = CliOption("spec", PRESENCE, DRAWN, "spec decode (num_accepted_tokens given): drawn per case, always, "
                                          "or never (a kernel without spec decode: SGLang's SSM and "
                                          "delta-rule update kernels)")
NONSPEC_TOKENS = CliOption("nonspec_tokens", ("any", "1"), "any",
                           "tokens per row without spec decode: any, or at most 1 (a decode-only kernel; vLLM's "
                           "delta rule stores token t's state to column t there)")
VARLEN = CliOption("varlen", PRESENCE, DRAWN, "varlen batches (tokens packed, query_start_loc or cu_seqlens "
                                              "given): drawn per case, always, or never (x is [B, ...]: "
                                              "SGLang's conv update)")
UPDATE_CLI_OPTIONS = (PAD, MIN_ACCEPTED, SPEC, NONSPEC_TOKENS)
RAW = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


def to_float64(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements (float32, float16, or bfloat16 as its uint16 bits) as float64."""
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def from_float64(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values that `dtype` holds exactly (copies of stored ones) back as stored elements."""
    if dtype == "bfloat16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(RAW[dtype])


def finite_values(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    """`n` normal values of unit size (so a wrong slot or column is a large error), stored as `dtype`."""
    values = rng.standard_normal(n).astype(np.float32)
    if dtype == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(RAW[dtype])


def stored_tensor(raw: np.ndarray, dtype: str, device):
    """Stored elements (bfloat16 as its uint16 bits) as a tensor of `dtype` on `device`."""
    import torch  # deferred: torch takes seconds to import

    t = torch.from_numpy(np.ascontiguousarray(raw).copy())
    return (t.view(torch.bfloat16) if dtype == "bfloat16" else t).to(device)


def oracle_input(values, device):
    """float64 values (numpy, or a tensor on `device`) as the oracle takes them there: numpy on the CPU
    (faster there than torch), a float64 tensor on a GPU, so that a 256-row batch is judged in
    milliseconds (``oracle/_xp.py``).  None stays None."""
    import torch  # deferred: torch takes seconds to import

    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.double()
        return values.numpy() if values.device.type == "cpu" else values
    values = np.ascontiguousarray(values, dtype=np.float64)
    return values if torch.device(device).type == "cpu" else torch.from_numpy(values).to(device)


def as_tensors(result, *fields: str):
    """`result` with its float arrays `fields` as torch tensors (numpy ones shared, not copied), so
    that the contract code after the oracle is the same on every device."""
    import torch  # deferred: torch takes seconds to import

    return dataclasses.replace(result, **{f: torch.from_numpy(getattr(result, f)) for f in fields
                                          if isinstance(getattr(result, f), np.ndarray)})


def as_stored(values, dtype: str):
    """float64 values a stored `dtype` holds exactly, as that dtype (bfloat16 as its int16 bits, as an
    exact ``Output`` compares it)."""
    import torch  # deferred: torch takes seconds to import

    t = values.to(getattr(torch, dtype))
    return t.view(torch.int16) if dtype == "bfloat16" else t


def slot_values(slots: int, inner: tuple[int, ...], draw, dtype: str, device):
    """A pool ``[slots, *inner]`` of `dtype` on `device`: one drawn tile plus a drawn offset per slot
    (``draw(n)``: n float32 values of unit size).  Every slot, head and element differs from every
    other, so a wrong one is an error of the values' own size, and drawing costs one slot, not the
    pool: a 256-row batch's pool is made on the GPU in microseconds.  The float32 sum and the cast
    round the same on every device."""
    import torch  # deferred: torch takes seconds to import

    tile = torch.from_numpy(draw(int(np.prod(inner)))).to(device).reshape(inner)
    offsets = torch.from_numpy(draw(slots)).to(device).reshape((slots,) + (1,) * len(inner))
    return (tile + offsets).to(getattr(torch, dtype))


def unchanged_inputs(args: dict, names: tuple[str, ...]) -> tuple[Output, ...]:
    """Every input among `names` must stay as it was, exactly: its value now, kept on its device
    (a bfloat16 one as its bits, as an exact ``Output`` compares it)."""
    import torch  # deferred: torch takes seconds to import

    out = []
    for name in names:
        t = args[name]
        if isinstance(t, torch.Tensor):
            keep = t.detach().clone()
            keep = keep.view(torch.int16) if keep.dtype == torch.bfloat16 else keep
            out.append(Output(name, keep, what=f"{name} (an input) element {{i}}"))
    return tuple(out)


def pad_option(contract: str, value) -> int:
    """The pad value P (docs/contracts.md#pad: -1 or 0) from an option's text; UsageError in one line otherwise."""
    pad = int(value) if str(value).lstrip("-").isdigit() else None
    if pad not in (-1, 0):
        raise UsageError(f"{contract} option pad must be -1 or 0, got {value!r}")
    return pad


def min_accepted_option(contract: str, value) -> int:
    """Whether the engine can issue nacc = 0 (0) or not (1), from an option's text."""
    got = int(value) if str(value).isdigit() else None
    if got not in (0, 1):
        raise UsageError(f"{contract} option min_accepted must be 0 or 1, got {value!r}")
    return got


def presence(contract: str, name: str, value) -> bool | None:
    """A presence option's value: None (drawn per case), True (always), False (never); UsageError in one
    line for anything else."""
    text = str(value)
    if text not in PRESENCE:
        raise UsageError(f"{contract} option {name} must be one of {', '.join(PRESENCE)}, got {value!r}")
    return None if text == DRAWN else text == ALWAYS


def one_of(contract: str, option: CliOption, value) -> str:
    """A choice option's value as text; UsageError in one line when it is not one of its choices."""
    text = str(value)
    if text not in option.choices:
        raise UsageError(f"{contract} option {option.name} must be one of {', '.join(option.choices)}, "
                         f"got {value!r}")
    return text


def allowed(value, wanted: bool | None) -> bool:
    """Whether a case whose input is present (`value`) fits a presence option (None: drawn, anything fits)."""
    return wanted is None or bool(value) == wanted


def presence_buckets(wanted: bool | None, absent: str = "no", present: str = "yes") -> tuple[str, ...]:
    """The coverage buckets a presence option leaves to draw."""
    return (absent, present) if wanted is None else (present,) if wanted else (absent,)


def nacc_buckets(spec: bool | None, min_accepted: int) -> tuple[str, ...]:
    """The nacc buckets a run draws reliably: 'none' without spec, counts with it (0 under min_accepted 0)."""
    counts = ("1", ">1") + (("0",) if min_accepted == 0 else ())
    return ("none",) if spec is False else counts if spec else ("none",) + counts


def rows_dropped(case, fields: tuple[str, ...]):
    """The cases with one row fewer (a shrink step): row i cut from each per-row field in `fields` (None
    stays None); none for a one-row case."""
    rows = len(getattr(case, fields[0]))
    if rows < 2:
        return
    for i in range(rows):
        cut = {f: None if getattr(case, f) is None else getattr(case, f)[:i] + getattr(case, f)[i + 1:]
               for f in fields}
        yield dataclasses.replace(case, **cut)
