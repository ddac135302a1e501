"""A model's report: hot spots, which got kernels, per-kernel and end-to-end gains.

Written as model_report.json (everything) and model_report.md (the same as
tables, for a terminal, a pull request or a notebook).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

JSON_NAME = "model_report.json"
MARKDOWN_NAME = "model_report.md"


def report_data(profile: dict[str, Any] | None, applied: dict[str, Any] | None,
                verification: dict[str, Any] | None,
                kernels: dict[str, dict[str, Any]] | None = None,
                passed_over: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One dict: the profile, the swaps, the per-task search results and the verification.

    `passed_over` lists hot groups `optimize` did not extract, each with why.
    """
    return {"profile": profile, "applied": applied, "kernels": kernels or {},
            "passed_over": passed_over or [], "verification": verification}


def write_report(out_dir: str | Path, data: dict[str, Any]) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / JSON_NAME, out / MARKDOWN_NAME
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    md_path.write_text(report_markdown(data))
    return json_path, md_path


def report_markdown(data: dict[str, Any]) -> str:
    parts = ["# Model report\n"]
    if data.get("profile"):
        parts.append(_profile_section(data["profile"]))
    if data.get("applied"):
        parts.append(_applied_section(data["applied"], data.get("kernels") or {},
                                      data.get("passed_over") or []))
    if data.get("verification"):
        parts.append(_verification_section(data["verification"]))
    return "\n".join(parts)


def _table(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def _profile_section(profile: dict[str, Any]) -> str:
    unit = "GPU ms" if profile["activity"] == "cuda" else "CPU ms"
    rows = [["module", "type", unit, "share", "calls"]]
    for stat in profile["modules"][:12]:
        rows.append([stat["path"], stat["type_name"], f"{stat['time_ms']:.3f}",
                     f"{stat['share']:.1%}", str(stat["calls_per_forward"])])
    return (f"## Hot spots ({profile['activity'].upper()} time, {profile['device']}, "
            f"{profile['precision']}; forward {profile['total_ms']:.3f} ms)\n\n" + _table(rows))


def _applied_section(applied: dict[str, Any], kernels: dict[str, dict[str, Any]],
                     passed_over: list[dict[str, Any]]) -> str:
    rows = [["module", "task", "kernel", "checked at", "max abs error", "task speedup"]]
    for swap in applied["swapped"]:
        gain = kernels.get(swap["task"], {}).get("speedup_vs_eager")
        # A training task's kernel runs its own backward too; others the original's.
        kernel = Path(swap["kernel_file"]).name + (" (and its backward)" if swap.get("training")
                                                   else "")
        rows.append([swap["path"], swap["task"], kernel,
                     " ".join(str(tuple(s)) for s in swap["verified"]),
                     f"{swap['max_abs_error']:.2e}", f"{gain:.2f}x" if gain else "-"])
    for skip in applied["skipped"]:
        rows.append([skip["path"], skip["task"], "none", skip["reason"], "-", "-"])
    for spot in passed_over:
        rows.append([", ".join(spot["paths"]), spot["name"], "none",
                     "not extracted: " + spot["reason"], "-", "-"])
    return "## Kernels\n\n" + _table(rows)


def _verification_section(v: dict[str, Any]) -> str:
    # Training is checked only once the outputs matched; its failure has a line of its own.
    outputs_ok = v["correct"] or v.get("training") is not None
    outputs_message = "" if v.get("training") is not None else v["message"]
    lines = [f"## End to end ({v['clock']} times, torch.compile backend "
             f"{v['compile_backend']})\n",
             f"- outputs: {'match' if outputs_ok else 'DIFFER'} on {v['sets']} fresh input "
             f"sets (max abs error {v['max_abs_error']:.2e}) {outputs_message}".rstrip(),
             f"- graph breaks under torch.compile: {v['graph_breaks']}; kernel ops in the "
             f"graphs: {v['kernel_ops_in_graph']}", _mode_line(v)]
    if v.get("training"):
        lines.append(_training_line(v["training"]))
    rows = [["contestant", "median ms", "IQR ms", "samples"]]
    for name, stats in v["timings"].items():
        rows.append([name, f"{stats['median_ms']:.4f}", f"{stats['iqr_ms']:.4f}",
                     str(stats["samples"])])
    for mode in ("eager", "compile"):
        value = v.get(f"speedup_{mode}")
        if value:
            lines.append(f"- speedup, {mode}: {value:.3f}x (median over median)")
    lines += [f"- note: {note}" for note in v.get("notes", ())]
    return "\n".join(lines) + "\n\n" + (_table(rows) if v["timings"] else "")


def _mode_line(v: dict[str, Any]) -> str:
    if v.get("mode") == "training":
        return ("- mode: training: the patched model trained against the original, and the "
                "times are of a training step (forward and backward)")
    return "- mode: inference: outputs compared, and the times are of a forward"


def _training_line(t: dict[str, Any]) -> str:
    losses = ", ".join(f"{a:.6g}/{b:.6g}" for a, b in zip(t["losses_original"],
                                                          t["losses_patched"]))
    if not t["correct"]:
        return f"- training: DIFFERS over {t['steps']} SGD steps: {t['message']}"
    return (f"- training: {t['steps']} SGD steps match (losses original/patched: {losses}; "
            f"first step's gradients max abs error {t['max_grad_error']:.2e})")
