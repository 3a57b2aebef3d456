"""Every zoo row's declared verdict kinds, in one table: what counts as catching the row on the CPU (the
race check, the bounds fence, the oracle) and on a GPU.  A kind added to a row widens what "caught" means
(a row whose bug shows as the launcher raising would pass as caught), so a change of kinds is a reviewed
change of this table, not of a row's own file."""
from mambafuzz.kernels import registry

# id: (contract, CPU kinds, GPU kinds), each kind list sorted
KINDS = {
    "BM-NOGUARD":     ("batch_memcpy",  "race",              "mismatch"),
    "BM-RIGHT":       ("batch_memcpy",  "mismatch race",     "mismatch"),
    "SD-SPAN":        ("state_copy",    "race",              "mismatch"),
    "DS-ROW":         ("state_copy",    "race",              "mismatch"),
    "DS-CONTIG":      ("state_copy",    "mismatch",          "mismatch"),
    "ADDR-I32":       ("state_copy",    "mismatch oob",      "fault mismatch"),
    "TAIL-DROP":      ("batch_memcpy",  "mismatch",          "mismatch"),
    "MISALIGN":       ("batch_memcpy",  "race",              "fault"),
    "TILE-GAP":       ("state_copy",    "mismatch",          "mismatch"),
    "NOOP-SKIP":      ("postprocess",   "mismatch",          "mismatch"),
    "PP-INPLACE":     ("postprocess",   "race",              "mismatch"),
    "PAD-CLOBBER":    ("state_copy",    "mismatch",          "mismatch"),
    "SLOT-CHAIN":     ("slot_copy",     "race",              "mismatch"),
    "FORK-CHAIN":     ("slot_fork",     "race",              "mismatch"),
    "SLOT-I32":       ("slot_copy",     "mismatch oob",      "fault mismatch"),
    "SLOT-FLAT":      ("slot_copy",     "mismatch",          "mismatch"),
    "SLOT-PAD":       ("slot_copy",     "mismatch oob",      "fault mismatch"),
    "CU-NOCLAMP":     ("conv_update",   "mismatch oob race", "fault mismatch"),
    "CU-DSTPAD":      ("conv_update",   "mismatch oob race", "fault mismatch"),
    "CU-PAD0":        ("conv_update",   "mismatch oob race", "mismatch"),
    "CU-NARROW":      ("conv_update",   "mismatch",          "mismatch"),
    "CU-COL0":        ("conv_update",   "mismatch",          "mismatch"),
    "CU-ROWSTRIDE":   ("conv_update",   "mismatch oob race", "fault mismatch"),
    "CU-I32":         ("conv_update",   "mismatch oob race", "fault mismatch"),
    "DU-TRANSPOSE":   ("delta_update",  "mismatch",          "mismatch"),
    "DU-STEPS":       ("delta_update",  "mismatch oob race", "fault mismatch"),
    "DU-PADSTORE":    ("delta_update",  "mismatch oob race", "fault mismatch"),
    "SSM-NOCLAMP":    ("ssm_update",    "mismatch oob",      "fault mismatch"),
    "SSM-DSTPAD":     ("ssm_update",    "mismatch oob",      "fault mismatch"),
    "SSM-TOKSTRIDE":  ("ssm_update",    "mismatch oob",      "fault mismatch"),
    "SSM-I32":        ("ssm_update",    "mismatch oob",      "fault mismatch"),
    "SS-WW":          ("state_scatter", "mismatch race",     "mismatch"),
    "SS-FREED0":      ("state_scatter", "mismatch race",     "mismatch"),
    "SS-I32":         ("state_scatter", "mismatch oob race", "fault mismatch"),
    "CP-SHORTSTORE":  ("conv_prefill",  "mismatch",          "mismatch"),
    "CP-NOINIT":      ("conv_prefill",  "mismatch",          "mismatch"),
    "CP-ROWSTRIDE":   ("conv_prefill",  "mismatch oob race", "fault mismatch"),
    "CP-BOUNDARYX":   ("conv_prefill",  "mismatch",          "mismatch"),
    "CP-PADSTORE":    ("conv_prefill",  "mismatch oob race", "fault mismatch"),
    "CP-I32":         ("conv_prefill",  "mismatch oob race", "fault mismatch"),
    "SP-CUMSUM-START": ("ssm_prefill",  "mismatch",          "mismatch"),
    "SP-BOUNDARY":    ("ssm_prefill",   "mismatch",          "mismatch"),
    "SP-WRONGCHUNK":  ("ssm_prefill",   "mismatch",          "mismatch"),
    "SP-BF16CKPT":    ("ssm_prefill",   "mismatch",          "mismatch"),
    "SP-CKPTCHUNK":   ("ssm_prefill",   "mismatch oob",      "fault mismatch"),
    "SP-NOINIT":      ("ssm_prefill",   "mismatch",          "mismatch"),
    "SP-SEQIDX":      ("ssm_prefill",   "mismatch",          "mismatch"),
    "SP-ZEROLEN":     ("ssm_prefill",   "mismatch oob",      "fault mismatch"),
    "SP-I32":         ("ssm_prefill",   "mismatch oob",      "fault mismatch"),
    "DP-KDALAYOUT":   ("delta_prefill", "mismatch race",     "mismatch"),
    "DP-TAIL":        ("delta_prefill", "mismatch",          "mismatch"),
    "DP-NOFINAL":     ("delta_prefill", "mismatch",          "mismatch"),
    "DP-NOINIT":      ("delta_prefill", "mismatch",          "mismatch"),
    "DP-WRONGCHUNK":  ("delta_prefill", "mismatch",          "mismatch"),
    "DP-BF16CKPT":    ("delta_prefill", "mismatch",          "mismatch"),
    "DP-ZEROLEN":     ("delta_prefill", "mismatch oob race", "fault mismatch"),
    "DP-I32":         ("delta_prefill", "mismatch oob race", "fault mismatch"),
}


def test_every_zoo_rows_kinds_are_the_tables():
    declared = {e.id: (e.contract, " ".join(sorted(e.cpu)), " ".join(sorted(e.gpu))) for e in registry.ZOO}
    assert declared == KINDS


def test_the_kinds_are_verdict_kinds():
    from mambafuzz.judge.engine import KINDS as VERDICTS

    for row, (_, cpu, gpu) in KINDS.items():
        assert cpu and gpu and set(cpu.split()) | set(gpu.split()) <= set(VERDICTS), row
