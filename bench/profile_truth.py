"""Our profile's achieved bandwidth and FLOP rate against an independent computation.

For each problem (the six examples, KernelBench problems with an honest
Triton candidate): the judge's verdict gives the profile (`achieved_gbps`,
`achieved_tflops`); independently, in this process, the candidate is timed
with `triton.testing.do_bench` and its bytes are summed from the real
tensors (inputs made by get_inputs on the GPU, the outputs of one eager
reference call, the reference's parameters and buffers), its FLOPs counted by
`torch.utils.flop_counter.FlopCounterMode` on the GPU (matmul-class tasks
only: elsewhere the rate compared is the bandwidth). Agreement is the ratio
of the two rates; the target is within 10 %. With `--ncu` Nsight Compute is
run on the top kernels of the first problems (or its exact reason for not).

    python bench/profile_truth.py --out DIR [--kb .kb] [--ncu 3] [--only softmax 19 ...]
    python bench/profile_truth.py --evolve --out DIR   # fake-LLM evolve: prompts show profiles
    python bench/profile_truth.py --dry-run   # CPU: every problem loads, bytes agree on meta
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

EXAMPLES = ("softmax", "gelu", "layernorm", "mse_loss", "row_sum", "gemm_bias_relu")
KB_PROBLEMS = ("19", "21", "22", "23", "25", "26", "36", "40", "47", "88", "1", "2", "100")
TOLERANCE = 0.10
# A task is matmul-class when these FLOPs dominate: its FLOP rate is compared too.
MATMUL_SHARE = 0.9


def problems(kb: Path | None, only: list[str]) -> list[dict[str, str]]:
    """(name, task spec, candidate file) of every problem to measure."""
    found = [{"name": name, "task": str(ROOT / "examples" / name / "task.py"),
              "candidate": str(ROOT / "examples" / name / "triton_candidate.py")}
             for name in EXAMPLES]
    manifest = tomllib.loads((ROOT / "bench/kernelbench/manifest.toml").read_text())
    honest = {entry["problem"]: entry["file"] for entry in manifest["candidate"]
              if entry["kind"] == "honest" and entry.get("backend", "triton") == "triton"}
    if kb is not None:
        for number in KB_PROBLEMS:
            problem = f"level1/{number}"
            if problem in honest:
                found.append({"name": problem, "task": f"kernelbench:{problem}",
                              "candidate": str(ROOT / "bench/kernelbench/candidates"
                                               / honest[problem])})
    return [p for p in found if not only or p["name"] in only
            or p["name"].split("/")[-1] in only]


def load(spec: str, kb: Path | None):
    from kernelevo.task import load_task

    return load_task(spec, str(kb) if kb else None)


def task_module(task, device: str):
    import tempfile

    from kernelevo.evaluate.shared import inputs as task_inputs

    folder = Path(tempfile.mkdtemp(prefix="profile-truth-"))
    return task_inputs.import_source(task.source, f"truth_{abs(hash(task.source))}", folder,
                                     task.folder)


def independent_cost(module, device: str) -> tuple[int, int]:
    """Bytes of the real tensors of one reference call and its FlopCounterMode FLOPs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kernelevo.evaluate.shared import inputs as task_inputs

    dtype = torch.float32
    model = task_inputs.build_model(module.Model, list(module.get_init_inputs()), device, dtype)
    values = task_inputs.make_inputs(module, 0, device, dtype)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        output = model(*values)
    outputs = output if isinstance(output, (tuple, list)) else [output]
    tensors = [v for v in [*values, *outputs] if isinstance(v, torch.Tensor)]
    if hasattr(model, "parameters"):
        tensors += list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors), int(counter.get_total_flops())


def do_bench_ms(module, candidate_path: str) -> float:
    """The candidate's median time by triton.testing.do_bench, in this process."""
    import tempfile

    import torch
    import triton.testing

    from kernelevo.evaluate.shared import inputs as task_inputs

    folder = Path(tempfile.mkdtemp(prefix="profile-truth-candidate-"))
    candidate = task_inputs.import_source(Path(candidate_path).read_text(),
                                          f"cand_{abs(hash(candidate_path))}", folder)
    model = task_inputs.build_model(candidate.ModelNew, list(module.get_init_inputs()), "cuda",
                                    torch.float32)
    values = task_inputs.make_inputs(module, 0, "cuda", torch.float32)
    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: model(*values), return_mode="median"))


