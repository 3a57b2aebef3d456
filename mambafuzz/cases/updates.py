"""What the update contracts' cases share (docs/contracts.md#update-rules): one arena, a pool of ``slots`` slots
of a float ``dtype`` (``FLOAT_DTYPES``), rows of ``lens`` tokens, index tables (``INDEX_FIELDS``: slot numbers,
the pad value ``pad`` meaning none), spec decode's ``nacc``; the pools that live in the arena start at byte
``offset``, slots ``slot_stride`` bytes apart.

``UpdateCase`` holds those fields' checks and the properties every update case derives from them (``elem``,
``cols``).  A case type is a frozen dataclass on it that declares its fields (their order is its JSON's and
stays its own), ``FIELD_CHECKS`` for the fields that are its own or that it checks differently (entries
merge along the class hierarchy, the subclass's winning), ``INDEX_FIELDS`` when its tables are not ``idx``,
``size`` and ``describe``.
"""
from __future__ import annotations

from typing import ClassVar

from mambafuzz.cases import (FLOAT_DTYPES, INT32, TOKENS, UPDATE_PADS, CaseBase, boolean, check_int,
                                       check_int_list, index_table, one_of, optional_int_list)


class UpdateCase(CaseBase):
    """The fields update cases share, checked the same way; ``elem`` and ``cols``."""

    # the fields that hold index tables ([rows][C] slot numbers; None where optional), the first one always given
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("idx",)
    FIELD_CHECKS: ClassVar[dict] = {
        "arena_size": lambda v: check_int("arena_size", v, 1),
        "dtype": one_of("dtype", tuple(FLOAT_DTYPES)),
        "offset": lambda v: check_int("offset", v, 0),
        "slots": lambda v: check_int("slots", v, 1),
        "slot_stride": lambda v: check_int("slot_stride", v, 1),
        "lens": lambda v: check_int_list("lens", v, 0, high=TOKENS),
        "idx": index_table("idx", "B"),
        "idx_2d": boolean("idx_2d"),
        "idx_stride": lambda v: check_int("idx_stride", v, 1, TOKENS),
        "nacc": optional_int_list("nacc", 0, INT32 - 1),
        "pad": one_of("pad", UPDATE_PADS),
    }

    @property
    def elem(self) -> int:
        """Bytes of one stored element."""
        return FLOAT_DTYPES[self.dtype]

    @property
    def cols(self) -> int:
        """Columns of the index tables."""
        table = getattr(self, self.INDEX_FIELDS[0])
        return len(table[0]) if table else 1
