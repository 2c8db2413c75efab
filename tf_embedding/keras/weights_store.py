"""Keras saving of what Keras cannot see: a layer's embedding tables, their slots, its counters.

Keras 3's `save_weights` / `load_weights` (`.weights.h5`) and `model.save` / `load_model`
(`.keras`), and tf_keras's same formats, save each layer through `save_own_variables(store)`,
which by default writes the layer's Keras variables only. The tables and slots are tf.Variables
of the layer's engine, trained the TPU way and not Keras weights, so without this module they
would be left out, silently. The layers that own an engine store them under names instead of
Keras' positions: `<table>:parameters` and `<table>:<slot>` (the whole table, whatever its row
blocks, so a file loads at any block count), and extras such as a `global_step`.
"""

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tf_embedding.keras import export


class DynamicIndexValue:
    """A dynamic table's key index as one value of Keras' store (`DynamicTable.packed_index`),
    which `load` assigns as it assigns variables."""

    shape = None  # the number of candidates varies: `assign` checks the value

    def __init__(self, dynamic: Any):
        self._dynamic = dynamic

    def numpy(self) -> np.ndarray:
        return self._dynamic.packed_index()

    def assign(self, value: np.ndarray) -> None:
        self._dynamic.unpack_index(value)


def engine_variables(engine: Any) -> dict[str, Any]:
    """{`<table>:<parameters or slot>`: variable} of an embedding engine, and each dynamic
    table's `<table>:dynamic_pool` and `<table>:dynamic_index` (`DynamicIndexValue`)."""
    variables = {f"{table}:{name}": variable
                 for table, variables in engine.table_variables().items()
                 for name, variable in variables.items()}
    sharded_engine = getattr(engine, "engine", None)  # TPUEmbeddingV0 has none
    for state in () if sharded_engine is None else sharded_engine.tables:
        if state.dynamic is not None:
            variables[f"{state.name}:dynamic_pool"] = state.dynamic.pool
            variables[f"{state.name}:dynamic_index"] = DynamicIndexValue(state.dynamic)
    return variables


def save(store: Any, variables: Mapping[str, Any]) -> None:
    """Writes every variable's whole value (`export.whole_value`) into a Keras saving
    `store`. Under MultiWorkerMirroredStrategy the tables are gathered from every worker, so
    every worker must save (as MWMS wants: the chief to the real path, the others elsewhere)."""
    for key, variable in variables.items():
        store[key] = (variable.numpy() if isinstance(variable, DynamicIndexValue)
                      else tf.convert_to_tensor(export.whole_value(variable)).numpy())


def load(store: Any, variables: Mapping[str, Any], layer_name: str) -> None:
    """Assigns every variable its value from a Keras saving `store`.

    Raises:
      ValueError: the store lacks one of the variables (a file saved before tables were
        stored, or by a layer of other tables or another optimizer) or holds others; nothing
        is assigned then.
    """
    stored = set(store.keys())
    missing = sorted(set(variables) - stored)
    unexpected = sorted(stored - set(variables))
    if missing or unexpected:
        raise ValueError(
            f"Layer '{layer_name}' cannot load these weights: it stores its embedding tables "
            f"and slots by name, and the file lacks {missing} and holds {unexpected} "
            "(saved by a layer with other tables or another embedding optimizer, or without "
            "its tables).")
    for key, variable in variables.items():
        value = store[key]
        if variable.shape is not None and tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"Layer '{layer_name}' cannot load '{key}': the file holds shape "
                f"{tuple(value.shape)}, the layer's variable has {tuple(variable.shape)}.")
        variable.assign(value)


class EngineWeights:
    """What every Keras layer that owns an engine (`_tpu_embedding`) and a gradient-trap helper
    (named by the class attribute `_HELPER_NAME`) saves, and what it leaves out.

    Keras' files get the engine's variables by name (`_saved_variables`, which a layer extends
    with its counters); checkpoints leave the helper out, since it only routes gradients and is
    always zero. Mix in before the Keras layer class.
    """

    _HELPER_NAME: str

    def _add_helper(self) -> None:
        """Creates the trainable helper whose gradient applies the embedding optimizers."""
        setattr(self, self._HELPER_NAME, self.add_weight(
            name=self._HELPER_NAME, shape=(1,), initializer="zeros", trainable=True,
            dtype="float32"))

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        """(Not in TFRS.) Each dynamic table's counts now (`TPUEmbedding.dynamic_statistics`:
        step, occupied, candidates, admitted, evicted, refused)."""
        return self._tpu_embedding.dynamic_statistics()

    def table_variables(self) -> dict[str, dict[str, Any]]:
        """(Not in TFRS.) {table name: {"parameters": table, <slot name>: slot}}: the engine's
        variables, each whole whatever its blocks (`TPUEmbedding.table_variables`)."""
        return self._tpu_embedding.table_variables()

    def _saved_variables(self) -> dict[str, Any]:
        return engine_variables(self._tpu_embedding)

    def save_own_variables(self, store: Any) -> None:
        """Keras' saving: the tables and slots (and counters) by name; not the helper."""
        save(store, self._saved_variables())

    def load_own_variables(self, store: Any) -> None:
        load(store, self._saved_variables(), self.name)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # Also drops what a layer keeps under that name instead (the Keras layer's second
        # reference to its tables in "model_optimizer" mode): checkpoints hold tables once.
        children = super()._trackable_children(save_type, **kwargs)
        children.pop(self._HELPER_NAME, None)
        return children
