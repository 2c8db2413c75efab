"""Training loops that the Keras front ends' tests share."""

import tensorflow as tf


def two_cpu_mirrored_strategy() -> tf.distribute.MirroredStrategy:
    """Two replicas on logical CPUs (tests/conftest.py). ReductionToOneDevice: collective
    all-reduces of strategies with other device counts, made earlier in the same process,
    share group keys and abort (a TF limitation)."""
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def mirrored_training_step(strategy, model, optimizer, batch_size, training=None):
    """The seed's loop as a tf.function of a distributed iterator: strategy.run, tape.gradient
    of the squared error over model.trainable_variables, the model's optimizer. `training`:
    passed to the model's call if not None."""

    @tf.function
    def training_step(iterator):
        def step(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                scores = model(x) if training is None else model(x, training=training)
                loss = tf.reduce_sum(tf.square(scores - y)) / batch_size
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))

        strategy.run(step, args=(next(iterator),))

    return training_step
