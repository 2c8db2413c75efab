"""Table and slot variables, named and tracked as TF does, shared by every embedding class.

`EmbeddingBase` mirrors TF 2.21's `TPUEmbeddingBase`: the same config handling (including its
mutation of the user's `TableConfig`s) and the same tracked attributes, in the same order, so that
a checkpoint's object graph and keys match stock TF's node for node:
`embedding/<table>/.ATTRIBUTES/VARIABLE_VALUE` and `embedding/<table>.S<slot>/...`.
"""

import functools
from typing import Any, Callable, Sequence

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2
from tensorflow.python.trackable import autotrackable
from tensorflow.python.trackable import constants as base_constants
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import dynamic_vocabulary
from tf_embedding.optimizers import keras_translation

Initializer = Callable[..., Any]


class EmbeddingBase(autotrackable.AutoTrackable):
    """Config handling and variable creation common to the embedding classes.

    The classes with a CPU lookup (`TPUEmbeddingV0`, `TPUEmbeddingForServing`) implement
    `embedding_lookup`, which calling them runs; the sharded `TPUEmbedding` looks up through
    `enqueue` and `dequeue` and, like TF's, cannot be called. Subclasses may override
    `_create_variable` to change how one table or slot variable is made (sharded, mirrored, ...)
    without touching its name, tracking or restore-on-create.
    """

    # Why this class cannot hold a dynamic table (None: it can).
    _DYNAMIC_REFUSAL: str | None = (
        "its lookups read ids as table rows, and a dynamic table's keys need the key index "
        "that only the sharded tf_embedding.TPUEmbedding keeps.")

    def __init__(self, feature_config: Any, optimizer: Any = None):
        # The assignment order of the list/dict attributes below fixes the order of this object's
        # children in a checkpoint's object graph; it is TF's.
        self._feature_config = feature_config
        flat_features = tf.nest.flatten(feature_config)
        self._output_shapes = [feature.output_shape for feature in flat_features]
        # Tables in order of first occurrence, so table_{i} names and variable creation order are
        # deterministic across instantiations. `in` (not a set) keeps TF's equality semantics.
        self._table_config = []
        for feature in flat_features:
            if feature.table not in self._table_config:
                self._table_config.append(feature.table)

        # One translation per optimizer object, so tables given the same optimizer share one
        # embedding optimizer, as they share TF's global optimizer.
        resolved = {}
        table_names = []
        for i, table in enumerate(self._table_config):
            # TF writes the global optimizer and default names into the user's configs; code that
            # reads `table.optimizer` / `table.name` afterwards relies on it. Here the optimizer
            # written is the resolved one, and the config remembers which global optimizer it
            # came from: TF silently trains a later object's tables with the first's.
            if table.optimizer is None:
                table.optimizer = optimizer
                setattr(table, _GLOBAL_OPTIMIZER, optimizer)
            else:
                _check_global_optimizer(table, optimizer)
            if id(table.optimizer) not in resolved:
                resolved[id(table.optimizer)] = keras_translation.embedding_optimizer(
                    table.optimizer, rule="keras")
            table.optimizer = resolved[id(table.optimizer)]
            if table.name is None:
                table.name = "table_{}".format(i)
            if table.name in table_names:
                raise ValueError("Tables must have a unique name. "
                                 f"Multiple tables with name {table.name} found.")
            table_names.append(table.name)
            if dynamic_vocabulary.dynamic_of(table) is not None and self._DYNAMIC_REFUSAL:
                raise dynamic_vocabulary.dynamic_table_error(
                    table.name, f"{type(self).__name__} cannot hold it: {self._DYNAMIC_REFUSAL}")
        self._built = False

    @property
    def embedding_tables(self) -> dict[Any, tf.Variable]:
        """{TableConfig: table variable}; builds if needed."""
        self._maybe_build()
        return {table: self._variables[table.name]["parameters"]
                for table in self._table_config}

    def table_variables(self) -> dict[str, dict[str, Any]]:
        """(Not in TF.) {table name: {"parameters": table, <slot name>: slot}}; builds if
        needed. Each value is the whole variable, whatever its blocks."""
        self._maybe_build()
        return {name: dict(variables) for name, variables in self._variables.items()}

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        """(Not in TF.) Each dynamic table's counts now, by table name: none here (only the
        sharded `TPUEmbedding` holds dynamic tables)."""
        return {}

    def serving_key_indexes(self) -> dict[str, Any]:
        """(Not in TF.) {dynamic table: what stock lookups read its keys' rows from}: none
        here (only the sharded `TPUEmbedding` holds dynamic tables)."""
        return {}

    def embedding_lookup(self, features: Any, weights: Any = None) -> Any:
        """Looks up the embedding tables for `features` (the classes with a CPU lookup)."""
        raise TypeError(f"'{type(self).__name__}' object is not callable: it looks features up "
                        "with enqueue() and dequeue(), as TF's does.")

    def build(self) -> None:
        """Creates the table and slot variables (once)."""
        if self._built:
            return
        self._variables = self._create_variables_and_slots()
        self._built = True

    def __call__(self, features: Any, weights: Any = None) -> Any:
        """Builds if needed, then `embedding_lookup(features, weights)`."""
        self._maybe_build()
        return self.embedding_lookup(features, weights)

    def _checkpoint_adapter(self, path: str) -> None:
        """TF's hook, called when a checkpoint restores into this object, before any of its
        variables is read: once built, a table or slot whose checkpointed shape differs raises
        ValueError naming the table and both shapes, before anything is assigned (TF would
        fail in RestoreV2 with a raw shape error). Restores before `build()` are checked as each
        variable is created (`_check_checkpoint_shape`)."""
        if self._built and isinstance(path, str):
            _check_checkpoint_fits(path, self._variables)
        return super()._checkpoint_adapter(path)

    def _maybe_build(self) -> None:
        if not self._built:
            # Variables must be created eagerly even when the first use is inside a tf.function:
            # otherwise they would be captured in (or fail inside) the traced graph.
            with tf.init_scope():
                self.build()

    def _create_variables_and_slots(self) -> dict[str, dict[str, tf.Variable]]:
        """Returns {table name: {"parameters": table, <slot>: slot variable}}."""
        return {table.name: self._create_variables(table, trainable=True)
                for table in self._table_config}

    def _create_variables(self, table: Any, trainable: bool) -> dict[str, tf.Variable]:
        """Creates `table`'s parameters (tracked as `<table>`) and slots (`<table>/<slot>`)."""
        variable_shape = (table.vocabulary_size, table.dim)

        def getter(name: str, shape: Any, dtype: tf.DType, initializer: Initializer,
                   trainable: bool) -> tf.Variable:
            # _add_variable_with_custom_getter sometimes clears `shape`; the table's shape is
            # authoritative.
            del shape
            _check_checkpoint_shape(table.name, name, initializer, variable_shape)
            if not isinstance(initializer, trackable_base.CheckpointInitialValueCallable):
                initializer = ShapeCheckedInitializer(table.name, name, initializer)
            return self._create_variable(table, name, variable_shape, dtype, initializer,
                                         trainable)

        def variable_creator(name: str, initializer: Initializer,
                             trainable: bool = True) -> tf.Variable:
            # Going through _add_variable_with_custom_getter lets a checkpoint restored before
            # build() supply the initial value (restore-on-create, no double initialization).
            # TF always creates float32 tables, whatever TableConfig.dtype says.
            return self._add_variable_with_custom_getter(
                name=name, initializer=initializer, shape=variable_shape, dtype=tf.float32,
                getter=getter, trainable=trainable)

        parameters = variable_creator(table.name, table.initializer, trainable=trainable)

        def slot_creator(name: str, initializer: Initializer) -> tf.Variable:
            return variable_creator(table.name + "/" + name, initializer, trainable=False)

        if table.optimizer is not None:
            variables = table.optimizer._create_slots(parameters, slot_creator)
        else:
            variables = {}
        variables["parameters"] = parameters
        return variables

    def _create_variable(self, table: Any, name: str, shape: tuple[int, int], dtype: tf.DType,
                         initializer: Initializer, trainable: bool) -> tf.Variable:
        """Creates one variable of `table` (its parameters or a slot); the hook subclasses
        override.

        `initializer(shape, dtype=dtype)` is the initial value: the config's initializer, or the
        checkpoint's value when a restore is pending (a `CheckpointInitialValueCallable`, which
        also takes `shard_info=` to read one slice). The result is tracked under `name`.
        """
        return tf.Variable(
            name=name,
            initial_value=functools.partial(initializer, shape, dtype=dtype),
            shape=shape,
            dtype=dtype,
            trainable=trainable)


