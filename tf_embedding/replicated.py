"""TPUEmbeddingV0: tables replicated on every replica, looked up with the fused kernels.

Each replica looks up in its own copy of the tables (under `MirroredStrategy` the tables are
mirrored variables). The table gradient reaches `tf.GradientTape` as `IndexedSlices` with one
row per distinct id, so a Keras optimizer trains the tables; under a strategy, Keras all-reduces
those gradients. Lookups give the outputs of TF's CPU `serving_embedding_lookup` for every input
kind and option.

Where the custom ops cannot be used, a table is looked up with gathers and segment sums instead,
with the same results: while a SavedModel is saved (it must load in TensorFlow without
tf_embedding), and for a ragged input whose `output_shape` needs a batch size known only at run
time. Inside an XLA-compiled function (`jit_compile=True`) the custom ops run through their XLA
kernels (docs/xla.md).
"""
import contextlib
import math
from typing import Any, NamedTuple

import tensorflow as tf
from tensorflow.python.saved_model import save_context
from tensorflow.python.util import nest

from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.feature_inputs.feature_input import activation_shape
from tf_embedding.feature_inputs.feature_input import output_shape_factor_message
from tf_embedding.feature_inputs.feature_input import split_activations
from tf_embedding import config
from tf_embedding import ops
from tf_embedding import embedding_base


class TPUEmbeddingV0(embedding_base.EmbeddingBase):
    """The replicated embedding API: `build`, `__call__`, `embedding_lookup`, `embedding_tables`.

    Unlike TF's class, it needs no TPUStrategy: it runs under the default strategy and under any
    `tf.distribute` strategy whose replicas hold mirrored variables. The variables belong to the
    strategy in scope when the object is created, wherever it is first used.

    The tables are trained by a Keras optimizer, as in TF's documented loop:

        optimizer = keras.optimizers.SGD(0.1)

        @tf.function
        def train_step(features):
            def step(features):
                tables = list(embedding.embedding_tables.values())
                with tf.GradientTape() as tape:
                    loss = ...  # a function of embedding(features)
                gradients = tape.gradient(loss, tables)  # IndexedSlices
                optimizer.apply_gradients(zip(gradients, tables))
            strategy.run(step, args=(features,))

    To make the embedding's slot variables the Keras optimizer's own (so that a checkpoint of the
    embedding carries the slots Keras trains), create them through the Keras optimizer with
    `slot_variable_creation_fn`, under Keras's slot names. tf_keras's legacy optimizers have
    `add_slot(table, name, initializer)`, which returns the slot if it already exists. Keras 3
    creates each slot in `build()` with `add_variable_from_reference(variable, name,
    initializer)`, which always makes a new variable; making it return a slot created earlier
    gives the same sharing:

        slots = {}  # (table, Keras slot name) -> slot variable

        class Adagrad(keras.optimizers.Adagrad):
            def add_variable_from_reference(self, reference_variable, name=None,
                                            initializer="zeros"):
                key = (id(reference_variable), name)
                if key not in slots:
                    slots[key] = super().add_variable_from_reference(
                        reference_variable, name, initializer)
                return slots[key]

        optimizer = Adagrad(learning_rate=0.1)

        def slot_variable_creation_fn(table, slot_names, slot_initializers):
            keras_names = {"accumulators": "accumulator"}
            return {slot: optimizer.add_variable_from_reference(table, keras_names[slot],
                                                                initializer)
                    for slot, initializer in zip(slot_names, slot_initializers)}

        embedding = TPUEmbeddingV0(feature_config, tf_embedding.Adagrad(
            0.1, slot_variable_creation_fn=slot_variable_creation_fn))
    """

    def __init__(self, feature_config: Any, optimizer: Any):
        """Creates the object; variables are created by `build()` or on first use.

        Args:
          feature_config: a nested structure of `FeatureConfig`s.
          optimizer: an embedding optimizer for tables without one of their own (its slots are
            what checkpoints carry; training is the Keras optimizer's job), or None.

        Raises:
          TypeError, ValueError: a `feature_config` that holds no FeatureConfigs, an optimizer
            class (argument_checks.py), or TF's errors.
        """
        config.check_embedding_arguments("TPUEmbeddingV0", feature_config, optimizer)
        super().__init__(feature_config, optimizer)
        self._strategy = (tf.distribute.get_strategy() if tf.distribute.has_strategy()
                          else None)

    def build(self) -> None:
        """Creates the table and slot variables (once), under the creation-time strategy."""
        # The first use may come from outside the scope (eager code); inside it, entering the
        # scope again (e.g. from a replica function) is an error.
        in_scope = self._strategy is None or tf.distribute.get_strategy() is self._strategy
        with contextlib.nullcontext() if in_scope else self._strategy.scope():
            super().build()

    def embedding_lookup(self, features: Any, weights: Any = None) -> Any:
        """Looks up `features` (a sub-structure of `feature_config`) with optional `weights`.

        Returns the activations in the structure of `features`, with the shapes TF's
        `serving_embedding_lookup` gives.
        """
        self._maybe_build()
        validated = cpu_rules.validate_features(features, weights, self._feature_config)
        by_table = embedding_base.feature_indices_by_table([item.feature for item in validated])

        outputs: list[tf.Tensor | None] = [None] * len(validated)
        # The tables the custom ops look up, all in one op (`features_lookup`, differentiable):
        # (the table's config, its variable, its features' indices and plans).
        fused: list[tuple[Any, Any, list[int], list[cpu_rules.CpuLookupPlan]]] = []
        for indices in by_table.values():
            table = validated[indices[0]].feature.table
            variable = self._table_variable(table.name)
            plans = [cpu_rules.cpu_lookup_plan(validated[i]) for i in indices]
            # A SavedModel must load in TensorFlow (or TF Serving) without tf_embedding. (Inside
            # jit_compile=True the fused op runs through its XLA kernel.)
            if save_context.in_save_context() or any(plan.runtime_output_shape_feature
                                                     for plan in plans):
                blocks = _stock_lookup(variable, table, plans)
                for index, plan, block in zip(indices, plans, blocks):
                    outputs[index] = plan.finish(block)
            else:
                fused.append((table, variable, indices, plans))
        looked_up = ops.features_lookup(
            [ops.LookedUpTable(variable, table.name, table.vocabulary_size, table.combiner)
             for table, variable, _, _ in fused],
            [[plan.feature_input for plan in plans] for _, _, _, plans in fused])
        for (table, _, indices, plans), (activations, row_counts) in zip(fused, looked_up):
            feature_inputs = [plan.feature_input for plan in plans]
            blocks = split_activations(activations, row_counts, feature_inputs,
                                                  table.dim)
            for index, plan, block in zip(indices, plans, blocks):
                outputs[index] = plan.finish(block)
        return nest.pack_sequence_as(features, outputs)

    def _table_variable(self, table_name: str) -> Any:
        """The table's variable as this context reads it."""
        variable = self._variables[table_name]["parameters"]
        if tf.distribute.in_cross_replica_context():
            # Outside `strategy.run` a mirrored table has no replica copy to use (its `handle`
            # raises); read the first copy, as stock ops reading the variable do.
            variable = tf.distribute.get_strategy().experimental_local_results(variable)[0]
        return variable


