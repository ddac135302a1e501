import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis import tolerance
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from tests.conftest import tensor_reads


def test_identical_passes_with_zero_error():
    ref = torch.randn(64, 33)
    outcome = compare_tensor(ref.clone(), ref, 1e-4, 1e-4)
    assert outcome.reason is None
    assert outcome.metrics.max_abs_error == 0.0
    assert outcome.metrics.mismatch_fraction == 0.0


def test_fp32_reordering_noise_passes_but_tf32_sized_error_fails():
    torch.manual_seed(0)
    a, b = torch.randn(128, 512, dtype=torch.float64), torch.randn(512, 96, dtype=torch.float64)
    ref = (a @ b).float()
    honest = (a.float() @ b.float())  # fp32 accumulation in another order
    assert compare_tensor(honest, ref, 1e-4, 1e-4).reason is None
    # TF32 keeps 10 mantissa bits: emulate it by rounding the operands.
    def tf32(x):
        return (x.float().view(torch.int32) & ~0x1FFF).view(torch.float32)
    lowered = tf32(a) @ tf32(b)
    outcome = compare_tensor(lowered, ref, 1e-4, 1e-4)
    assert outcome.reason == "output_mismatch"
    assert outcome.metrics.rel_l2_error > 1e-4


def test_nan_is_never_a_wildcard():
    ref = torch.randn(10)
    out = ref.clone()
    out[3] = float("nan")
    outcome = compare_tensor(out, ref, 1e-4, 1e-4)
    assert outcome.reason == "non_finite"
    assert "(3,)" in outcome.message


def test_matching_nan_and_inf_pass_but_mismatched_inf_fails():
    ref = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_tensor(ref.clone(), ref, 1e-4, 1e-4).reason is None
    wrong = torch.tensor([1.0, float("nan"), float("-inf")])
    assert compare_tensor(wrong, ref, 1e-4, 1e-4).reason == "non_finite"


def test_shape_dtype_and_type_are_exact():
    ref = torch.randn(4, 5)
    assert compare_tensor(torch.randn(5, 4), ref, 1, 1).reason == "wrong_shape"
    assert compare_tensor(ref.double(), ref, 1, 1).reason == "wrong_dtype"

    class Sub(torch.Tensor):
        pass

    assert compare_tensor(ref.clone().as_subclass(Sub), ref, 1, 1).reason == "not_a_tensor"


def test_metrics_locate_the_worst_element():
    ref = torch.zeros(3, 4) + 1.0
    out = ref.clone()
    out[2, 1] = 1.5
    outcome = compare_tensor(out, ref, 1e-4, 1e-4)
    assert outcome.reason == "output_mismatch"
    assert outcome.metrics.worst_index == (2, 1)
    assert outcome.metrics.worst_value == 1.5
    assert abs(outcome.metrics.mismatch_fraction - 1 / 12) < 1e-9
    assert "index [2, 1]" in outcome.message


def test_integer_outputs_compare_exactly():
    ref = torch.arange(10)
    assert compare_tensor(ref.clone(), ref, 1, 1).reason is None
    off = ref.clone()
    off[0] = 1
    assert compare_tensor(off, ref, 1, 1).reason == "output_mismatch"


def test_tolerance_precedence_run_then_task_then_dtype():
    assert tolerances("float32", None, None, EvalConfig()) == (1e-4, 1e-4)
    assert tolerances("bfloat16", None, None, EvalConfig()) == (1e-2, 1e-2)
    assert tolerances("float32", 1e-3, 2e-3, EvalConfig()) == (1e-3, 2e-3)
    assert tolerances("float32", 1e-3, 2e-3, EvalConfig(atol=5e-5)) == (5e-5, 2e-3)


def test_the_rule_without_a_run_is_the_tasks_then_the_dtypes():
    # kernelevo.apply's verification and the prompt's default ask it with no run
    assert tolerances("float16") == (1e-2, 1e-2)
    assert tolerances("float32", 1e-3) == (1e-3, 1e-4)