def judged_profile(task, candidate_path: str) -> dict:
    """The verdict's profile from our judge, as a dict (or why there is none)."""
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge

    verdict = Judge(task, EvalConfig(device="cuda")).evaluate(load_candidate(candidate_path))
    if verdict.profile is None:
        return {"error": f"{verdict.status} ({verdict.reason}): {verdict.message[-600:]}"}
    return verdict.profile.to_dict()


def agreement(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, or None when either is missing."""
    return ours / theirs if ours and theirs else None


def measure_one(problem: dict[str, str], kb: Path | None) -> dict:
    """One row: our rates, the independent ones and their ratios."""
    task = load(problem["task"], kb)
    module = task_module(task, "cuda")
    row = {"problem": problem["name"], "candidate": Path(problem["candidate"]).name}
    started = time.perf_counter()
    profile = judged_profile(task, problem["candidate"])
    row["judge_s"] = round(time.perf_counter() - started, 2)
    position = profile.get("roofline") or {}
    bytes_moved, flops = independent_cost(module, "cuda")
    ms = do_bench_ms(module, problem["candidate"])
    row.update(ours_gbps=position.get("achieved_gbps"), ours_tflops=position.get("achieved_tflops"),
               ours_ms=position.get("time_ms"), do_bench_ms=ms, bytes=bytes_moved, flops=flops,
               indep_gbps=bytes_moved / ms / 1e6, indep_tflops=flops / ms / 1e9,
               diagnosis=profile.get("diagnosis", ""), error=profile.get("error", ""),
               kernels=[k["name"] for k in (profile.get("breakdown") or {}).get("kernels", [])][:3])
    row["gbps_ratio"] = agreement(row["ours_gbps"], row["indep_gbps"])
    cost = profile.get("cost") or {}
    matmul, total = cost.get("matmul_flops", 0), cost.get("matmul_flops", 0) + cost.get(
        "other_flops", 0)
    if flops and total and matmul >= MATMUL_SHARE * total and row["ours_ms"]:
        row["tflops_ratio"] = agreement(matmul / row["ours_ms"] / 1e9, row["indep_tflops"])
    row["within"] = all(abs(r - 1) <= TOLERANCE for r in
                        (row.get("gbps_ratio"), row.get("tflops_ratio")) if r is not None) \
        and row.get("gbps_ratio") is not None
    return row


def ncu_rows(rows: list[dict], selected: list[dict[str, str]], kb: Path | None,
             count: int) -> list[dict]:
    """Nsight Compute on the top kernels of the first `count` measured problems."""
    from kernelevo.evaluate.parent.ncu import measure

    found = []
    for problem, row in list(zip(selected, rows))[:count]:
        task = load(problem["task"], kb)
        run = measure(row.get("kernels", [])[:1], task.path, problem["candidate"], "fp32")
        found.append({"problem": problem["name"], "problem_text": run.problem,
                      "kernels": [{"name": k.name, "metrics": k.metrics, "stalls": k.stalls}
                                  for k in run.kernels]})
    return found


def markdown(rows: list[dict]) -> str:
    lines = ["| problem | ours GB/s | do_bench GB/s | ratio | ours TFLOP/s | indep. TFLOP/s | "
             "ratio | within 10 % | diagnosis |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| {problem} | {a} | {b} | {c} | {d} | {e} | {f} | {w} | {diag} |".format(
            problem=row["problem"], a=_num(row.get("ours_gbps")), b=_num(row.get("indep_gbps")),
            c=_num(row.get("gbps_ratio"), 3), d=_num(row.get("ours_tflops"), 2),
            e=_num(row.get("indep_tflops"), 2), f=_num(row.get("tflops_ratio"), 3),
            w="yes" if row.get("within") else "NO", diag=row.get("diagnosis") or row.get("error")))
    return "\n".join(lines)


def _num(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def evolve_check(out: Path, candidates: int = 2) -> dict:
    """A scripted fake-LLM evolve on softmax; did every captured prompt show its parent's profile?"""
    import os
    import subprocess

    sys.path.insert(0, str(ROOT))
    from tests.fakes import FakeOpenAIServer

    from kernelevo.store.run_store import RunStore

    seed = ROOT / "examples/softmax/triton_candidate.py"
    answer = f"A variant.\n\n```python\n{seed.read_text()}\n```\n"
    runs = out / "evolve_runs"
    config = out / "evolve.toml"  # no tuner variants: every candidate comes from a prompt
    config.write_text("[search]\ntuner_variants = 0\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with FakeOpenAIServer(default=answer) as server:
        done = subprocess.run(
            [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(ROOT / "examples/softmax/task.py"),
             "--seed", str(seed), "--model", "fake-model", "--base-url", server.base_url,
             "--candidates", str(candidates), "--runs-dir", str(runs), "--llm-in-flight", "1",
             "--config", str(config)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        bodies = [r.body for r in server.requests if r.body]
    prompts = [m["content"] for body in bodies for m in body["messages"] if m["role"] == "user"]
    with_profile = [p for p in prompts if "profile (where the time goes" in p]
    sections = [p.split("profile (where the time goes", 1)[1].split("\n\n", 1)[0]
                for p in with_profile]
    stored = []
    for database in runs.glob("*/run.db"):
        with RunStore.open(database) as store:
            stored = [c.verdict.profile.diagnosis for c in store.candidates()
                      if c.verdict and c.verdict.profile]
    result = {"returncode": done.returncode, "prompts": len(prompts),
              "prompts_with_profile": len(with_profile), "sections": sections[:3],
              "stored_diagnoses": stored, "stderr_tail": done.stderr[-1500:]}
    (out / "evolve_prompts.json").write_text(json.dumps(result, indent=1))
    return result


def _free_gpu_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def dry_run(selected: list[dict[str, str]], kb: Path | None) -> int:
    """On CPU: every task and candidate loads, and the analytic bytes equal the meta tensors'."""
    import torch

    from kernelevo.evaluate.analysis.cost import task_cost

    bad = 0
    for problem in selected:
        task = load(problem["task"], kb)
        module = task_module(task, "meta")
        assert Path(problem["candidate"]).is_file(), problem["candidate"]
        cost = task_cost(module, torch.float32)
        independent, flops = independent_cost(module, "meta")
        same = independent == cost.bytes_moved and flops == cost.matmul_flops
        bad += not same
        print(f"{problem['name']:>16}: bytes {cost.bytes_moved:,} (tensors: {independent:,}), "
              f"matmul FLOPs {cost.matmul_flops:,} (FlopCounterMode: {flops:,}) "
              f"{'ok' if same else 'DIFFER'}")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/profile_truth"))
    parser.add_argument("--kb", type=Path, default=None, help="KernelBench copy (.kb)")
    parser.add_argument("--ncu", type=int, default=3, help="problems to run Nsight Compute on")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--dry-run", action="store_true", help="CPU check, no GPU needed")
    parser.add_argument("--evolve", action="store_true", help="only the fake-LLM evolve check")
    args = parser.parse_args()
    selected = problems(args.kb, args.only)
    if args.dry_run:
        return dry_run(selected, args.kb)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.evolve:
        result = evolve_check(args.out)
        print(json.dumps({k: v for k, v in result.items() if k != "stderr_tail"}, indent=1))
        return 0 if result["prompts"] and result["prompts"] == result["prompts_with_profile"] else 1
    rows = []
    for problem in selected:
        try:
            rows.append(measure_one(problem, args.kb))
        except Exception as exc:  # one broken problem is a row, never the end of the run
            rows.append({"problem": problem["name"], "error": f"{type(exc).__name__}: {exc}"[-800:]})
        print(json.dumps(rows[-1], default=str), flush=True)
        _free_gpu_memory()  # this process's cached blocks must not crowd the next judge out
    ncu = ncu_rows(rows, selected, args.kb, args.ncu) if args.ncu else []
    result = {"rows": rows, "ncu": ncu, "tolerance": TOLERANCE,
              "within": sum(bool(r.get("within")) for r in rows), "problems": len(rows)}
    (args.out / "profile_truth.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "profile_truth.md").write_text(markdown(rows) + "\n")
    print(markdown(rows))
    print(f"within {TOLERANCE:.0%}: {result['within']} of {result['problems']}")
    for item in ncu:
        print("ncu", item["problem"], item["problem_text"] or item["kernels"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
