"""A rank's step times (hvdflow_trainer.step_times, hvdflow_wire.steps): summed per epoch, an epoch started again
adding to what it had, the input's wait measured on a real slow iterator, a user's own loop split by its hooks, and
the wire's checks."""

from __future__ import annotations

import time

import pytest

from hvdflow_trainer.faults import slowed_batches
from hvdflow_trainer.step_times import ScriptSteps, StepClock, timed_input
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


def test_a_users_own_loop_is_split_by_its_batches_its_hooks_and_hvdflows_calls_between_steps() -> None:
    """A loop of 4 steps over a 30 ms reader: each step computes 20 ms, then communicates 10 ms told by a hook
    (PyTorch's way) or from a mark to the step's end (TensorFlow's), then makes a 300 ms call of hvdflow's (the
    agreed stop) that belongs to no step. The last step is counted when the loop asks for a batch that is not
    there; a loop that leaves mid-epoch (a stop) leaves its open step out."""
    clock = StepClock()
    steps = ScriptSteps(clock)
    clock.start_epoch(0)
    for k, _ in enumerate(steps.batches(slowed_batches(range(4), 0.03))):
        time.sleep(0.02)
        if k % 2:
            steps.exchange_begins()
            time.sleep(0.01)
        else:
            begun = time.perf_counter()
            time.sleep(0.01)
            steps.add_communication(time.perf_counter() - begun)
        begun = time.perf_counter()
        time.sleep(0.3)
        steps.between(time.perf_counter() - begun)
    clock.start_epoch(1)
    for _ in steps.batches(range(10)):
        time.sleep(0.01)
        break
    [epoch] = clock.result()
    assert epoch.epoch == 0 and epoch.steps == 4
    slack = 0.5  # what a loaded machine may add to a part; less than the 1.2 s between the steps
    assert 0.12 <= epoch.input_seconds < 0.12 + slack, epoch
    assert 0.08 <= epoch.compute_seconds < 0.08 + slack, epoch
    assert 0.04 <= epoch.communication_seconds < 0.04 + slack, epoch


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
