"""How often the kink rule turns away an honest GEMM + ReLU backward, with and without the
reference's runs on moved inputs.

    python bench/kink_rate.py [--size 897 7169 7169] [--trials 5] [--sets 3] [--device cpu]
                              --out DIR

KernelBench level-2 task 76 (x @ W^T + bias, then ReLU) as its Model builds
it, judged as the oracle judges it: for each trial a fresh model and
`--sets` input sets; on each set the reference's gradients, the oracle's
float64 check and its runs on inputs moved as far as its own error allows
(evaluate/child/oracle_backward.py, the functions it calls), and a
candidate that sums the GEMMs' inner dimension in chunks of 32, as a tiled
kernel does, in fp32 (an honest kernel, another summation order). Per
trial: the mask elements each side flipped against float64, and the
verdict of every gradient by the kink rule (decide_backward.within_own_error)
with the reference's own error from its float64 check alone (the rule
before the moved runs) and with them.

At the re-check's size (897 x 7169 x 7169) an H100 judged the honest
kernel `shape_specialised`: well under one flip a set, so whether the
reference's float64 check showed one was chance. Writes DIR/kink_rate.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kernelevo.config import EvalConfig  # noqa: E402
from kernelevo.evaluate.analysis.decide_backward import within_own_error  # noqa: E402
from kernelevo.evaluate.analysis.reference import OwnError  # noqa: E402
from kernelevo.evaluate.analysis.tolerance import compare_tensor  # noqa: E402
from kernelevo.evaluate.child import oracle_backward  # noqa: E402
from kernelevo.evaluate.shared import inputs as task_inputs  # noqa: E402
from kernelevo.evaluate.shared.gradients import forward_backward  # noqa: E402

CHUNK = 32  # the candidate's tile of the inner dimension
TOLERANCE = (1e-4, 1e-4)  # fp32's defaults; the task sets none


class Model(torch.nn.Module):
    """KernelBench level 2, task 76: Gemm_Add_ReLU."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.gemm = torch.nn.Linear(in_features, out_features, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gemm(x) + self.bias)


def _tiled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the inner dimension summed chunk by chunk, in a's dtype."""
    total = torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    for start in range(0, a.shape[1], CHUNK):
        total += a[:, start:start + CHUNK] @ b[start:start + CHUNK]
    return total


class _TiledLinearReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[no-untyped-def]
        z = _tiled(x, weight.t()) + bias
        ctx.save_for_backward(x, weight, z)
        return z.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        x, weight, z = ctx.saved_tensors
        masked = grad * (z > 0)
        return _tiled(masked, weight), _tiled(masked.t().contiguous(), x), masked.sum(0)


class Candidate(torch.nn.Module):
    def __init__(self, model: Model) -> None:
        super().__init__()
        self.gemm = torch.nn.Linear(1, 1, bias=False)
        self.gemm.weight = torch.nn.Parameter(model.gemm.weight.detach().clone())
        self.bias = torch.nn.Parameter(model.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _TiledLinearReLU.apply(x, self.gemm.weight, self.bias)


def _flips(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Pre-activations on the other side of zero from float64's."""
    weight, bias = model.gemm.weight, model.bias
    with torch.no_grad():
        ours = (_tiled(x, weight.t()) if isinstance(model, Candidate) else x @ weight.t()) + bias
        wide = x.double() @ weight.double().t() + bias.double()
    return int(((ours > 0) != (wide > 0)).sum())


def _own(checks: list[oracle_backward.Float64Check], count: int) -> list[OwnError | None]:
    errors = oracle_backward.OwnErrors(count)
    for check in checks:
        errors.add(check)
    report = errors.report()
    return [None if l2 is None else OwnError(l2, share, failed) for l2, share, failed in
            zip(report["grad_float64_l2"], report["grad_float64_mismatch"],
                report["grad_float64_failed"])]


def trial(number: int, size: tuple[int, int, int], sets: int, device: str) -> dict:
    batch, inner, outer = size
    torch.manual_seed(1000 + number)
    model = Model(inner, outer).to(device)
    candidate = Candidate(model).to(device)
    module = SimpleNamespace(get_inputs=lambda: [torch.rand(batch, inner)])
    run = EvalConfig()
    float64_checks, moved_checks, flips, compared = [], [], [], []
    for index in range(sets):
        seed = 7919 * number + index
        inputs = task_inputs.make_inputs(module, seed, device, torch.float32)
        reference = forward_backward(model, inputs, seed)
        mine = forward_backward(candidate, inputs, seed)
        check = oracle_backward.float64_check(model, module, seed, device, torch.float32, None,
                                              reference, None, None, run)
        float64_checks.append(check)
        moved_checks += oracle_backward.perturbed_checks(
            model, module, seed, device, torch.float32, None, reference, check.forward_error,
            None, None, run)
        flips.append({"reference": _flips(model, inputs[0]),
                      "candidate": _flips(candidate, inputs[0])})
        compared.append([compare_tensor(g, r, *TOLERANCE) for g, r in
                         zip(mine.gradients, reference.gradients)])
    count = len(compared[0])
    rules = {"float64 alone": _own(float64_checks, count),
             "with moved runs": _own(float64_checks + moved_checks, count)}
    verdicts = {}
    for name, own in rules.items():
        passed = True
        for per_set in compared:
            for position, outcome in enumerate(per_set):
                if outcome.reason is None:
                    continue
                allowed = (outcome.reason == "output_mismatch" and outcome.metrics is not None
                           and own[position] is not None
                           and within_own_error(outcome.metrics, own[position]))
                passed = passed and allowed
        verdicts[name] = "passed" if passed else "gradient_mismatch"
    return {"trial": number, "flips": flips, "verdicts": verdicts,
            "own": {name: [None if e is None else [e.rel_l2_error, e.mismatch_fraction, e.inexact]
                           for e in own] for name, own in rules.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=3, default=(897, 7169, 7169),
                        metavar=("BATCH", "IN", "OUT"))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    task_inputs.set_reference_precision()
    rows = []
    for number in range(args.trials):
        started = time.perf_counter()
        row = trial(number, tuple(args.size), args.sets, args.device)
        rows.append(row)
        print(f"trial {number}: flips (reference, candidate) per set "
              f"{[(f['reference'], f['candidate']) for f in row['flips']]}; "
              + "; ".join(f"{name}: {verdict}" for name, verdict in row["verdicts"].items())
              + f" ({time.perf_counter() - started:.0f} s)", flush=True)
    summary = {name: sum(r["verdicts"][name] == "passed" for r in rows)
               for name in rows[0]["verdicts"]} if rows else {}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kink_rate.json").write_text(json.dumps(
        {"size": args.size, "sets": args.sets, "device": args.device, "trials": rows,
         "passed": summary}, indent=1))
    print("honest kernel passed, of", len(rows), "trials:",
          ", ".join(f"{name} {count}" for name, count in summary.items()))


if __name__ == "__main__":
    main()
