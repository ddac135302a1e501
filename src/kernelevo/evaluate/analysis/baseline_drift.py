"""A stored baseline checked against its drift probe, and the stored times put to use.

Pure rules on timing stats, shared by the worker (which probes and merges,
child/worker_timing.py) and the judge (which reports the drift,
parent/outcome.py); the store itself is parent/baseline_store.py.
"""

from __future__ import annotations

from typing import Any

# A probe this far from its stored time, either way, on any measure it checks: drift.
DRIFT = 0.10
# Stored times stand in only for baselines this slow a call (by the call
# measure): timed beside the candidate they cost the most, and host time,
# which moves between processes by up to 40 % on launch-bound calls, is the
# least of theirs. Quicker baselines are timed beside every candidate, their
# rounds paired with its rounds (a speedup's interval comes from them).
STORED_MIN_MS = 1.0
PROBE_MEASURES = ("gpu", "call")  # KernelBench's protocol is not probed: its mean drifts with them
# Samples a probe takes per measure: few, as it only has to tell drift from none.
PROBE_GPU_SAMPLES = 20
PROBE_CALL_LOOPS = 5

Measures = dict[str, dict[str, dict[str, Any]]]  # measure -> contestant -> TimingStats fields


def drift(measured: Measures, stored: Measures, probe: str) -> dict[str, float]:
    """The probe's time now over its stored time, by each measure both have and a probe checks."""
    ratios = {}
    for measure in PROBE_MEASURES:
        now, then = measured.get(measure, {}).get(probe), stored.get(measure, {}).get(probe)
        if now and then and then["median_ms"] > 0:
            ratios[measure] = now["median_ms"] / then["median_ms"]
    return ratios


def steady(ratios: dict[str, float]) -> bool:
    """Whether the probe agrees with the store on every measure it checked (and checked one)."""
    return bool(ratios) and all(abs(r - 1.0) <= DRIFT for r in ratios.values())


def with_stored(measured: Measures, stored: Measures) -> Measures:
    """The candidates' stats as measured, the baselines' as stored (the probe's own left out)."""
    merged: Measures = {}
    for measure, baselines in stored.items():
        candidates = {n: s for n, s in measured.get(measure, {}).items()
                      if n.startswith("candidate")}
        if candidates:
            merged[measure] = {**baselines, **candidates}
    return merged


def ratio_words(ratios: dict[str, float]) -> str:
    return ", ".join(f"{ratio:.2f}x ({measure})" for measure, ratio in ratios.items())
