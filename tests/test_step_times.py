"""A rank's step times (hvdflow_trainer.step_times, hvdflow_wire.steps): summed per epoch, an epoch started again
adding to what it had, the input's wait measured on a real slow iterator, and the wire's checks."""

from __future__ import annotations

import time

import pytest

from hvdflow_trainer.faults import slowed_batches
from hvdflow_trainer.step_times import StepClock, timed_input
from hvdflow_wire import WireError
from hvdflow_wire.rank import RankResult
from hvdflow_wire.steps import EpochSteps
from rank_results import rank_result_json


def test_steps_are_summed_per_epoch_and_an_epoch_started_again_adds_to_its_own() -> None:
    clock = StepClock()
    clock.start_epoch(0)
    clock.add(0.1, 0.5, 0.25)
    clock.add(0.1, 0.5, -0.001)  # a clock's jitter below 0 counts as 0
    clock.start_epoch(1)
    clock.add(0.0, 1.0, 0.5)
    clock.start_epoch(1)  # an elastic reset runs epoch 1 again from its checkpoint
    clock.add(0.5, 1.0, 0.0)
    clock.start_epoch(2)  # no step before the stop: no entry
    assert clock.result() == [EpochSteps(0, 2, 0.2, 1.0, 0.25), EpochSteps(1, 2, 0.5, 2.0, 0.5)]
    assert clock.result()[0].seconds == pytest.approx(1.45)


def test_the_wait_for_each_batch_is_measured_on_a_slow_iterator() -> None:
    waited = [0.0]
    seen = []
    for batch in timed_input(slowed_batches(range(3), 0.05), waited):
        seen.append((batch, waited[0]))
        time.sleep(0.01)  # the step's own work is not waiting
    assert [b for b, _ in seen] == [0, 1, 2]
    assert all(0.05 <= w < 0.06 + 0.5 for _, w in seen), seen  # the sleep, and at most the machine's delay


def test_the_wire_refuses_impossible_times_and_a_rank_result_carries_them() -> None:
    with pytest.raises(WireError, match="epoch 0 with 0 steps"):
        EpochSteps(0, 0, 0.0, 0.0, 0.0)
    with pytest.raises(WireError, match="epoch 3: a negative time"):
        EpochSteps(3, 1, 0.0, -1.0, 0.0)
    result = RankResult.from_json(rank_result_json(0), "rank-0.json")
    assert result.step_times is not None and result.step_times[1] == EpochSteps(1, 2, 0.01, 0.15, 0.05)
    assert result.to_json()["step_times"][0]["communication_seconds"] == 0.1
    with pytest.raises(WireError, match=r"step_times\[0\]"):
        RankResult.from_json(rank_result_json(0, step_times=[{"epoch": 0}]), "rank-0.json")
