"""TPUEmbedding: TF 2.21's `tf.tpu.experimental.embedding.TPUEmbedding`, run without a TPU.

Stock TF only runs this class under a TPUStrategy; here it runs under the default strategy,
`tf.distribute.MirroredStrategy` and `tf.distribute.ParameterServerStrategy`, with the TPU path's
behaviour: the same `enqueue` / `dequeue` / `apply_gradients` protocol, output shapes, messages
and checkpoints.

* Tables and slots are split into row blocks, one per replica device, or per PS task under
  ParameterServerStrategy (`layout`, `parameter_server`): contiguous blocks, or with
  `partition_strategy='mod'` row r in block r % n. They are not trainable variables: only
  `apply_gradients` updates them.
* `enqueue` (host side, cross-replica context) validates the features, converts each replica's
  features into one deduplicated CSR batch per table and puts it in the replica's engine queue
  (`queues`). With `pipeline_execution_with_tensor_core` it also looks the rows up.
* `dequeue` (replica context) takes the replica's batch, gathers its unique rows from every
  block on the block's device, applies the table's `QuantizationConfig`, combines the rows into
  activations and returns them in the structure of `feature_config`.
* `apply_gradients` (replica context) turns the activation gradients into one gradient per
  unique id, splits them by block, and in one `merge_call` updates every block on its device
  with the fused optimizer over all replicas' gradients: a row's gradients are summed over the
  global batch and the optimizer runs once per touched row, as on a TPU.
"""

from typing import Any, Mapping, Sequence

import tensorflow as tf
from tensorflow.python.distribute import device_util
from tensorflow.python.distribute import sharded_variable
from tensorflow.python.util import nest

from tf_embedding.feature_inputs import rules
from tf_embedding import embedding_base
from tf_embedding import sharding_plan as sharding_plan_lib
from tf_embedding.serving_keys import KeyIndex
from tf_embedding.sharded import batch_paths
from tf_embedding.sharded import dynamic_table
from tf_embedding.sharded import engine as engine_lib
from tf_embedding.sharded import engine_options
from tf_embedding.sharded import handoff
from tf_embedding.sharded import parameter_server
from tf_embedding.sharded import placement
from tf_embedding.sharded import queues
from tf_embedding.sharded.batch_types import BatchCarrier, TableSpec
from tf_embedding.sharded import layout as layout_lib
from tf_embedding.sharded.multi_worker import block_saver
from tf_embedding.sharded.multi_worker.block_variable import WorkerBlockVariable
from tf_embedding.sharded.profile_sampling import LookupProfiler
from tf_embedding.sharded.sharding import choice
from tf_embedding.sharded.sharding.kind import Sharding
from tf_embedding.sharded import table_state
from tf_embedding.sharded.table_state import TableState
from tf_embedding.sharded.transports.collectives import WorkerCollectives
from tf_embedding.sharded.transports.in_place import InPlace
from tf_embedding.sharded.transports.task_packets import TaskPackets

_ONE_COMPILED_FUNCTION = (
    "Inside a tf.function(jit_compile=True), dequeue() takes the batch that enqueue() gave "
    "earlier in that compiled function or in a tf.function that calls it (the TPU's shape: "
    "enqueue() in the outer function, dequeue() and apply_gradients() in the compiled one), "
    "and apply_gradients() must follow its dequeue() in the compiled function: XLA cannot run "
    "the engine's queues, which carry a batch between separate calls. Call enqueue() in the "
    "compiled function or in a tf.function around it, or compile the step without "
    "jit_compile (docs/xla.md).")


