"""bench/machine_load.py: the CPUs' busy share and the GPUs' use while a bench runs."""

from __future__ import annotations

import os
import time

from tests.conftest import bench_module


def _machine_load():
    return bench_module("machine_load")


def test_samples_read_every_gpu_that_nvidia_smi_lists_and_the_cpus_busy_share(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '60, 1000, 81559\\n40, 3000, 81559\\n'\n")
    smi.chmod(0o755)
    module = _machine_load()
    with module.MachineLoad(period_s=0.05, smi=str(smi)) as load:
        # keep one core busy until three periods are sampled; a loaded machine may take
        # long to start the sampler's `nvidia-smi`, so wait on the samples, not the clock
        deadline = time.perf_counter() + 60
        while len(load.samples) < 3 and time.perf_counter() < deadline:
            pass
    summary = load.summary()
    assert summary["samples"] >= 3
    assert summary["gpu_util_mean_pct"] == 50.0
    assert summary["gpu_memory_max_mib"] == 3000.0 and summary["gpu_memory_total_mib"] == 81559
    # one busy core of this machine's, at least, in every period (/proc/stat counts in
    # 10 ms ticks, so a 50 ms period reads it only roughly)
    assert 0.5 / os.cpu_count() <= summary["cpu_busy_mean"] <= 1.0
    line = module.load_line(summary)
    assert "GPU utilisation 50 %" in line and "3000 of 81559 MiB" in line


def test_without_nvidia_smi_the_gpu_figures_are_absent_not_zero(tmp_path):
    module = _machine_load()
    with module.MachineLoad(period_s=0.05, smi=str(tmp_path / "missing")) as load:
        deadline = time.perf_counter() + 60
        while not load.samples and time.perf_counter() < deadline:
            time.sleep(0.05)
    summary = load.summary()
    assert summary["gpu_util_mean_pct"] is None and summary["gpu_memory_max_mib"] is None
    assert summary["cpu_busy_mean"] is not None
    assert "GPU utilisation - %" in module.load_line(summary)
