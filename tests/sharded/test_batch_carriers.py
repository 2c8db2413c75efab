"""Both batch carriers implement `batch_types.BatchCarrier`, the one protocol the batch paths
use, with its whole method set; the hand-off answers `holds_raw_batch` from the raw batch its
traced function holds."""

import inspect

import pytest
import tensorflow as tf

from tf_embedding.sharded import handoff, queues
from tf_embedding.sharded.batch_types import BatchCarrier

pytestmark = pytest.mark.unit

PROTOCOL = {name for name, _ in inspect.getmembers(BatchCarrier)
            if not name.startswith("_")}


@pytest.mark.parametrize("carrier", [queues.ReplicaQueues, handoff.FunctionHandoff])
def test_every_carrier_has_the_protocols_members(carrier):
    assert PROTOCOL <= {name for name, _ in inspect.getmembers(carrier)}


def test_the_handoff_holds_the_raw_batch_of_its_function():
    carrier = handoff.FunctionHandoff("a rule")
    answers = {}

    @tf.function
    def step(ids):
        carrier.put_raw_batch("ragged", [[ids]])
        answers.update({kind: carrier.holds_raw_batch(kind) for kind in ("ragged", "sparse")})
        (features,) = carrier.take_raw_batch("ragged")
        answers["after"] = carrier.holds_raw_batch("ragged")
        return features[0].values

    values = step(tf.ragged.constant([[1, 2], [3]], tf.int64))
    assert values.numpy().tolist() == [1, 2, 3]
    assert [tf.get_static_value(answers[key]) for key in ("ragged", "sparse", "after")] == [
        True, False, False]
