"""tf_embedding/sharded/transports/task_packets.py in one process: packets carry tensors bit for bit, the
calls of a device share one packet each way, and a tensor sent to a device once in a graph is not
packed again. (On a cluster: tests/cluster/test_task_exchange_cluster.py.)"""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.sharded.transports import device_calls
from tf_embedding.sharded.transports import in_place
from tf_embedding.sharded.transports import task_packets

pytestmark = pytest.mark.unit


def test_a_packet_carries_tensors_bit_for_bit():
    floats = np.array([[1.5, -0.0, np.inf], [np.nan, -np.inf, 1e-45]], np.float32)
    floats.view(np.int32)[1, 0] = 0x7fc01234  # a NaN with a payload
    tensors = [tf.constant(floats), tf.constant([7, -3, 2**31 - 1], tf.int32),
               tf.constant([2**40 + 5, -1, 0], tf.int64), tf.constant(0.25),
               tf.zeros([0, 4], tf.float32)]
    packet = task_packets.pack(tensors)
    assert packet.dtype == tf.int32
    unpacked = task_packets.unpack(packet, [task_packets.spec_of(t) for t in tensors])
    for sent, arrived in zip(tensors, unpacked):
        assert arrived.dtype == sent.dtype and arrived.shape == sent.shape
        np.testing.assert_array_equal(tf.bitcast(arrived, tf.int32) if sent.dtype == tf.float32
                                      else arrived,
                                      tf.bitcast(sent, tf.int32) if sent.dtype == tf.float32
                                      else sent)


def _packets(graph: tf.Graph) -> list[tf.Operation]:
    """The ops that gather a packet's words (int32 concatenations)."""
    return [op for op in graph.get_operations()
            if op.type == "ConcatV2" and op.outputs[0].dtype == tf.int32]


def test_the_calls_of_a_device_share_one_packet_each_way_and_reuse_what_was_sent():
    exchange = task_packets.TaskPackets()
    ids = tf.constant([4, 0, 9], tf.int64)
    rows = tf.reshape(tf.range(6, dtype=tf.float32), [3, 2])
    seen = {}

    @tf.function
    def step():
        calls = [
            device_calls.DeviceCall("/cpu:1", [device_calls.Narrow(ids), rows],
                                     lambda inputs: [tf.cast(inputs[0], tf.float32)[:, None]
                                                     * inputs[1]]),
            device_calls.DeviceCall("/cpu:1", [rows], lambda inputs: [inputs[0] + 1.0]),
            device_calls.DeviceCall("/cpu:2", [ids], lambda inputs: [
                tf.cast(inputs[0], tf.float32)[:, None]]),
        ]
        packed = exchange.run(calls)
        unpacked = in_place.run_in_place(calls)
        before = len(_packets(tf.compat.v1.get_default_graph()))
        # Everything is on /cpu:1 already and nothing comes back: no packet at all.
        arrived = exchange.run([device_calls.DeviceCall(
            "/cpu:1", [device_calls.Narrow(ids), rows], lambda inputs: [])])
        seen["new packets"] = len(_packets(tf.compat.v1.get_default_graph())) - before
        seen["arrived"] = arrived
        return packed, unpacked

    packed, unpacked = step()
    for packed_outputs, in_place_outputs in zip(packed, unpacked):
        for packed_output, in_place_output in zip(packed_outputs, in_place_outputs):
            np.testing.assert_array_equal(packed_output, in_place_output)
    assert seen == {"new packets": 0, "arrived": [[]]}
    graph = step.get_concrete_function().graph
    # Per device one packet there and one back; /cpu:1 receives the narrowed ids as int32.
    assert sorted(op.device for op in _packets(graph)) == ["", "", "/device:CPU:1",
                                                           "/device:CPU:2"]
    assert {op.device for op in graph.get_operations() if op.type == "Cast"
            and op.outputs[0].dtype == tf.int64} == {"/device:CPU:1"}


def test_unpackable_tensors_are_refused_by_name():
    with pytest.raises(TypeError, match="Cannot pack bool tensor of shape \\(1,\\): packets "
                                        "carry int32, int64 and float32"):
        task_packets.pack([tf.constant([True])])

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def unknown_columns(rows):
        return task_packets.pack([rows])

    with pytest.raises(ValueError, match="A tensor sent to a parameter-server task needs a "
                                         "known rank and known dimensions after the first: "
                                         "rows:0 has \\(None, None\\)"):
        unknown_columns.get_concrete_function()
