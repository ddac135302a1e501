"""The allocator's poison reaches memory a call takes beyond the cache (GPU only)."""

import pytest
import torch

from kernelevo.evaluate.child import guards

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_headroom_is_poisoned_so_an_unwritten_output_is_not_zeros() -> None:
    """A fresh segment from the driver is zeros; with headroom the next allocation is NaN.

    KernelBench level-2 9's answer is all zeros: an output the candidate never
    wrote passed as the answer when it came from fresh pages.
    """
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # nothing cached: the next allocation would be fresh pages
    size = 48 << 20
    guards.poison_allocator("cuda", headroom=2 * size)
    unwritten = torch.empty(size // 4, dtype=torch.float32, device="cuda")
    assert torch.isnan(unwritten).all()
    del unwritten
    torch.cuda.empty_cache()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_poisoning_again_and_again_takes_no_more_memory() -> None:
    """Each call's poison reuses the room of the last: the cache does not grow per call."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    outputs = []
    for _ in range(3):  # a few calls' worth, as the checks make
        guards.poison_allocator("cuda", headroom=64 << 20)
        outputs.append(torch.empty(8 << 20, dtype=torch.uint8, device="cuda"))
        outputs.pop()
    reserved = torch.cuda.memory_reserved()
    for _ in range(10):
        guards.poison_allocator("cuda", headroom=64 << 20)
        output = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        del output
    assert torch.cuda.memory_reserved() == reserved
    torch.cuda.empty_cache()
