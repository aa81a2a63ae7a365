"""A Keras training loop of a user's own, on a model with BatchNormalization, a residual block and a seeded Dropout,
written against hvdflow's script API (``hvdflow_trainer.script``).

In the config::

    experiments:
      loop:
        dataset: digits
        image: hvdflow-cpu
        ranks: 2
        model: {code: examples/training-script, script: train_residual.py, params: {filters: 8}}

What the loop need not do itself: ``run.track`` checkpoints the model's BatchNorm statistics (every rank's own, at a
stop mid-epoch) and Dropout's random generator with the run; ``run.validate`` (or else ``run.end_epoch``) averages the
BatchNorm statistics over the ranks, so every rank validates and ends with one model. A resumed run ends with the
uninterrupted run's weights.
"""

import horovod.tensorflow as hvd
import tensorflow as tf

from hvdflow_trainer.script import start

run = start()
filters = int(run.params.get("filters", 8))
layers = tf.keras.layers
inputs = tf.keras.Input(shape=run.input_shape)
x = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(inputs)))
y = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(x))
x = layers.Activation("relu")(layers.Add()([x, y]))
x = layers.Dropout(0.25, seed=11)(layers.GlobalAveragePooling2D()(x))
model = tf.keras.Model(inputs, layers.Dense(run.num_classes, activation="softmax")(x))
optimizer = tf.keras.optimizers.legacy.SGD(run.learning_rate, momentum=0.9)
loss_of = tf.keras.losses.SparseCategoricalCrossentropy()
run.track(model, optimizer)   # restores the newest checkpoint of this run, if there is one


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predicted = model(x, training=True)   # BatchNorm moves its statistics, Dropout draws its mask
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
        if run.should_stop():
            run.stop()
    run.end_epoch({"loss": float(loss_mean.result()), "accuracy": float(accuracy.result()), **run.validate(model)})
run.finish()
