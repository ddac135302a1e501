"""Which input sets make a contestant's time: the task's own, not the stress set (CPU)."""

import pytest

from kernelevo.evaluate.child.timing import _Rotation, stress_note


def test_every_set_rotates_but_only_the_counted_ones_make_the_statistics():
    rotation = _Rotation(3, [0, 1])
    assert [rotation.set_of(i) for i in range(6)] == [0, 1, 2, 0, 1, 2]
    samples = [(rotation.set_of(i), t) for i, t in enumerate([1.0, 1.1, 9.0, 1.2, 1.0, 8.0])]
    assert rotation.split(samples) == ([1.0, 1.1, 1.2, 1.0], [9.0, 8.0])


def test_without_counted_sets_named_every_set_counts():
    rotation = _Rotation(2, None)
    assert rotation.counted == [0, 1]
    assert rotation.split([(0, 1.0), (1, 2.0)]) == ([1.0, 2.0], [])


def test_rounds_grow_until_enough_of_them_count():
    rotation = _Rotation(3, [0, 1])
    assert rotation.rounds(200, 20) == 200  # 134 of 200 count: enough
    assert rotation.rounds(20, 20) == 29  # 20 counted among 29 rounds (sets 0, 1 of each 3)
    assert sum(rotation.set_of(i) in rotation.counted for i in range(29)) == 20
    assert _Rotation(3, None).rounds(20, 20) == 20


def test_a_counted_set_outside_the_sets_is_refused():
    with pytest.raises(ValueError, match="outside"):
        _Rotation(2, [0, 2])


def test_a_value_dependent_time_is_named_in_a_note():
    note = stress_note("eager", [0.176, 0.175, 0.177], [0.43, 0.42])
    assert note is not None and note.startswith("eager: 2.4") and "task's own sets" in note
    assert stress_note("eager", [1.0, 1.0], [0.7]) is not None  # faster counts as well
    assert stress_note("compile", [0.157, 0.156], [0.158]) is None
    assert stress_note("compile", [0.157], []) is None
