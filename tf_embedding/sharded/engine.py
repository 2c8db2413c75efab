"""The sharded engine's declared interface: what the front ends (`front_end.FrontEnd`, behind the
Keras layer, `EmbeddingFeatures` and keras-rs's layer), the batch paths (`batch_paths`) and
`TPUEmbedding`'s own `enqueue` / `dequeue` / `apply_gradients` may ask of the engine.

`TPUEmbedding.build()` makes one `Engine` from the tables' variables and hands it out as
`TPUEmbedding.engine`; everything here is public, typed, and the only way in. In the words of
one training step: group these flat features by table (`group_by_table`); convert them into
CSR batches (`convert_tables`); look the batches, or the features directly, up
(`lookup_batches`, `lookup_features`); train on these activation gradients
(`apply_table_gradients`). A batch travels between the calls of a step in a `BatchCarrier`
(`carrier`): the replica's queues, or the hand-off of a traced function.
"""

from typing import Any, Callable, Sequence, TypeVar

import tensorflow as tf

from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.feature_inputs import rules
from tf_embedding import ops
from tf_embedding.sharded import handoff
from tf_embedding.sharded.batch_types import Batch, BatchCarrier, TableBatch
from tf_embedding.sharded.multi_worker import id_check
from tf_embedding.sharded.multi_worker.group import WorkerGroup
from tf_embedding.sharded.profile_sampling import LookupProfiler
from tf_embedding.sharded.sharding.kind import Sharding
from tf_embedding.sharded.sharding import table_wise
from tf_embedding.sharded.table_state import TableState

# The engine's operations (and TPUEmbedding's public methods) branch on Python values only;
# letting AutoGraph convert them (and everything they call) when a front end's call is traced in
# a tf.function (tf_keras converts a whole train step) would only cost seconds per trace.
library_code = tf.autograph.experimental.do_not_convert

T = TypeVar("T")


def group_by_table(tables: Sequence[TableState], flat_values: Sequence[T]) -> list[list[T]]:
    """Values given per flattened feature, grouped by table: entry t holds the values of
    `tables[t]`'s features, in feature order (how every per-table step takes its features)."""
    return [[flat_values[index] for index in state.feature_indices] for state in tables]


