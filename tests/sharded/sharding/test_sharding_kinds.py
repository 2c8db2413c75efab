"""Each sharding kind's roles (tf_embedding/sharded/sharding/), run over the block transports
without a strategy or a cluster: the features' distribution, each block's lookup and the
outputs' way back give numpy's activations, and the gradients' way to the blocks with each
block's update give numpy's SGD step, the same bits in place and in packets. Which kind a
table gets: `choice.sharding_for`."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import ops
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.sharding import choice
from tf_embedding.sharded.sharding.row_wise import RowWise
from tf_embedding.sharded.sharding.row_wise_pooled import RowWisePooled
from tf_embedding.sharded.sharding.table_wise import TableWise
from tf_embedding.sharded.sharding.worker_row_wise import WorkerRowWise
from tf_embedding.sharded.sharding.worker_table_wise import WorkerTableWise
from tf_embedding.sharded.table_state import TableState
from tf_embedding.sharded.transports.in_place import InPlace
from tf_embedding.sharded.transports.task_packets import TaskPackets

pytestmark = pytest.mark.unit

VOCABULARY, DIM, LEARNING_RATE = 11, 3, 0.5
# Three output rows: row 0 looks up 9 and 0, row 1 nothing, row 2 looks up 5, 4, 4 and 1.
ROW_SPLITS = [0, 2, 2, 6]
IDS = [9, 0, 5, 4, 4, 1]
GAINS = [1.0, 0.5, 2.0, 1.0, -1.0, 0.25]


def _state(devices, partition_strategy="div") -> TableState:
    config = tf_embedding.TableConfig(VOCABULARY, DIM, name="video",
                                      optimizer=tf_embedding.SGD(LEARNING_RATE))
    layout = ShardLayout(VOCABULARY, devices, partition_strategy)
    table = np.arange(VOCABULARY * DIM, dtype=np.float32).reshape(VOCABULARY, DIM) / 7.0
    blocks = []
    for block, device in enumerate(devices):
        rows = (np.arange(VOCABULARY) % len(devices) == block if layout.strided
                else slice(layout.offsets[block], layout.offsets[block + 1]))
        with tf.device(device):
            blocks.append(tf.Variable(table[rows]))
    return TableState(config, (0,), layout, {"parameters": blocks}), table


def _numpy_step(table: np.ndarray, gradients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    activations = np.zeros([len(ROW_SPLITS) - 1, DIM], np.float32)
    updated = table.copy()
    for row in range(len(ROW_SPLITS) - 1):
        for k in range(ROW_SPLITS[row], ROW_SPLITS[row + 1]):
            activations[row] += GAINS[k] * table[IDS[k]]
            updated[IDS[k]] -= LEARNING_RATE * GAINS[k] * gradients[row]
    return activations, updated


def _whole_table(state: TableState) -> np.ndarray:
    blocks = [block.numpy() for block in state.variables["parameters"]]
    if not state.layout.strided:
        return np.concatenate(blocks)
    table = np.zeros([VOCABULARY, DIM], np.float32)
    for block, values in enumerate(blocks):
        table[block::len(blocks)] = values
    return table


@pytest.mark.parametrize("kind, devices, partition_strategy", [
    (RowWise, ["/cpu:0", "/cpu:1", "/cpu:2"], "div"),
    (RowWise, ["/cpu:0", "/cpu:1", "/cpu:2"], "mod"),
    (RowWisePooled, ["/cpu:0", "/cpu:1", "/cpu:2"], "div"),
    (RowWisePooled, ["/cpu:1", "/cpu:2"], "mod"),
    (TableWise, ["/cpu:1"], "div"),
])
@pytest.mark.parametrize("transport_class", [InPlace, TaskPackets])
def test_each_kinds_roles_give_numpy_activations_and_update(kind, devices, partition_strategy,
                                                            transport_class):
    state, table = _state(devices, partition_strategy)
    sharding, transport = kind(state), transport_class()
    gradients = np.linspace(-1.0, 1.0, (len(ROW_SPLITS) - 1) * DIM,
                            dtype=np.float32).reshape(-1, DIM)
    expected_activations, expected_table = _numpy_step(table, gradients)

    @tf.function
    def step():
        batch = sharding.distribute(ops.CsrBatch(
            tf.constant(ROW_SPLITS, tf.int64), tf.constant(IDS, tf.int64),
            tf.constant(GAINS), tf.constant([len(ROW_SPLITS) - 1], tf.int64)))
        (activations,) = transport.lookup([sharding], [batch])
        transport.apply([sharding], [batch], [tf.constant(gradients)], num_replicas=1)
        return activations

    assert (sharding.deduplicated) == (kind is RowWise)
    np.testing.assert_allclose(step().numpy(), expected_activations, rtol=1e-6)
    np.testing.assert_allclose(_whole_table(state), expected_table, rtol=1e-6)


def test_worker_row_wise_sends_each_owner_its_ids_and_lookups():
    state, _ = _state(["/cpu:0", "/cpu:1", "/cpu:2"])  # blocks [0, 4), [4, 8), [8, 11)
    sharding = WorkerRowWise(state, owners=[0, 1, 2])
    batch = sharding.distribute(ops.CsrBatch(
        tf.constant(ROW_SPLITS, tf.int64), tf.constant(IDS, tf.int64), tf.constant(GAINS),
        tf.constant([len(ROW_SPLITS) - 1], tf.int64)))
    # Unique ids 0, 1, 4, 5, 9 by owner (block-local), and nothing for a fourth rank.
    assert [ids.numpy().tolist() for ids in sharding.ids_by_owner(batch.unique_ids, 4)] == [
        [0, 1], [0, 1], [1], []]
    # The whole table on rank 2 of 3 with its rows back (a quantized table-wise table): every
    # id and lookup goes there.
    whole = WorkerRowWise(_state(["/cpu:2"])[0], owners=[2])
    whole_batch = whole.distribute(ops.CsrBatch(
        tf.constant(ROW_SPLITS, tf.int64), tf.constant(IDS, tf.int64), tf.constant(GAINS),
        tf.constant([len(ROW_SPLITS) - 1], tf.int64)))
    assert [ids.numpy().tolist() for ids in whole.ids_by_owner(whole_batch.unique_ids, 3)] == [
        [], [], [0, 1, 4, 5, 9]]
    assert [ids.numpy().tolist() for ids, _ in whole.lookups_by_owner(whole_batch, 3)] == [
        [], [], IDS]
    lookups = sharding.lookups_by_owner(batch, 3)
    rows_and_gains = [tf.bitcast(packed, tf.int32).numpy().tolist() for _, packed in lookups]
    assert [ids.numpy().tolist() for ids, _ in lookups] == [[0, 1], [1, 0, 0], [1]]
    gain_bits = np.array(GAINS, np.float32).view(np.int32).tolist()
    assert rows_and_gains == [[[0, gain_bits[1]], [2, gain_bits[5]]],
                              [[2, gain_bits[2]], [2, gain_bits[3]], [2, gain_bits[4]]],
                              [[0, gain_bits[0]]]]


@pytest.mark.parametrize("devices, pooled, owners, kind", [
    (["/cpu:0"], False, None, TableWise),
    (["/cpu:0"], True, None, TableWise),
    (["/cpu:0", "/cpu:1"], False, None, RowWise),
    (["/cpu:0", "/cpu:1"], True, None, RowWisePooled),
    (["/cpu:0", "/cpu:1"], False, (0, 1), WorkerRowWise),
    (["/cpu:1"], False, (1,), WorkerTableWise),
])
def test_choice_gives_each_table_its_kind(devices, pooled, owners, kind):
    state, _ = _state(devices)
    assert type(choice.sharding_for(state, pooled=pooled, owners=owners)) is kind


def test_only_a_table_wise_table_compiles():
    with pytest.raises(ValueError, match="Table video is split into 2 blocks"):
        RowWise(_state(["/cpu:0", "/cpu:1"])[0]).check_compilable()
    with pytest.raises(ValueError, match="Table video is split over the workers"):
        WorkerRowWise(_state(["/cpu:0", "/cpu:1"])[0], owners=[0, 1]).check_compilable()
    TableWise(_state(["/cpu:0"])[0]).check_compilable()


def test_worker_table_wise_sends_its_owner_the_lookups_and_asks_a_row_per_sample():
    pooled = WorkerTableWise(_state(["/cpu:1"])[0], owners=[1])
    batch = pooled.distribute(ops.CsrBatch(
        tf.constant(ROW_SPLITS, tf.int64), tf.constant(IDS, tf.int64), tf.constant(GAINS),
        tf.constant([len(ROW_SPLITS) - 1], tf.int64)))
    assert not pooled.deduplicated and batch.inverse is None
    requests = pooled.requests(batch, 3)
    assert [int(rows) for _, rows in requests] == [0, len(ROW_SPLITS) - 1, 0]
    ids, packed = tf.split(requests[1][0], 2)
    assert ids.numpy().tolist() == IDS
    assert tf.bitcast(packed, tf.int32)[:, 0].numpy().tolist() == [0, 0, 2, 2, 2, 2]
    assert [int(tf.size(request)) for request, _ in (requests[0], requests[2])] == [0, 0]
    parts = [tf.zeros([0, DIM]), tf.ones([3, DIM]), tf.zeros([0, DIM])]
    assert pooled.assemble(parts) is parts[1]
