"""The draws a slow zoo row needs are common under the amplified GPU profile (issue 44).

A row is slow from a fresh start when the case that exposes its bug is a rare
draw: on the H200 DU-STEPS took 2.9-11.9 s and SSM-TOKSTRIDE 0.8-13.2 s, each
about one gpu-amp case in 10 to 15.  Their strategies now put weight where the bug
class lives (a per-step buffer shorter than a sequence, with a row after the
long sequence's; non-adjacent index columns where a row reads or stores a
column >= 1).  Each test counts, over 600 seeded gpu-amp draws (no kernel, no
oracle), the cases with what the row needs; the floor sits between the old
frequency and the new one, so undoing a weight fails here.  The other side is
checked too: the cases a weight takes from (a buffer with enough steps,
adjacent columns) are still drawn.
"""
import functools

from hypothesis import HealthCheck, Phase, given, seed, settings

from mambafuzz import contracts, strategies
from mambafuzz.search.fuzz import CHUNK

DRAWS = 600  # 30 runs of fuzz.CHUNK: fewer leave the shares too noisy to tell a weight from none


@functools.lru_cache(maxsize=None)
def drawn(contract: str, profile: str = "gpu-amp", draws: int = DRAWS, options: tuple = ()) -> tuple:
    """`draws` seeded draws of `contract`'s strategy under `profile`, drawn as the fuzz loop draws them:
    Hypothesis runs of ``fuzz.CHUNK`` examples, each its own seed (a run's first examples are its simplest,
    so one long run draws another mix).  Kept: the tests of one contract share them."""
    cases = []
    strategy = contracts.strategy(contract, profile=strategies.PROFILES[profile], **dict(options))
    for chunk in range(-(-draws // CHUNK)):
        @seed(chunk)
        @settings(max_examples=CHUNK, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def keep(case):
            cases.append(case)

        keep()
    return tuple(cases)


def fraction(contract: str, predicate, profile: str = "gpu-amp", draws: int = DRAWS, **options) -> float:
    """The share of the draws (``drawn``) for which `predicate` holds."""
    cases = drawn(contract, profile, draws, tuple(sorted(options.items())))
    return sum(bool(predicate(c)) for c in cases) / max(1, len(cases))


def du_steps_exposed(case) -> bool:
    """A live sequence with more tokens than the buffer's steps, whose buffer row has a row after it: a kernel
    writing ``row * cache_steps + t`` past its steps lands in that row (DU-STEPS), not past the buffer."""
    if not case.inter_rows or case.inter_idx is None:
        return False
    return any(0 <= case.inter_idx[n] < case.inter_rows - 1 and tokens > case.cache_steps
               for n, tokens in enumerate(case.lens))


def tokstride_exposed(case) -> bool:
    """Non-adjacent index columns and a live row reading or storing column >= 1 (SSM-TOKSTRIDE)."""
    return contracts.get("ssm_update").features(case)["token_stride"] == "strided"


def test_du_steps_draw_is_common():
    # 600 draws: 10.7% before the weights, 11.3% with the spare row only, 17.7% with both
    assert fraction("delta_update", du_steps_exposed) >= 0.14


def test_du_buffer_with_enough_steps_still_drawn():
    enough = fraction("delta_update", lambda c: c.inter_rows and c.cache_steps >= max(c.lens, default=0))
    assert enough >= 0.08


def test_ssm_tokstride_draw_is_common():
    # 600 draws: 6.3% before the weights, 9.3% with spec rows varlen 3 in 4 only, 16% with both
    assert fraction("ssm_update", tokstride_exposed) >= 0.13


def test_ssm_adjacent_columns_still_drawn_where_they_matter():
    adjacent = fraction("ssm_update", lambda c: contracts.get("ssm_update").features(c)["token_stride"] == "adjacent")
    assert adjacent >= 0.03


def test_tokstride_feature_is_unused_without_late_columns():
    """The coverage feature says 'unused' where no row touches a column >= 1, whatever the stride."""
    spec = contracts.get("ssm_update")
    assert fraction("ssm_update", lambda c: spec.features(c)["token_stride"] != "unused", draws=200,
                    spec="never") == 0.0
