"""conv_prefill, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to at
most two rows; the correct Triton kernel and the torch path clean under the same fuzzing, with the race
check on, under the default options and under vLLM's narrowing (W <= 4, dim-contiguous pools, block
sizes a multiple of 8, prefix caching on)."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing
from mambafuzz.kernels import registry

ROWS = [e.id for e in registry.ZOO if e.contract == "conv_prefill"]
VLLM = {"max_width": "4", "conv_layout": "dim", "block_multiple": "8", "cache_mode": "all"}


def test_the_rows_are_the_bug_classes_of_prefix_caching_prefill():
    assert set(ROWS) == {"CP-SHORTSTORE", "CP-NOINIT", "CP-ROWSTRIDE", "CP-BOUNDARYX", "CP-PADSTORE", "CP-I32"}
    for zoo_id in ROWS:  # each names the bug it mirrors
        description = registry.zoo_entry(zoo_id).description
        assert "#" in description or "suspected" in description, description


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    """Caught by a declared kind and cut to at most two rows within a few seconds of shrinking (the CI's
    budget: shrinking to the end takes up to 40 s a row here)."""
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens, shrink_budget=4)


@pytest.mark.matrix
@pytest.mark.parametrize("name", ["triton.conv_prefill", "torch.conv_prefill"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, 60)


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_under_vllms_narrowing_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.conv_prefill", tmp_path, 25, pad="0", **VLLM)
