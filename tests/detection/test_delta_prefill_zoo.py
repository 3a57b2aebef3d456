"""delta_prefill, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to at most
two sequences; the correct chunked Triton kernel and the torch path clean under the same fuzzing, race check on,
under the default options and under KDA with prefix caching and pad 0."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing
from mambafuzz.kernels import registry

ROWS = [e.id for e in registry.ZOO if e.contract == "delta_prefill"]


def test_the_rows_are_the_bug_classes_of_chunked_prefill():
    assert set(ROWS) == {"DP-KDALAYOUT", "DP-TAIL", "DP-NOFINAL", "DP-NOINIT", "DP-WRONGCHUNK", "DP-BF16CKPT",
                         "DP-ZEROLEN", "DP-I32"}
    for zoo_id in ROWS:  # each names the bug it mirrors
        assert "#" in registry.zoo_entry(zoo_id).description, zoo_id


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    """Caught by a declared kind and cut to at most two sequences within a few seconds of shrinking."""
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens, shrink_budget=10)


@pytest.mark.matrix
@pytest.mark.parametrize("name, examples", [("triton.delta_prefill", 12), ("torch.delta_prefill", 30)])
def test_correct_kernels_pass_the_same_fuzzing(name, examples, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, examples)


def test_the_int32_offset_row_needs_a_pool_past_2_gib():
    """DP-I32's bug shows only past 2^31 elements: the zoo deals it to a worker with room for one."""
    from mambafuzz.kernels.zoo import PAST_2GIB

    assert registry.zoo_entry("DP-I32").memory == PAST_2GIB
    assert all(registry.zoo_entry(z).memory == 0 for z in ROWS if z != "DP-I32")


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_under_prefix_caching_kda_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.delta_prefill", tmp_path, 5, pad="0", gate="kda", cache_mode="all")
