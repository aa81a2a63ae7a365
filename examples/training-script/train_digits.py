"""A plain Horovod training loop written against hvdflow's script API (``hvdflow_trainer.script``).

In the config::

    experiments:
      loop:
        dataset: digits
        image: hvdflow-cpu
        ranks: 2
        model: {code: examples/training-script, script: train_digits.py, params: {hidden: 32}}
        epochs: 5
        batch_size: 32        # per rank: run.batch_size
        learning_rate: 0.01   # scaled by the ranks: run.learning_rate

hvdflow runs it once per rank, in the image. What it gives the script (Horovod set up, the rank's data in the
epoch-keyed order, checkpoints and resume, the agreed stop, the outputs) is in ``run``; the loop is the script's own.
"""

import horovod.tensorflow as hvd
import tensorflow as tf

from hvdflow_trainer.script import start

run = start()
hidden = int(run.params.get("hidden", 32))
model = tf.keras.Sequential([
    tf.keras.Input(shape=run.input_shape),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(hidden, activation="relu"),
    tf.keras.layers.Dense(run.num_classes, activation="softmax"),
])
optimizer = tf.keras.optimizers.legacy.SGD(run.learning_rate, momentum=0.9)
loss_of = tf.keras.losses.SparseCategoricalCrossentropy()
run.track(model, optimizer)   # restores the newest checkpoint of this run, if there is one


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predicted = model(x, training=True)
        loss = loss_of(y, predicted)
    tape = hvd.DistributedGradientTape(tape)   # the gradients averaged over the ranks
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss, predicted


for epoch in run.epochs_to_run():
    loss_mean, accuracy = tf.keras.metrics.Mean(), tf.keras.metrics.SparseCategoricalAccuracy()
    for x, y in run.train_batches(epoch):
        loss, predicted = train_step(x, y)
        loss_mean.update_state(loss)
        accuracy.update_state(y, predicted)
        if run.should_stop():   # the scheduler's warning or Ctrl-C on any rank: all ranks stop here together
            run.stop()          # a checkpoint, then the rank ends to be resumed by the next attempt
    run.end_epoch({"loss": float(loss_mean.result()), "accuracy": float(accuracy.result()), **run.validate(model)})
run.finish()
