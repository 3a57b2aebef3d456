"""Pure-numpy reference oracle for kernels that move recurrent state (docs/contracts.md).

Every expectation is computed from an unmodified snapshot of the arena (a 1-D
``np.uint8`` array), never from a second implementation run in place.  This
package imports only numpy and the standard library.
"""
from .errors import IllPosedBatch, OracleError
from .memmove import check_batch, expect_batch, expect_memmove, find_batch_conflict
from .pools import ELEM_SIZES, LAYOUT_KINDS, PoolLayout
from .state_copy import apply_state_copy, expect_state_copies
from .align import AlignDecision, decide, expect_postprocess
from .slots import (SlotBuffer, SlotConflict, chained_pairs, check_slots, expect_slot_copy, expect_slot_fork,
                    find_slot_conflict)
from .state_scatter import IllPosedScatter, StepStates, check_state_scatter, expect_state_scatter, plan_state_scatter

__all__ = [
    "OracleError", "IllPosedBatch",
    "expect_memmove", "find_batch_conflict", "check_batch", "expect_batch",
    "LAYOUT_KINDS", "ELEM_SIZES", "PoolLayout",
    "apply_state_copy", "expect_state_copies",
    "AlignDecision", "decide", "expect_postprocess",
    "SlotBuffer", "SlotConflict", "chained_pairs", "check_slots", "expect_slot_copy", "expect_slot_fork",
    "find_slot_conflict",
    "IllPosedScatter", "StepStates", "check_state_scatter", "expect_state_scatter", "plan_state_scatter",
]