def _stock_lookup(table_variable: tf.Variable, table: Any,
                  plans: list[cpu_rules.CpuLookupPlan]) -> list[tf.Tensor]:
    """The fused path's activation blocks for one table's `plans`, from stock ops XLA compiles.

    Every shape follows from the inputs' shapes: under XLA, `tf.unique` of a tensor whose size
    depends on values (such as a `tf.boolean_mask`) gets a wrong gradient. So the lookups that
    the fused path drops are kept, without an output row, reading row 0 of the table; the
    gradient then lists id 0 with a zero row.
    """
    feature_inputs = [_with_static_dense_shape(plan.feature_input) for plan in plans]
    lookups = [_lookup_rows(feature_input, table.combiner, plan.runtime_output_shape_feature)
               for plan, feature_input in zip(plans, feature_inputs)]
    # One gather of each distinct id for the whole table, so that the table gradient sums each
    # id's lookups over all features, as the fused kernel does (Keras 3 optimizers apply
    # IndexedSlices row by row, duplicates included).
    unique_ids, positions = tf.unique(tf.concat([lookup.ids for lookup in lookups], axis=0))
    embeddings = tf.split(tf.gather(tf.gather(table_variable, unique_ids), positions),
                          tf.stack([tf.size(lookup.ids) for lookup in lookups]),
                          num=len(lookups))
    blocks = []
    for plan, feature_input, lookup, rows in zip(plans, feature_inputs, lookups, embeddings):
        activations = tf.math.unsorted_segment_sum(rows * lookup.gains[:, tf.newaxis],
                                                   lookup.rows, lookup.num_rows)
        if not plan.runtime_output_shape_feature:  # finish() reshapes those to output_shape.
            activations = tf.reshape(activations,
                                     activation_shape(feature_input, table.dim))
        blocks.append(activations)
    return blocks


def _with_static_dense_shape(feature_input: FeatureInput) -> FeatureInput:
    """A sparse input's dense shape as a constant when known: XLA needs the row counts and
    output shapes derived from it at compile time."""
    tensor = feature_input.tensor
    if isinstance(tensor, tf.SparseTensor) and tensor.shape.is_fully_defined():
        return feature_input._replace(
            tensor=tf.SparseTensor(tensor.indices, tensor.values, tensor.shape.as_list()))
    return feature_input


class _Lookups(NamedTuple):
    """One feature's lookups: the id, output row (-1: none) and gain of each, and the row count."""

    ids: tf.Tensor  # int64 [n]
    rows: tf.Tensor  # int64 [n]
    gains: tf.Tensor  # float32 [n]
    num_rows: tf.Tensor  # int64 scalar


