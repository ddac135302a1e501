import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096
# Upper bound on stage-1 programs: enough to fill every SM of a large GPU
# several times over, and few enough for stage 2 to sum in one block.
MAX_PARTIALS = 2048


@triton.jit
def _sq_diff_partial_kernel(p_ptr, t_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    # Each program strides over the tiles; the partial sums are written to
    # their own slots (no atomics), so the result is bit-for-bit reproducible.
    for tile in range(pid, tl.cdiv(n_elements, BLOCK), n_progs):
        offs = tl.cast(tile, tl.int64) * BLOCK + lanes
        mask = offs < n_elements
        p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        d = p - t
        acc += d * d
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _mean_of_partials_kernel(partial_ptr, out_ptr, n_partials, n_elements,
                             BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    parts = tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
    mean = tl.sum(parts, axis=0) / n_elements
    tl.store(out_ptr, mean.to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p = predictions.contiguous()
        t = targets.contiguous()
        n = p.numel()
        n_partials = min(triton.cdiv(n, BLOCK), MAX_PARTIALS)
        partials = torch.empty((n_partials,), dtype=torch.float32, device=p.device)
        out = torch.empty((), dtype=p.dtype, device=p.device)
        _sq_diff_partial_kernel[(n_partials,)](p, t, partials, n, BLOCK=BLOCK, num_warps=8)
        _mean_of_partials_kernel[(1,)](
            partials, out, n_partials, n, BLOCK=triton.next_power_of_2(n_partials), num_warps=4
        )
        return out