def test_a_tasks_declared_tolerance_is_read_from_its_text():
    from kernelevo.task import declared_number, task_from_source

    source = ("import torch\nclass Model(torch.nn.Module):\n    pass\n"
              "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    assert task_from_source(source).declared_tolerance() == (None, None)
    tuned = source + "output_atol = 1e-3\noutput_rtol = 2\noutput_atol = 5e-3\n"
    assert task_from_source(tuned).declared_tolerance() == (5e-3, 2.0)
    assert declared_number("output_atol = compute()\n", "output_atol") is None
    assert declared_number("output_atol = True\n", "output_atol") is None
    assert declared_number("not python (", "output_atol") is None


def test_a_comparison_in_chunks_decides_and_measures_as_one_in_a_piece(monkeypatch):
    """Outputs are compared a chunk at a time (bounded memory); chunking changes nothing."""
    import math

    from kernelevo.evaluate.analysis import tolerance

    generator = torch.Generator().manual_seed(7)
    ref = torch.randn(6, 5, 7, generator=generator)
    cases = {"equal": ref.clone(), "close": ref + 1e-7,
             "one far": ref.clone().index_put_((torch.tensor(4), torch.tensor(3),
                                                torch.tensor(6)), torch.tensor(9.0)),
             "twice the largest error": ref + torch.where(ref > 1.5, 0.5, 0.0),
             "noisy": ref + 1e-3 * torch.randn(ref.shape, generator=generator)}
    special = ref.clone()
    special[1, 2, 3], special[5, 0, 0] = float("nan"), float("inf")
    nan_out = special.clone()
    nan_out[2, 2, 2] = float("nan")
    outcomes = {}
    for chunk in (1 << 23, 7, 1):
        monkeypatch.setattr(tolerance, "CHUNK_ELEMENTS", chunk)
        found = {name: compare_tensor(out, ref, 1e-4, 1e-4) for name, out in cases.items()}
        found["special matches"] = compare_tensor(special.clone(), special, 1e-4, 1e-4)
        found["NaN for a value"] = compare_tensor(nan_out, special, 1e-4, 1e-4)
        outcomes[chunk] = found
    whole = outcomes[1 << 23]
    assert whole["one far"].metrics.worst_index == (4, 3, 6)
    assert whole["NaN for a value"].reason == "non_finite"
    assert "first at (2, 2, 2)" in whole["NaN for a value"].message
    assert whole["special matches"].reason is None
    assert whole["equal"].reason is None and whole["one far"].reason == "output_mismatch"
    for chunk in (7, 1):
        for name, comparison in outcomes[chunk].items():
            expected = whole[name]
            assert (comparison.reason, comparison.message[:60]) == (
                expected.reason, expected.message[:60]), (chunk, name)
            if expected.metrics is None:
                continue
            for field in ("max_abs_error", "max_rel_error", "mismatch_fraction",
                          "rel_l2_error", "worst_value", "worst_expected"):
                assert math.isclose(getattr(comparison.metrics, field),
                                    getattr(expected.metrics, field), rel_tol=1e-12,
                                    abs_tol=1e-15), (chunk, name, field)
            assert comparison.metrics.worst_index == expected.metrics.worst_index


def _recording_moves(monkeypatch) -> list[int]:
    """The element count of every tensor moved with `.to` from now on (until undone)."""
    moved: list[int] = []
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        moved.append(self.numel())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return moved


def test_a_comparison_on_a_device_moves_a_chunk_at_a_time(monkeypatch):
    """A reference kept on the CPU is compared on the GPU a chunk at a time, never copied whole
    there (the GPU was full when it came); the result is the comparison's in a piece."""
    from kernelevo.evaluate.analysis import decide, tolerance

    generator = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 5, 7, generator=generator)
    out = ref + 1e-3 * torch.randn(ref.shape, generator=generator)
    whole = compare_tensor(out, ref, 1e-4, 1e-4)
    moved = _recording_moves(monkeypatch)
    monkeypatch.setattr(tolerance, "CHUNK_ELEMENTS", 7)
    found = compare_tensor(out, ref, 1e-4, 1e-4, device="cpu")
    reason, _, metrics = decide.compare_set({"values": [out], "structure": "tensor"}, [ref],
                                            "tensor", [(1e-4, 1e-4)], "set 0", "cpu")
    monkeypatch.undo()
    assert (found.reason, found.message) == (whole.reason, whole.message)
    assert found.metrics.worst_index == whole.metrics.worst_index
    assert (reason, metrics[0].worst_index) == (whole.reason, whole.metrics.worst_index)
    assert moved and max(moved) <= 7  # chunks only, in both