def _lookup_rows(feature_input: FeatureInput, combiner: str,
                 runtime_output_shape_feature: Any) -> _Lookups:
    """A feature's lookups, with the row layout and gains of the CSR conversion
    (docs/kernels.md) and `runtime_output_shape_feature` as in `cpu_rules.CpuLookupPlan`."""
    tensor = feature_input.tensor
    if not isinstance(tensor, (tf.SparseTensor, tf.RaggedTensor)):
        ids = tf.cast(tf.reshape(tensor, [-1]), tf.int64)
        num_rows = tf.size(ids, tf.int64)
        return _Lookups(ids, tf.range(num_rows), tf.ones_like(ids, tf.float32), num_rows)
    if isinstance(tensor, tf.RaggedTensor):
        ids, weights = tensor.flat_values, feature_input.weight
        weights = None if weights is None else weights.flat_values
        row_splits = tf.cast(tensor.row_splits, tf.int64)
        samples = tensor.value_rowids()
        positions = tf.range(tf.size(ids, tf.int64)) - tf.gather(row_splits, samples)
        num_samples = tf.size(row_splits, tf.int64) - 1
    else:
        ids, weights = tensor.values, feature_input.weight
        weights = None if weights is None else weights.values
        if feature_input.max_sequence_length > 0:
            samples, positions = tensor.indices[:, 0], tensor.indices[:, 1]
            num_samples = tensor.dense_shape[0]
        else:
            # One output row per index of every dimension but the last, in row-major order.
            sample_shape = tensor.dense_shape[:-1]
            strides = tf.math.cumprod(sample_shape, exclusive=True, reverse=True)
            samples = tf.reduce_sum(tensor.indices[:, :-1] * strides, axis=1)
            positions = tensor.indices[:, -1]
            num_samples = tf.reduce_prod(sample_shape)
    ids, samples = tf.cast(ids, tf.int64), tf.cast(samples, tf.int64)
    weights = tf.ones_like(ids, tf.float32) if weights is None else tf.cast(weights, tf.float32)

    keep = tf.ones_like(ids, tf.bool)
    if feature_input.prune_invalid:
        keep = ids >= 0
        if combiner != "sum":
            keep &= weights > 0
    # 0 pools each sample's lookups into one row; L > 0 gives each sample L rows, one lookup each.
    if runtime_output_shape_feature:
        sequence_length = _runtime_sequence_length(runtime_output_shape_feature, num_samples)
    else:
        sequence_length = tf.constant(feature_input.max_sequence_length, tf.int64)
    is_sequence = sequence_length > 0
    keep &= tf.logical_not(is_sequence) | (positions < sequence_length)
    # A sequence row holds one lookup of weight 1, whose gain is 1 under every combiner.
    weights = tf.where(keep, tf.where(is_sequence, 1.0, weights), 0.0)
    # Dropped lookups read row 0 of the table (present in every table) and add nothing:
    # unsorted_segment_sum skips negative rows.
    rows = tf.where(keep, tf.where(is_sequence, samples * sequence_length + positions, samples), -1)
    ids = tf.where(keep, ids, 0)
    num_rows = num_samples * tf.maximum(sequence_length, 1)
    return _Lookups(ids, rows, _gains(weights, rows, num_rows, combiner), num_rows)


def _runtime_sequence_length(feature: Any, batch_size: tf.Tensor) -> tf.Tensor:
    """`feature_input.ragged_sequence_length` for a batch size known at run time.

    0 if the batch fills `feature.output_shape`, else the positions per sample. When neither fits
    it fails at run time with TF's message (XLA drops the check).
    """
    output_size = math.prod(feature.output_shape.as_list())
    sequence_length = tf.where(tf.equal(batch_size, output_size), tf.constant(0, tf.int64),
                               output_size // tf.maximum(batch_size, 1))
    fits = tf.equal(batch_size * tf.maximum(sequence_length, 1), output_size)
    message = tf.strings.format(output_shape_factor_message(feature, "{}"),
                                batch_size)
    with tf.control_dependencies([tf.debugging.Assert(fits, [message])]):
        return tf.identity(sequence_length)


def _gains(weights: tf.Tensor, rows: tf.Tensor, num_rows: tf.Tensor, combiner: str) -> tf.Tensor:
    """Weight times combiner factor: sum w; mean w / sum(w); sqrtn w / sqrt(sum(w^2))."""
    norms = cpu_rules.combiner_norm(
        combiner, weights, lambda values: tf.math.unsorted_segment_sum(values, rows, num_rows))
    if norms is None:
        return weights
    # Dropped lookups (row -1) have weight 0, so any norm will do.
    return tf.math.divide_no_nan(weights, tf.gather(norms, tf.maximum(rows, 0)))