class Engine:
    """One built sharded `TPUEmbedding`'s tables, queues and per-step operations.

    Attributes (read-only):
      tables: one `TableState` per table, in `TPUEmbedding`'s table order.
      shardings: each table's sharding (`sharded/sharding/`), in the same order.
      feature_paths: each flattened feature's path in `feature_config`.
      replica_devices: each replica's device (None: the default strategy's one replica).
      compiled_handoff: the batch carrier inside an XLA-compiled function.
      workers: under MultiWorkerMirroredStrategy, the workers each table has one block on
        (every lookup and update is then a collective exchange among them); else None.
    """

    def __init__(self, shardings: Sequence[Sharding], transport: Any,
                 flat_features: Sequence[Any], feature_paths: Sequence[str],
                 output_shapes: Callable[[], Sequence[tf.TensorShape]],
                 replica_devices: Sequence[str | None], replica_carriers: Sequence[BatchCarrier],
                 compiled_handoff: handoff.FunctionHandoff, *, pipelined: bool,
                 parameter_servers: bool, profiler: LookupProfiler | None = None,
                 workers: WorkerGroup | None = None):
        """Args: each table's sharding and the transport its roles run over
        (`sharded/transports/`); the flattened `FeatureConfig`s and their paths;
        `output_shapes()` gives every feature's current output shape (they may be learned after
        the build); each replica's device and its own batch carrier; whether batches are looked
        up at enqueue time (`pipelined`) and whether tables live on parameter-server tasks; the
        `profile_data_directory` sampler, if any; the workers' group under
        MultiWorkerMirroredStrategy."""
        self.shardings = tuple(shardings)
        self.tables = tuple(sharding.table for sharding in shardings)
        self._transport = transport
        self.feature_paths = tuple(feature_paths)
        self.replica_devices = tuple(replica_devices)
        self.compiled_handoff = compiled_handoff
        self._flat_features = tuple(flat_features)
        self._output_shapes = output_shapes
        self._replica_carriers = tuple(replica_carriers)
        self._pipelined = pipelined
        self._parameter_servers = parameter_servers
        self._profiler = profiler
        self.workers = workers

    def output_shapes(self) -> Sequence[tf.TensorShape]:
        """Every flattened feature's output shape (without `dim`), as known now."""
        return self._output_shapes()

    def group_by_table(self, flat_values: Sequence[T]) -> list[list[T]]:
        """`group_by_table(self.tables, flat_values)`."""
        return group_by_table(self.tables, flat_values)

    def carrier(self, replica: int) -> BatchCarrier:
        """What carries `replica`'s batches between the calls of a step: its own carrier
        (`replica_carrier`), or inside an XLA-compiled function, which cannot hold queue ops,
        that function's trace (`compiled_handoff`)."""
        if ops.compiling_with_xla():
            return self.compiled_handoff
        return self._replica_carriers[replica]

    def replica_carrier(self, replica: int) -> BatchCarrier:
        """`replica`'s own carrier: its engine queues, or under ParameterServerStrategy the
        hand-off of the scheduled function its batch stays in."""
        return self._replica_carriers[replica]

    @library_code
    def table_inputs(self, table_features: Sequence[Sequence[Any]],
                     table_weights: Sequence[Sequence[Any]] | None = None
                     ) -> list[list[FeatureInput]]:
        """How the conversion reads each table's enqueued features (and weights), grouped by
        table (`group_by_table`), as `convert_tables` and `lookup_features` take them."""
        output_shapes = self.output_shapes()
        return [[rules.tpu_feature_input(
                    self.feature_paths[index], self._flat_features[index], feature,
                    None if table_weights is None else table_weights[position][slot],
                    output_shapes[index])
                 for slot, (index, feature) in enumerate(zip(state.feature_indices, features))]
                for position, (state, features) in enumerate(zip(self.tables, table_features))]

    @library_code
    def convert_tables(self, table_inputs: Sequence[Sequence[FeatureInput]],
                       training: Any = False) -> list[TableBatch]:
        """This replica's CSR batch of each table, from `table_inputs[t]` (table t's
        `FeatureInput`s). `training` (a bool or bool tensor): whether the batch counts for
        `profile_data_directory` and for dynamic tables' admission and eviction. Under
        MultiWorkerMirroredStrategy every worker first checks every worker's batch
        (`id_check`), so an id past its table or a malformed feature fails the step
        everywhere."""
        if self.workers is not None:
            check = id_check.check_batches_everywhere(
                self.workers, [state.config for state in self.tables], table_inputs)
            with tf.control_dependencies([check]):
                return self._convert_tables(table_inputs, training)
        return self._convert_tables(table_inputs, training)

    def _convert_tables(self, table_inputs: Sequence[Sequence[FeatureInput]],
                        training: Any) -> list[TableBatch]:
        batches = [sharding.convert(inputs, training)
                   for sharding, inputs in zip(self.shardings, table_inputs)]
        if self._profiler is not None:
            self._profiler.observe(batches, table_inputs, training)
        return batches

    @library_code
    def convert(self, flat_inputs: Sequence[Any], flat_weights: Sequence[Any],
                training: tf.Tensor) -> Batch:
        """One replica's enqueued features -> one CSR batch per table (+ its rows if
        pipelined), checked as `convert_tables` checks them."""
        batches = self.convert_tables(self.table_inputs(self.group_by_table(flat_inputs),
                                                        self.group_by_table(flat_weights)),
                                      training)
        rows = self._gather_rows(batches) if self._pipelined else None
        return Batch(batches, rows, training)

    def _gather_rows(self, batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """What each table's sharding fetches for its batch at a pipelined enqueue (the rows of
        its unique ids; a multi-worker table-wise table's pooled activations)."""
        return self._transport.gather_rows(self.shardings, batches)

    @library_code
    def lookup_batches(self, batches: Sequence[TableBatch],
                       rows: Sequence[tf.Tensor] | None = None) -> list[tf.Tensor]:
        """Each table's [R, dim] activations of this replica's `batches` (`rows`: each
        batch's unique rows, if it was looked up at enqueue time)."""
        if rows is None:
            return self._transport.lookup(self.shardings, batches)
        return [sharding.combine_fetched(batch, fetched)
                for sharding, batch, fetched in zip(self.shardings, batches, rows)]

    @library_code
    def batch_outputs(self, batch: Batch, partial: bool) -> list[tf.Tensor]:
        """The flat per-feature activations, in their output shapes, of this replica's
        converted `batch` (`lookup_batches` + `feature_outputs`)."""
        activations = self.lookup_batches(batch.tables, batch.rows)
        return self.feature_outputs(
            [(table_activations, table_batch.feature_row_counts)
             for table_activations, table_batch in zip(activations, batch.tables)], partial)

    @library_code
    def raw_batch_outputs(self, table_features: Sequence[Sequence[Any]],
                          partial: bool) -> list[tf.Tensor]:
        """The flat per-feature activations of a raw forward-only batch (each table's features
        as enqueued), converted and looked up in one op (`lookup_features`). REQUIRES:
        `looks_up_features_directly()`."""
        return self.feature_outputs(self.lookup_features(self.table_inputs(table_features)),
                                    partial)

    @library_code
    def convert_raw_batch(self, table_features: Sequence[Sequence[Any]]) -> Batch:
        """A raw forward-only batch's tables converted, as `convert` converts a forward-only
        batch."""
        return Batch(self.convert_tables(self.table_inputs(table_features)), None,
                     tf.constant(False))

    def looks_up_features_directly(self) -> bool:
        """Whether `lookup_features` may look this replica's batch up: no parameter-server
        tasks, no lookup profile to record (it observes converted batches), and every table
        one block read as it is."""
        return (not self._parameter_servers and self._profiler is None
                and all(sharding.looks_up_features_directly for sharding in self.shardings))

    @library_code
    def lookup_features(self, table_inputs: Sequence[Sequence[FeatureInput]]
                        ) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """Each table's (activations [R, dim], feature_row_counts) of this replica's features,
        converted and looked up in one op, for `table_inputs` as `convert_tables` takes them.
        Not differentiable: convert the same inputs (`convert_tables`) to update. REQUIRES:
        `looks_up_features_directly()`."""
        return table_wise.lookup_features(self.shardings, table_inputs)

    @library_code
    def feature_outputs(self, table_activations: Sequence[tuple[tf.Tensor, tf.Tensor]],
                        partial: bool) -> list[tf.Tensor]:
        """The flat per-feature activations, in their output shapes, of each table's
        (activations [R, dim], feature_row_counts); `partial`: a batch may be smaller than the
        output shapes' (`dequeue(partial=True)`)."""
        outputs: list[Any] = [None] * len(self.feature_paths)
        output_shapes = self.output_shapes()
        for state, (activations, row_counts) in zip(self.tables, table_activations):
            for feature_index, block in state.split_outputs(
                    activations, row_counts, output_shapes, self.feature_paths, partial):
                outputs[feature_index] = block
        return outputs

    def check_trainable(self) -> None:
        """Raises ValueError if a table has no optimizer, so no update could run: checked
        before a training step takes its batch, which then stays for a correct call."""
        for state in self.tables:
            if state.config.optimizer is None:
                raise ValueError(f"Table {state.name} has no optimizer, so apply_gradients cannot "
                                 "update it: pass one to TPUEmbedding or to its TableConfig.")

    @library_code
    def activation_gradients(self, batches: Sequence[TableBatch],
                             flat_gradients: Sequence[tf.Tensor | None]) -> list[tf.Tensor]:
        """Each table's [R, dim] activation gradients of `batches`, from the flat per-feature
        gradients (None: zeros)."""
        return [state.activation_gradients(batch, flat_gradients)
                for state, batch in zip(self.tables, batches)]

    @library_code
    def apply_table_gradients(self, batches: Sequence[TableBatch],
                              activation_gradients: Sequence[tf.Tensor]) -> None:
        """Updates every table with this replica's [R, dim] activation gradients of `batches`,
        summed with the other replicas' in one merge_call (call it in replica context).

        Raises:
          ValueError: a table without an optimizer (`check_trainable`).
        """
        self.check_trainable()
        self._transport.apply(self.shardings, batches, activation_gradients,
                              len(self.replica_devices))