def test_the_trivial_answers_are_tried_a_chunk_at_a_time_as_before(monkeypatch):
    """Zeros, a constant and another set's output, each compared without a whole copy of
    anything (a full GPU sent the check, and its decision, to the CPU); same answers."""
    from kernelevo.evaluate.analysis import decide, tolerance

    generator = torch.Generator().manual_seed(5)
    varied = torch.randn(4, 9, generator=generator)
    cases = {
        "varied": ([[varied], [torch.randn(4, 9, generator=generator)]], []),
        "zeros": ([[torch.zeros(4, 9)], [torch.zeros(4, 9)]],
                  ["output 0: zeros", "output 0: another input set's output",
                   "output 0: a constant"]),
        "constant": ([[torch.full((4, 9), 3.0)], [torch.randn(4, 9, generator=generator)]],
                     ["output 0: a constant"]),
        "one element": ([[torch.zeros(1)]], ["output 0: zeros", "output 0: a constant"]),
    }
    moved = _recording_moves(monkeypatch)
    monkeypatch.setattr(tolerance, "CHUNK_ELEMENTS", 5)
    found = {name: decide.trivial_answers_pass(references, [(1e-4, 1e-4)], "cpu")
             for name, (references, _) in cases.items()}
    monkeypatch.undo()
    assert found == {name: expected for name, (_, expected) in cases.items()}
    assert moved and max(moved) <= 5


def test_smaller_chunks_give_the_same_comparison_and_end_with_their_block():
    generator = torch.Generator().manual_seed(3)
    ref = torch.randn(64, 33, generator=generator)
    out = ref + 1e-3 * torch.randn(ref.shape, generator=generator)
    out[40, 7] = 5.0
    whole = compare_tensor(out, ref, 1e-4, 1e-4)
    with tolerance.smaller_chunks(5):
        assert tolerance._chunk_elements.get() == 5
        small = compare_tensor(out, ref, 1e-4, 1e-4)
    assert tolerance._chunk_elements.get() is None
    assert (small.reason, small.metrics.worst_index) == (whole.reason, whole.metrics.worst_index)
    assert abs(small.metrics.max_abs_error - whole.metrics.max_abs_error) < 1e-12


def test_a_comparison_reads_its_totals_back_a_fixed_number_of_times():
    """Sums and extremes stay on the comparing device until each pass ends: read back per
    chunk, each read of a 192-chunk output waits for a GPU other lanes share, every time."""
    generator = torch.Generator().manual_seed(11)
    ref = torch.randn(30, 7, generator=generator)
    cases = {"close": ref + 1e-7, "far": ref + 1e-2,
             "NaN for a value": ref.clone().index_put_((torch.tensor(20), torch.tensor(3)),
                                                       torch.tensor(float("nan")))}
    counts: dict[int, dict[str, int]] = {}
    reasons: dict[int, dict[str, tuple]] = {}
    for chunk in (1 << 23, 16, 1):
        counts[chunk], reasons[chunk] = {}, {}
        for name, out in cases.items():
            with tensor_reads() as reads, tolerance.smaller_chunks(chunk):
                found = compare_tensor(out, ref, 1e-4, 1e-4)
            counts[chunk][name] = len(reads)
            reasons[chunk][name] = (found.reason, found.message[:70])
    assert reasons[1] == reasons[16] == reasons[1 << 23]
    assert reasons[1]["far"][0] == "output_mismatch" and reasons[1]["close"][0] is None
    assert "first at (20, 3)" in reasons[1]["NaN for a value"][1]
    assert counts[1] == counts[16] == counts[1 << 23]  # 210 chunks read back as often as one
    assert max(counts[1].values()) <= 4


def test_the_largest_error_held_twice_is_placed_at_its_first_element():
    """Ties across chunks: the first element holding it, as one comparison in a piece says."""
    ref = torch.zeros(40)
    out = ref.clone()
    out[[9, 23, 31]] = 0.5  # the same error in three chunks of 8
    whole = compare_tensor(out, ref, 1e-4, 1e-4)
    with tolerance.smaller_chunks(8):
        chunked = compare_tensor(out, ref, 1e-4, 1e-4)
    with tolerance.smaller_chunks(1):
        single = compare_tensor(out, ref, 1e-4, 1e-4)
    assert whole.metrics.worst_index == chunked.metrics.worst_index == \
        single.metrics.worst_index == (9,)
    assert whole.metrics.mismatch_fraction == chunked.metrics.mismatch_fraction == 3 / 40
    out[35] = 0.75  # a larger one later takes over
    with tolerance.smaller_chunks(8):
        assert compare_tensor(out, ref, 1e-4, 1e-4).metrics.worst_index == (35,)
