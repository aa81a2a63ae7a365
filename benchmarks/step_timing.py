"""Benchmark: what timing every step (``hvdflow_trainer.keras.step_times``: the stamps inside Keras' compiled step,
read after each step; in a user's own loop, ``ScriptSteps`` around its batches and the mark where its
``hvd.DistributedGradientTape`` hands over the gradients) costs a training step, and that it changes no weight.

Run as the ordinary user in a pipeline working directory after the demo (the image pulled), naming this script in the
checkout (the demo's tree has no ``benchmarks/``):

    cd ~/hvdflow-demo && PYTHONPATH=src python CHECKOUT/benchmarks/step_timing.py --reps 5

In one container process (one Horovod rank, one thread, op determinism on, as the trainer sets them), the demo's MLP
is trained on digit-shaped data with and without the step timers, interleaved repetition by repetition so the
machine's noise hits both alike, each from the same seed; the medians of the time per step and their ratio (goal:
at most 1 % more), how many steps were marked (every step in the first epoch, then as many as the marks' budget
allows: ``MARKS_BUDGET``; two warm-up epochs, not timed, trace both step functions), and whether the two ended with
the same weights (they must, bit for bit). Then the same for the same MLP trained by a loop of the script API's
shape (a ``tf.function`` step with Horovod's tape), whose mark runs in every step.
Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import subprocess

from demo_tree import add_tree_options, tree_runtime

MEASURE = """
import hashlib, json, statistics, sys, time
import numpy as np, tensorflow as tf
import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
from hvdflow_trainer.keras.step_times import StepTimes, time_tape_exchange
from hvdflow_trainer.step_times import ScriptSteps, StepClock

reps, epochs = int(sys.argv[1]), int(sys.argv[2])
hvd.init()
tf.config.experimental.enable_op_determinism()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
rng = np.random.default_rng(0)
x, y = rng.random((1152, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 1152)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

def mlp():
    tf.keras.utils.set_random_seed(1234)
    return tf.keras.Sequential([tf.keras.layers.Input((8, 8, 1)), tf.keras.layers.Flatten(),
                                tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])

def digest(model):
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()

class BatchHooks(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        pass

def trained(timed):
    model = mlp()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01, momentum=0.9))
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # hvdflow's fit always has callbacks with batch hooks (its epoch timer, the agreed stop): Keras then calls the
    # hooks of every callback each step, the step timers' included, so only their own work is what they add
    callbacks, timer = [BatchHooks()], None
    if timed:
        timer = StepTimes(StepClock())
        timer.instrument(model, optimizer, None, hvd.size())
        callbacks.append(timer)
    # not timed: compiles the step (and, with the timers, its marked copy in epoch 1, the plain one in epoch 2)
    model.fit(data, epochs=2, verbose=0, callbacks=callbacks)
    began = time.perf_counter()
    model.fit(data, initial_epoch=2, epochs=2 + epochs, verbose=0, callbacks=callbacks)
    seconds = (time.perf_counter() - began) / (epochs * 36)
    if timer is not None:
        marked.append(sum(e.steps for e in timer.clock.result()[2:]))  # the timed epochs' marked steps
    return seconds, digest(model)

plain_tape = hvd_tf._DistributedGradientTape.__init__

def looped(timed):  # the script API's shape of loop; its tape marked (for this call only) where timed
    model = mlp()
    optimizer = tf.keras.optimizers.legacy.SGD(0.01, momentum=0.9)
    loss_of = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    steps = ScriptSteps(StepClock()) if timed else None
    if steps is not None:
        time_tape_exchange(steps)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(y, model(x, training=True))
        tape = hvd_tf.DistributedGradientTape(tape)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    def epoch(number):
        if steps is not None:
            steps.clock.start_epoch(number)
        for x, y in steps.batches(data) if steps is not None else data:
            step(x, y)

    for number in range(2):  # not timed: traces the step
        epoch(number)
    began = time.perf_counter()
    for number in range(2, 2 + epochs):
        epoch(number)
    seconds = (time.perf_counter() - began) / (epochs * 36)
    hvd_tf._DistributedGradientTape.__init__ = plain_tape
    if steps is not None:
        assert all(e.communication_seconds > 0 for e in steps.clock.result()), steps.clock.result()
    return seconds, digest(model)

found = {}
for name, train in (("fit", trained), ("script", looped)):
    per_step, marked = {False: [], True: []}, []
    weights = {False: set(), True: set()}
    for rep in range(reps):
        for timed in (False, True) if rep % 2 == 0 else (True, False):
            seconds, sha = train(timed)
            per_step[timed].append(seconds)
            weights[timed].add(sha)
    found[name] = {"untimed": per_step[False], "timed": per_step[True],
                   "weights": {"untimed": sorted(weights[False]), "timed": sorted(weights[True])}, "marked": marked}
print(json.dumps(found))
"""


def main() -> None:
    """Measure in the image's container and print the medians, the ratio and the weights' check."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5, help="epochs of 36 steps timed per repetition")
    add_tree_options(parser)
    args = parser.parse_args()
    runtime = tree_runtime(args)
    proc = subprocess.run(runtime.command(["python3", "-c", MEASURE, str(args.reps), str(args.epochs)], {}, []),
                          env=runtime.process_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"the measurement failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, what in (("fit", "Keras' fit"), ("script", "a loop of the script API's shape")):
        report(found[name], what, args)


def report(found: dict, what: str, args: argparse.Namespace) -> None:
    """The medians, their ratio and the weights' check of one way of training."""
    untimed, timed = sorted(found["untimed"]), sorted(found["timed"])
    median = {name: values[len(values) // 2] for name, values in (("untimed", untimed), ("timed", timed))}
    print(f"{what}: seconds per step, median of {args.reps} reps of {args.epochs} epochs x 36 steps (MLP, 1 rank, "
          f"1 thread)")
    print(f"  without step timers {1000 * median['untimed']:.3f} ms, with {1000 * median['timed']:.3f} ms: "
          f"ratio {median['timed'] / median['untimed']:.3f} (goal at most 1.010)")
    same = found["weights"]["untimed"] == found["weights"]["timed"] and len(found["weights"]["timed"]) == 1
    if found["marked"]:
        print(f"  steps marked: {found['marked']} of {args.epochs * 36} per repetition (the marks' spacing set by "
              f"the step time of the epoch before)")
    print(f"  weights with and without: {'the same, bit for bit' if same else 'DIFFERENT'} "
          f"({found['weights']['timed'][0][:16]}...)")

if __name__ == "__main__":
    main()