# The TableConfig attribute (not TF's) that holds the global optimizer an embedding object wrote
# into `TableConfig.optimizer`, as the user gave it.
_GLOBAL_OPTIMIZER = "_tf_embedding_global_optimizer"


def _check_global_optimizer(table: Any, optimizer: Any) -> None:
    """Refuses a global `optimizer` for a table whose optimizer an earlier embedding object wrote
    from another global one: TF would train this object's table with the earlier optimizer.
    None (a serving object) and the same or an equal optimizer keep the written one."""
    written = getattr(table, _GLOBAL_OPTIMIZER, None)
    if written is None or optimizer is None or optimizer is written:
        return
    if type(optimizer) is type(written) and optimizer == written:  # equal hyperparameters
        return
    raise ValueError(
        f"Table '{table.name}': this TableConfig was given to an earlier embedding object, which "
        f"wrote its optimizer {_named(written)} into `TableConfig.optimizer` (as TF does), and "
        f"this object's {_named(optimizer)} differs: TF would train this table with the earlier "
        "one. Give each embedding object TableConfigs of its own, or set `optimizer` in the "
        "TableConfig.")


def _named(optimizer: Any) -> str:
    """An optimizer as messages name it: its class and learning rate."""
    learning_rate = getattr(optimizer, "learning_rate", None)
    return f"{type(optimizer).__name__}(learning_rate={learning_rate!r})"


