"""ssm_prefill, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to at
most two rows; the correct Triton kernel and the torch path clean under the same fuzzing, with the race
check on, under the default options and under vLLM's narrowing (block sizes a multiple of 16, prefix
caching on, pad 0)."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing
from mambafuzz.kernels import registry

ROWS = [e.id for e in registry.ZOO if e.contract == "ssm_prefill"]
VLLM = {"block_multiple": "16", "cache_mode": "all"}


def test_the_rows_are_the_bug_classes_of_chunked_scan_prefill():
    assert set(ROWS) == {"SP-CUMSUM-START", "SP-BOUNDARY", "SP-WRONGCHUNK", "SP-BF16CKPT", "SP-CKPTCHUNK",
                         "SP-NOINIT", "SP-SEQIDX", "SP-ZEROLEN", "SP-I32"}
    for zoo_id in ROWS:  # each names the bug it mirrors
        assert "#" in registry.zoo_entry(zoo_id).description, zoo_id


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    """Caught by a declared kind and cut to at most two rows within two seconds of shrinking (CI's budget)."""
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens, shrink_budget=2)


@pytest.mark.matrix
@pytest.mark.parametrize("name, examples", [("triton.ssm_prefill", 20), ("torch.ssm_prefill", 50)])
def test_correct_kernels_pass_the_same_fuzzing(name, examples, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, examples)


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_under_vllms_narrowing_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.ssm_prefill", tmp_path, 10, pad="0", **VLLM)
