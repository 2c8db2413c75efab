"""TPUEmbedding misuse: every error, eagerly and inside tf.function, under the default strategy
and MirroredStrategy; none of them blocks.
"""

import pytest
import tensorflow as tf

from helpers.sharded import make_strategy
from helpers.sharded import dequeue_and_apply, gradients_like, small_embedding, small_features

pytestmark = pytest.mark.unit


MISUSE = {
    "dequeue_first": (lambda emb: emb.dequeue(),
                      r"dequeue\(\) called on replica 0 with no enqueued batch"),
    "enqueue_twice": (lambda emb: (emb.enqueue(small_features()), emb.enqueue(small_features())),
                      r"enqueue\(\) called while replica 0 already holds 1 enqueued batch"),
    "apply_without_dequeue": (
        lambda emb: (emb.enqueue(small_features()), dequeue_and_apply(emb),
                     emb.apply_gradients({"a": tf.ones([2, 2]), "b": tf.ones([2, 2, 2])})),
        r"apply_gradients\(\) called on replica 0 without activations to update"),
    "apply_after_inference_batch": (
        lambda emb: (emb.enqueue(small_features(), training=False),
                     emb.apply_gradients(gradients_like(emb.dequeue()))),
        r"the last dequeued batch was enqueued with training=False"),
    "dequeue_before_apply": (
        lambda emb: (emb.enqueue(small_features()), emb.dequeue(),
                     emb.enqueue(small_features()), emb.dequeue()),
        r"previous training batch still awaits apply_gradients\(\)"),
}


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_raises_runtime_error_eagerly(case):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    calls, message = MISUSE[case]
    with pytest.raises(RuntimeError, match=message):
        calls(emb)


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_fails_the_step_inside_tf_function(case):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    calls, message = MISUSE[case]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.function(calls)(emb)


def test_pipelining_allows_one_batch_ahead():
    emb = small_embedding(pipelined=True)
    emb.enqueue(small_features())
    emb.enqueue(small_features())
    with pytest.raises(RuntimeError, match="already holds 2 enqueued batch"):
        emb.enqueue(small_features())


@pytest.mark.parametrize("in_function", [False, True])
def test_misuse_under_mirrored_strategy_fails_without_hanging(in_function):
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    def dequeue_on_every_replica():
        strategy.run(emb.dequeue)

    run = tf.function(dequeue_on_every_replica) if in_function else dequeue_on_every_replica
    error = tf.errors.InvalidArgumentError if in_function else RuntimeError
    with pytest.raises(error, match=r"dequeue\(\) called on replica \d with no enqueued batch"):
        run()
    emb.enqueue(small_features())
    run()
    emb.enqueue(small_features())
    with pytest.raises(error, match=r"dequeue\(\) of a training batch on replica \d while the "
                                    r"previous training batch still awaits apply_gradients"):
        run()


def test_dequeue_and_apply_gradients_need_a_replica_context():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.enqueue(small_features())
    with pytest.raises(RuntimeError, match=r"dequeue\(\) must be called in a replica context: "
                                           r"inside strategy.run\(\) of the MirroredStrategy"):
        emb.dequeue()
    with pytest.raises(RuntimeError, match=r"apply_gradients\(\) must be called in a replica"):
        emb.apply_gradients({"a": tf.ones([2, 2]), "b": tf.ones([2, 2, 2])})
    other = make_strategy("mirrored4")
    with pytest.raises(RuntimeError, match=r"dequeue\(\) called under another strategy "
                                           r"\(MirroredStrategy\) than the one this "
                                           r"TPUEmbedding was created under"):
        other.run(emb.dequeue)


def test_unbuilt_object_and_unsupported_strategy():
    emb = small_embedding()
    with pytest.raises(RuntimeError, match="dequeue called on unbuilt TPUEmbedding object"):
        emb.dequeue()
    with pytest.raises(RuntimeError, match="apply_gradients called on unbuilt TPUEmbedding"):
        emb.apply_gradients({"a": None, "b": None})
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        with pytest.raises(RuntimeError, match="default strategy, tf.distribute.MirroredStrategy, "
                                               "tf.distribute.MultiWorkerMirroredStrategy or "
                                               "tf.distribute.ParameterServerStrategy, but "
                                               "was created under OneDeviceStrategy"):
            small_embedding()


def test_enqueue_to_one_replica_by_device():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.enqueue(small_features(), device=strategy.extended.worker_devices[1])
    with pytest.raises(RuntimeError, match="replica 0 with no enqueued batch"):
        strategy.run(emb.dequeue)
    with pytest.raises(ValueError, match="Device /cpu:3 passed to enqueue is not a replica "
                                         "device"):
        emb.enqueue(small_features(), device="/cpu:3")


def test_enqueue_inside_strategy_run_feeds_the_running_replica():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()

    @tf.function
    def step():
        def replica_step():
            emb.enqueue(small_features())
            dequeue_and_apply(emb)
        strategy.run(replica_step)

    step()
    step()
