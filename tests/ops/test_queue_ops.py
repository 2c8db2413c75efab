"""TfeCheckQueueSizes: the engine's queue check, against the sizes of stock FIFOQueues."""

import pytest
import tensorflow as tf

from tf_embedding import _loader

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def lib():
    return _loader.load_ops()


def queues_holding(*counts):
    queues = []
    for count in counts:
        queue = tf.queue.FIFOQueue(4, [tf.int64])
        for i in range(count):
            queue.enqueue([tf.constant(i, tf.int64)])
        queues.append(queue)
    return queues


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("counts, min_size, max_size, passes", [
    ((0,), 0, 0, True),
    ((1,), 0, 0, False),
    ((1, 2), 3, 3, True),
    ((1, 2), 0, 2, False),
    ((1, 2), 4, 8, False),
    ((0, 0, 1), 1, 1, True),
    ((0, 0, 0), 1, 2, False),
])
def test_passes_exactly_when_the_queues_hold_from_min_to_max_elements(
        lib, counts, min_size, max_size, passes, in_function):
    queues = queues_holding(*counts)

    def check():
        lib.tfe_check_queue_sizes(queues=[q.queue_ref for q in queues], min_size=min_size,
                                  max_size=max_size, message="table t: no room")
        return tf.constant(0)

    run = tf.function(check) if in_function else check
    if passes:
        run()
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"table t: no room"):
            run()
    # A check, nothing more: the queues hold what they held.
    assert [int(q.size()) for q in queues] == list(counts)


def test_a_handle_that_is_not_a_queue_is_refused(lib):
    variable = tf.Variable([1.0])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"of type 'tensorflow::Var' .* as type 'tensorflow::QueueInterface'"):
        lib.tfe_check_queue_sizes(queues=[variable.handle], max_size=1, message="m")