def feature_indices_by_table(flat_features: Sequence[Any]) -> dict[str, list[int]]:
    """{table name: the indices of the `flat_features` (FeatureConfigs) that look it up, in
    order}, tables in order of first occurrence: the one grouping of features by table, which
    every engine's per-table step follows."""
    indices: dict[str, list[int]] = {}
    for index, feature in enumerate(flat_features):
        indices.setdefault(feature.table.name, []).append(index)
    return indices


class ShapeCheckedInitializer:
    """`initializer`, raising ValueError when its value's shape is not the one asked for (a
    sharded table takes its blocks' rows from the value, and would keep a wrong one's slices).

    `initializer` stays readable, so a block can be initialised from its own rows
    (`sharded.initial_rows`), which the check would refuse as a wrong shape.
    """

    def __init__(self, table_name: str, variable_name: str, initializer: Initializer):
        self.table_name = table_name
        self.variable_name = variable_name
        self.initializer = initializer

    def __call__(self, shape: Any, dtype: tf.DType | None = None, **kwargs: Any) -> Any:
        value = self.initializer(shape, dtype=dtype, **kwargs)
        value_shape = tuple(value.shape if hasattr(value, "shape")
                            else tf.convert_to_tensor(value).shape)
        if None not in value_shape and value_shape != tuple(shape):
            raise ValueError(
                f"Table '{self.table_name}': the initializer of variable '{self.variable_name}' "
                f"gave a value of shape {value_shape}, not the variable's {tuple(shape)} "
                "(vocabulary_size, dim).")
        return value


def _check_checkpoint_fits(path: str, variables: dict[str, dict[str, Any]]) -> None:
    """Raises ValueError when the checkpoint at `path` holds this object's tables (an object
    whose children are named as its table and slot variables) but no such object's shapes are
    these variables': a table or slot of another (vocabulary_size, dim)."""
    expected = {(table if slot == "parameters" else f"{table}/{slot}"): tuple(variable.shape)
                for table, slots in variables.items() for slot, variable in slots.items()}
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(base_constants.OBJECT_GRAPH_PROTO_KEY))
    first_mismatch = None
    for node in graph.nodes:
        saved = {child.local_name: tuple(shapes[attribute.checkpoint_key])
                 for child in node.children if child.local_name in expected
                 for attribute in graph.nodes[child.node_id].attributes
                 if attribute.name == base_constants.VARIABLE_VALUE_KEY}
        if not any(table in saved for table in variables):
            continue  # not an embedding object with these tables
        wrong = [(name, shape) for name, shape in saved.items() if shape != expected[name]]
        if not wrong:
            return
        first_mismatch = first_mismatch or wrong[0]
    if first_mismatch is not None:
        name, shape = first_mismatch
        raise _shape_mismatch(name.split("/")[0], name, shape, expected[name],
                              " Nothing was restored.")


def _shape_mismatch(table_name: str, variable_name: str, saved_shape: tuple[int, ...],
                    shape: tuple[int, ...], consequence: str = "") -> ValueError:
    """The error of a checkpointed table or slot whose shape is not the variable's."""
    return ValueError(
        f"Cannot restore variable '{variable_name}' of table '{table_name}': the checkpoint "
        f"holds shape {tuple(saved_shape)} but the table has shape {tuple(shape)} "
        f"(vocabulary_size, dim).{consequence}")


def _check_checkpoint_shape(table_name: str, variable_name: str, initializer: Initializer,
                            shape: tuple[int, int]) -> None:
    """Rejects a pending checkpoint value whose shape differs from the table's."""
    if not isinstance(initializer, trackable_base.CheckpointInitialValueCallable):
        return
    saved_shape = initializer.checkpoint_position.value_shape()
    if saved_shape is not None and tuple(saved_shape) != tuple(shape):
        raise _shape_mismatch(table_name, variable_name, saved_shape, shape)