class TPUEmbedding(embedding_base.EmbeddingBase):
    """The TPU embedding mid-level API with tables sharded over the strategy's devices.

    Use it as TF's `TPUEmbedding` under a TPUStrategy (see docs/sharded.md):

    ```python
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding(feature_config, tf_embedding.Adagrad(0.1))
    dataset = strategy.experimental_distribute_dataset(
        dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False))

    @tf.function
    def training_step(iterator):
        def step(dense_features):
            with tf.GradientTape() as tape:
                activations = embedding.dequeue()
                tape.watch(activations)
                loss = ...
            embedding.apply_gradients(tape.gradient(loss, activations))

        embedding_features, dense_features = next(iterator)
        embedding.enqueue(embedding_features, training=True)
        strategy.run(step, args=(dense_features,))
    ```
    """

    _DYNAMIC_REFUSAL = None  # its tables may be dynamic (sharded/dynamic_table.py)

    def __init__(self, feature_config: Any, optimizer: Any,
                 pipeline_execution_with_tensor_core: bool = False, *,
                 table_devices: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
                 traffic: Mapping[str, str] | None = None,
                 partition_strategy: str = "div",
                 profile_data_directory: str | None = None,
                 collective_timeout_seconds: float | None = None,
                 sharding_plan: sharding_plan_lib.ShardingPlan | Mapping[str, Any] | None = None):
        """Creates the object; variables and queues are made by `build()` or the first `enqueue`.

        Args:
          feature_config: a nested structure of `FeatureConfig`s.
          optimizer: an embedding optimizer (or a translatable Keras optimizer) for tables without
            one of their own; None creates no slots and leaves such tables untrainable.
          pipeline_execution_with_tensor_core: look rows up at `enqueue` time, so a batch
            enqueued before the previous step's `apply_gradients` sees the table as it was then
            (activations one step stale, as on a TPU).
          table_devices: (not in TF) the devices of each table's row blocks, one block per
            entry (a device may repeat), or {table name: devices} (the default for tables not
            named): the replica devices, or every PS task under ParameterServerStrategy.
          traffic: (not in TF) {table name: "rows" or "partial"}: the unique ids go to the
            blocks and their rows come back (default), or each block combines its own lookups
            (docs/parameter_server_traffic.md; agrees to float rounding, not bitwise).
          partition_strategy: (v1's and TPUEstimator's option) 'div', contiguous blocks (TF's
            TPU layout), or 'mod', row r in block r % n: the same trained values and
            checkpoint tensors (stock TF's), so either restores the other at any block count.
          profile_data_directory: (TPUEstimator's option) a local directory where every
            33rd training batch of each replica (about 3%) adds lookup statistics (ids per
            example, unique ids, lookups per block of this layout) to one file per table,
            named by a hash of the table's and the engine's configuration, so models of the
            same configuration add to the same files (`tf-embedding stats --profile-dir`).
          collective_timeout_seconds: (not in TF) under MultiWorkerMirroredStrategy, seconds an
            exchange waits for the other workers before the step fails (default 600; 0: ever).
          sharding_plan: (not in TF) a `sharding_plan.ShardingPlan` (or its config dict): each
            table row-wise over every block device ('div' or 'mod'), row-wise pooled, or
            table-wise on one device (docs/sharding_plans.md); replaces `table_devices`,
            `traffic` and `partition_strategy`, and works under every strategy above.

        Raises:
          RuntimeError: under a strategy other than those docs/sharded.md names.
          ValueError, TypeError: a bad argument, or an option the strategy has no use for,
            named with its value (engine_options.py).
        """
        self._strategy = strategy = tf.distribute.get_strategy()
        parameter_servers, partition_strategy = engine_options.checked_arguments(
            strategy, feature_config, optimizer, pipeline_execution_with_tensor_core,
            partition_strategy, profile_data_directory)
        self._workers = self._no_dependency(engine_options.worker_group(
            strategy, table_devices, traffic, profile_data_directory, collective_timeout_seconds))
        self._profile_data_directory = profile_data_directory
        self._pipeline_execution_with_tensor_core = pipeline_execution_with_tensor_core
        super().__init__(feature_config, optimizer)
        self._parameter_servers = parameter_servers
        self._place_tables(table_devices, traffic, partition_strategy, sharding_plan)
        # Plain Python state, kept out of checkpoints (whose object graph is TF's); the tables'
        # states, queues and per-step operations (the engine) are made by build().
        self._feature_paths = self._no_dependency(
            [path for path, _ in nest.flatten_with_joined_string_paths(feature_config)])
        self._warned_paths = self._no_dependency(set())
        self._engine: engine_lib.Engine | None = None

    def _place_tables(self, table_devices: Sequence[str] | Mapping[str, Sequence[str]] | None,
                      traffic: Mapping[str, str] | None, partition_strategy: str,
                      sharding_plan: Any) -> None:
        """Checks and keeps where the replicas run, where the tables' blocks live and how
        lookups meet them (plain Python state, kept out of checkpoints)."""
        placement.check_one_way(sharding_plan, table_devices, traffic, partition_strategy)
        strategy = self._strategy
        devices = (tuple(strategy.extended.worker_devices) if tf.distribute.has_strategy()
                   else (None,))
        self._replica_devices = self._no_dependency(devices)
        if self._workers is not None:
            default = self._workers.devices
        else:
            default = (parameter_server.ps_devices(strategy) if self._parameter_servers
                       else devices)
        pipelined = self._pipeline_execution_with_tensor_core
        if sharding_plan is not None:
            placed = placement.from_plan(sharding_plan, default, self._table_config, pipelined,
                                         on_workers=self._workers is not None)
        else:
            placed = placement.from_options(table_devices, traffic, partition_strategy,
                                            default, self._table_config, pipelined,
                                            self._parameter_servers)
        self._placement = self._no_dependency(placed)

    @property
    def engine(self) -> engine_lib.Engine:
        """(Not in TF.) The engine's declared interface (`sharded/engine.py`), which the Keras
        front ends drive; builds this object if needed."""
        self._maybe_build()
        return self._engine

    @property
    def embedding_tables(self) -> dict[Any, sharded_variable.ShardedVariable]:
        """{TableConfig: table}; each table is a `ShardedVariable` of its row blocks."""
        self._maybe_build()
        return {table: self._variables[table.name]["parameters"]
                for table in self._table_config}

    def table_blocks(self) -> dict[str, dict[str, list[layout_lib.TableBlock]]]:
        """(Not in TF.) {table name: {"parameters" or slot name: [TableBlock(rows, variable)]}}:
        the row blocks of each table and slot this process holds, each with the table rows it
        holds (a `range`, in the block's order). Under MultiWorkerMirroredStrategy that is this
        worker's own blocks, no collective: the way to read a table too large to gather
        (`WorkerBlockVariable.full_value` refuses those); elsewhere every block. Builds if
        needed."""
        self._maybe_build()
        blocks = {}
        for table in self._table_config:
            layout = self._layout(table)
            blocks[table.name] = {
                name: [layout_lib.TableBlock(layout.row_range(index), block)
                       for index, block in _held_blocks(variable)]
                for name, variable in self._variables[table.name].items()}
        return blocks

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        """(Not in TF.) {dynamic table: its counts now (`dynamic_table.STATISTICS`)}."""
        self._maybe_build()
        return {name: table.statistics() for name, table in self._dynamic_tables.items()}

    def serving_key_indexes(self) -> dict[str, KeyIndex]:
        """(Not in TF.) {dynamic table: what stock lookups read its keys' rows from, for
        `serving_embedding_lookup(key_indexes=...)` (`DynamicTable.serving_keys`)}."""
        self._maybe_build()
        return {name: table.serving_keys() for name, table in self._dynamic_tables.items()}

    def _retrieve_variables(self) -> None:
        """TF's hook that copies the tables from TPU memory into their host variables (before
        reading or saving them). Here the variables are the tables, updated in place."""

    def _load_variables(self) -> None:
        """TF's hook that copies the host variables into TPU memory (after a restore or an
        assignment). Here every lookup and update reads the variables themselves."""

    @engine_lib.library_code
    def build(self, per_replica_input_shapes: Any = None,
              per_replica_batch_size: int | None = None) -> None:
        """Creates the sharded variables and the engine queues, and fixes output shapes.

        Args:
          per_replica_input_shapes: input shapes (`TensorShape`s in the structure of
            `feature_config`) of one replica's features, or (deprecated) a batch size.
          per_replica_batch_size: (deprecated) the per-replica batch size.

        Raises:
          ValueError: shapes contradicting `FeatureConfig.output_shape`, or not fully defined.
        """
        if self._built:
            return
        output_shapes = rules.output_shapes_from_build_arguments(
            per_replica_input_shapes, per_replica_batch_size, nest.flatten(self._feature_config))
        if output_shapes is not None:
            self._set_output_shapes(output_shapes)
        super().build()
        flat_features = nest.flatten(self._feature_config)
        indices = embedding_base.feature_indices_by_table(flat_features)
        tables = [TableState(table, tuple(indices.get(table.name, ())), self._layout(table),
                             self._variables[table.name], self._dynamic_tables.get(table.name))
                  for table in self._table_config]
        if self._workers is None:
            table_state.check_slot_layouts(tables)
        shardings = [choice.sharding_for(
                         state, pooled=state.name in self._placement.pooled,
                         owners=(None if self._workers is None
                                 else self._workers.ranks_of(state.layout.devices)))
                     for state in tables]
        self._engine = self._no_dependency(engine_lib.Engine(
            shardings, self._transport(), flat_features, self._feature_paths,
            lambda: self._output_shapes, self._replica_devices, self._replica_carriers(shardings),
            handoff.FunctionHandoff(_ONE_COMPILED_FUNCTION),
            pipelined=self._pipeline_execution_with_tensor_core,
            parameter_servers=self._parameter_servers,
            profiler=self._profiler(tables, flat_features), workers=self._workers))

    def _profiler(self, tables: list[TableState],
                  flat_features: list[Any]) -> LookupProfiler | None:
        """The `profile_data_directory` sampler, if one was asked for."""
        if not self._profile_data_directory:
            return None
        return LookupProfiler(self._profile_data_directory, tables,
                              engine_lib.group_by_table(tables, flat_features),
                              [len(self._placement.devices[state.name]) for state in tables],
                              len(self._replica_devices))

    def _transport(self) -> Any:
        """How the shardings' roles move tensors: the workers' collectives, packets to the PS
        tasks, or in place on this machine's devices."""
        if self._workers is not None:
            return WorkerCollectives(self._workers)
        return TaskPackets() if self._parameter_servers else InPlace()

    def _replica_carriers(self, shardings: list[Sharding]) -> list[BatchCarrier]:
        """Each replica's batch carrier: its engine queues, or under ParameterServerStrategy
        the hand-off of the scheduled function (a worker runs one replica)."""
        if self._parameter_servers:
            parameter_server.check_ops_on(
                list(dict.fromkeys(d for ds in self._placement.devices.values() for d in ds)))
            return [handoff.FunctionHandoff(parameter_server.ONE_FUNCTION)]
        specs = [TableSpec(len(sharding.table.feature_indices), sharding.table.config.dim,
                           deduplicated=sharding.deduplicated)
                 for sharding in shardings]
        return [queues.ReplicaQueues(replica, device, specs,
                                     self._pipeline_execution_with_tensor_core)
                for replica, device in enumerate(self._replica_devices)]

    @engine_lib.library_code
    def enqueue(self, features: Any, weights: Any = None, training: bool = True,
                name: str | None = None, device: str | None = None) -> None:
        """Hands a batch of ids to the engine of each replica, for the next `dequeue`.

        Call it in cross-replica context (outside `strategy.run`) with features that are
        per-replica values (`strategy.experimental_distribute_dataset` with
        `InputOptions(experimental_fetch_to_device=False)`) or plain nests, which every replica
        receives; with `device` (one of `strategy.extended.worker_devices`) to feed one replica;
        or inside `strategy.run` to feed the running replica. Under the default strategy, pass
        plain nests.

        Args:
          features: `Tensor`s, `SparseTensor`s or `RaggedTensor`s in the structure of
            `feature_config`; not both sparse and ragged in one call.
          weights: None, or per-id weights in the same structure (None entries allowed).
          training: False for a forward-only batch (no `apply_gradients` may follow).
          name: a name scope for the ops.
          device: the replica device to feed, for plain features in cross-replica context.

        Raises:
          ValueError / TypeError: features or weights not matching `feature_config` (TF's
            messages), or `device` not a replica device.
          RuntimeError: an earlier batch of a replica was not dequeued yet (eagerly; inside a
            tf.function the step fails with InvalidArgumentError), or called under another
            strategy.
        """
        nest.assert_same_structure(self._feature_config, features)
        flat_inputs = nest.flatten(features)
        flat_weights = [None] * len(flat_inputs)
        if weights is not None:
            nest.assert_same_structure(self._feature_config, weights)
            flat_weights = nest.flatten(weights)
        replicas = self._enqueue_replicas(device)
        flat_features = nest.flatten(self._feature_config)

        # As TF does, shapes are taken from the first replica's features.
        first = [batch_paths.local(self._strategy, inp, replicas[0]) for inp in flat_inputs]
        rules.check_enqueue_types(self._feature_paths, first)
        input_shapes = [rules.input_shape(path, inp, feature)
                        for path, inp, feature in zip(self._feature_paths, first, flat_features)]
        self._maybe_build()
        self._set_output_shapes(
            rules.output_shapes_from_input_shapes(input_shapes, flat_features))

        training = tf.convert_to_tensor(training, tf.bool)
        # A dynamic table's index counts a step's global batch once: every replica's batch is
        # enqueued in one strategy.run, where they meet in merge_calls (dynamic_table).
        cross_replica = not _in_replica_context()
        if self._dynamic_tables and cross_replica and len(replicas) < len(self._replica_devices):
            dynamic_table.check_replica_enqueue(self._dynamic_tables, training)
        with tf.name_scope(name or "enqueue"):
            batch_paths.enqueue_replicas(
                self._engine, self._strategy, replicas, flat_inputs, flat_weights, training,
                together=bool(self._dynamic_tables) and cross_replica and len(replicas) > 1,
                replica_id=lambda: self._replica_id("enqueue"))

    @engine_lib.library_code
    def dequeue(self, name: str | None = None, partial: bool = False) -> Any:
        """Returns this replica's activations of the next enqueued batch.

        Call it inside `strategy.run` (directly under the default strategy). Activations have
        the structure of `feature_config` and the shapes `output_shape + [dim]`.

        Args:
          name: a name scope for the ops.
          partial: accept a batch smaller than the per-replica batch this object was built for
            (a final partial batch, with an unknown static batch size): the activations' first
            dimension is then the batch's.

        Raises:
          RuntimeError: unbuilt, outside a replica context, or nothing enqueued for this
            replica or a training batch still awaiting `apply_gradients` (both eagerly; inside a
            tf.function the step fails with InvalidArgumentError).
          ValueError: output shapes still unknown (call `build` with the input shapes).
        """
        if not self._built:
            raise RuntimeError("dequeue called on unbuilt TPUEmbedding object. "
                               "Please either call enqueue first or manually call "
                               "the build method.")
        rules.check_fully_defined(self._feature_paths, self._output_shapes)
        replica = self._replica_id("dequeue")
        with tf.name_scope(name or "dequeue"):
            outputs = batch_paths.dequeue_outputs(self._engine, replica, partial)
        return nest.pack_sequence_as(self._feature_config, outputs)

    @engine_lib.library_code
    def apply_gradients(self, gradients: Any, name: str | None = None) -> None:
        """Updates the tables with the gradients of the last dequeued training activations.

        Call it inside `strategy.run` after `dequeue` (directly under the default strategy).
        Gradients of all replicas are summed per table row, and each touched row is updated
        once. A None gradient counts as zeros (TF's warning is logged once per feature). A
        call that raises leaves the dequeued batch in place, for a correct call to train on.

        Args:
          gradients: gradients of the activations, in the structure of `feature_config`.
          name: a name scope for the ops.

        Raises:
          RuntimeError: unbuilt, outside a replica context, or no training batch dequeued
            since the last `apply_gradients` (eagerly; inside a tf.function the step fails with
            InvalidArgumentError).
          ValueError / TypeError: gradients not matching `feature_config` (TF's messages), or a
            table without an optimizer.
        """
        if not self._built:
            raise RuntimeError("apply_gradients called on unbuilt TPUEmbedding "
                               "object. Please either call enqueue first or manually "
                               "call the build method.")
        # Every check comes before the batch is taken (`take_pending`).
        engine = self._engine
        engine.check_trainable()
        flat_gradients = rules.check_gradients(
            self._feature_config, gradients, self._output_shapes, self._warned_paths)
        replica = self._replica_id("apply_gradients")
        with tf.name_scope(name or "apply_gradients"):
            batch_paths.apply_gradients(engine, replica, flat_gradients)

    def _create_variables_and_slots(self) -> dict[str, dict[str, Any]]:
        # As on a TPU, tables are not trainable variables: only apply_gradients updates them.
        variables = {table.name: self._create_variables(table, trainable=False)
                     for table in self._table_config}
        self._dynamic_tables = self._no_dependency(dynamic_table.create_dynamic_tables(
            self, self._table_config, self._layout, variables,
            parameter_servers=self._parameter_servers, workers=self._workers))
        if self._workers is not None:
            # Saves each worker's blocks into the chief's checkpoint (block_saver).
            self._track_trackable(block_saver.BlockWriter(self), name=block_saver.WRITER_NAME)
        return variables

    def _create_variable(self, table: Any, name: str, shape: tuple[int, int], dtype: tf.DType,
                         initializer: embedding_base.Initializer,
                         trainable: bool) -> Any:
        if self._workers is not None:
            return WorkerBlockVariable(name, shape, dtype, initializer, trainable,
                                       self._layout(table), self._workers)
        return self._layout(table).create_variable(name, shape, dtype, initializer, trainable)

    def _layout(self, table: Any) -> layout_lib.ShardLayout:
        return layout_lib.ShardLayout(table.vocabulary_size,
                                      self._placement.devices[table.name],
                                      self._placement.partition_strategies[table.name])

    def _set_output_shapes(self, incoming: list[tf.TensorShape]) -> None:
        rules.check_output_shapes(self._feature_paths, self._output_shapes, incoming)
        self._output_shapes = rules.update_output_shapes(self._output_shapes, incoming)
        rules.check_fully_defined(self._feature_paths, self._output_shapes)

    def _enqueue_replicas(self, device: str | None) -> list[int]:
        """The replicas an enqueue call feeds, from the calling context and `device`."""
        self._check_strategy("enqueue")
        if _in_replica_context():
            return [self._replica_id("enqueue")]
        if device is None:
            return list(range(len(self._replica_devices)))
        canonical = device_util.canonicalize(device)
        for replica, replica_device in enumerate(self._replica_devices):
            if replica_device is not None and device_util.canonicalize(replica_device) == canonical:
                return [replica]
        raise ValueError(f"Device {device} passed to enqueue is not a replica device of this "
                         f"TPUEmbedding's strategy: {list(self._replica_devices)}.")

    def _replica_id(self, method: str) -> int:
        """The id of the calling replica; a lone replica may be called without strategy.run."""
        self._check_strategy(method)
        context = tf.distribute.get_replica_context()
        if context is not None and self._workers is not None and (
                context.strategy is self._strategy):
            return 0  # a worker's one replica (its id in sync is the worker's)
        if context is not None and (context.strategy is self._strategy or
                                    len(self._replica_devices) == 1):
            return int(tf.get_static_value(context.replica_id_in_sync_group))
        raise RuntimeError(
            f"{method}() must be called in a replica context: inside strategy.run() of the "
            f"{type(self._strategy).__name__} this TPUEmbedding was created under.")

    def _check_strategy(self, method: str) -> None:
        strategy = tf.distribute.get_strategy()
        if tf.distribute.has_strategy() and strategy is not self._strategy:
            raise RuntimeError(
                f"{method}() called under another strategy ({type(strategy).__name__}) than the "
                f"one this TPUEmbedding was created under ({type(self._strategy).__name__}).")


def _in_replica_context() -> bool:
    """Whether the caller runs in a replica context of a strategy (inside `strategy.run`), not
    in cross-replica context or under the default strategy."""
    return tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context()


def _held_blocks(variable: Any) -> list[tuple[int, tf.Variable]]:
    """(block index, block variable) of each block of `variable` this process holds."""
    if isinstance(variable, WorkerBlockVariable):
        return [] if variable.block is None else [(variable.block_index, variable.block)]
    return list(enumerate(variable))
