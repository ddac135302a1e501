"""Verdict notes built from what the worker measured."""

from kernelevo.evaluate.parent.outcome import kernel_time_note


def test_profiler_note_names_the_kernels_that_took_the_time_longest_first():
    share = {"own_share": 0.75, "kernels": {
        "void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>": {
            "us": 10.0, "own": False},
        "softmax_kernel": {"us": 30.0, "own": True}}}
    note = kernel_time_note(share)
    assert note.startswith("own kernels: 75% of GPU kernel time; by time: softmax_kernel* 30.0 us, ")
    # Long names are cut to 60 characters.
    assert note.endswith(", void at::native::vectorized_elementwise_kernel<4, FillFuncto 10.0 us")


def test_profiler_note_counts_what_it_leaves_out():
    kernels = {f"k{i}": {"us": float(i), "own": i == 5} for i in range(1, 7)}
    note = kernel_time_note({"own_share": 5 / 21, "kernels": kernels}, top=2)
    assert note == "own kernels: 24% of GPU kernel time; by time: k6 6.0 us, k5* 5.0 us and 4 more"
    assert kernel_time_note({"own_share": 0.0, "kernels": {}}) == \
        "own kernels: 0% of GPU kernel time"


def test_a_profile_with_copies_only_recorded_no_kernel():
    from kernelevo.evaluate.parent.outcome import recorded_kernels

    copies = {"kernels": {"Memcpy DtoH (Device -> Pageable)": {"us": 2.0, "own": False},
                          "Memset (Device)": {"us": 1.0, "own": False}}}
    assert recorded_kernels(copies) == []
    seen = {"kernels": {**copies["kernels"], "at::native::reduce_kernel": {"us": 5.0,
                                                                        "own": False}}}
    assert recorded_kernels(seen) == ["at::native::reduce_kernel"]


def test_a_profile_proves_nothing_when_it_lost_the_counted_launches():
    from kernelevo.evaluate.parent.outcome import unrecorded_note

    torch_only = {"own_us": 0.0, "profiled_calls": 3, "kernels": {
        "void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>": {
            "us": 3.0, "own": False}}}
    # No launch of the candidate's own ran: the profile stands (no_custom_kernel).
    assert unrecorded_note({**torch_only, "launched": 0}) is None
    assert unrecorded_note(torch_only) is None  # CUDA candidates: no launch count
    # The launch switch counted 6 launches that the profile does not show: lost records.
    note = unrecorded_note({**torch_only, "launched": 6})
    assert note and "none of the candidate's 6 Triton launch(es) in 3 profiled" in note
    copies = {"kernels": {"Memcpy HtoD (Pageable -> Device)": {"us": 1.0, "own": False}}}
    assert "recorded no kernel in 1 call(s)" in unrecorded_note(copies)
    seen = {"own_us": 4.0, "launched": 2, "kernels": {"k": {"us": 4.0, "own": True}}}
    assert unrecorded_note(seen) is None
