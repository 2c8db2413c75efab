"""SavedModel export: raw records in, click probability out, stock TensorFlow ops only.

The export holds the trained tables in a serving embedding (`TPUEmbeddingForServing`, whose
lookups are stock ops) restored from the training checkpoint, and the ranking model. Parsing and
hashing are part of the graph, so a client sends what the training data holds:

  serving_default(examples: string [B])  serialized tf.train.Example, as in TFRecord input
  serve_tsv(lines: string [B])           TSV lines, with or without the label column

Both return {"probability": float32 [B] (nan for a malformed record), "valid": bool [B]}. The
data layout is also written to assets.extra/data_spec.json for people and tools.
"""

import json
import os
from types import ModuleType
from typing import Any

import tensorflow as tf

from tf_embedding.job.data import common, criteo, tfrecord
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.sharded.multi_worker import memory

SPEC_FILE = os.path.join("assets.extra", "data_spec.json")


class _ServingModule(tf.Module):
    def __init__(self, model: Any, embedding: Any, spec: DataSpec):
        super().__init__()
        # The model's variables are saved, but not the Keras model object: saving that makes
        # Keras trace a serving function for every layer, which is slow and not needed here.
        self.model_variables = list(model.variables)
        self._forward = model.__call__
        self.embedding = embedding
        self._spec = spec

    def _score(self, batch: common.Batch, valid: tf.Tensor) -> dict[str, tf.Tensor]:
        batch = common.clear_invalid(batch, valid)
        weights = {f.name: batch["weights"].get(f.name) for f in self._spec.features}
        # The serving embedding's own lookup, which maps a dynamic table's keys to rows.
        activations = self.embedding.embedding_lookup(batch["ids"], weights)
        probability = tf.sigmoid(self._forward((batch["dense"], activations)))
        return {"probability": tf.where(valid, probability, float("nan")), "valid": valid}

    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._score(*tfrecord.decode_examples(examples, self._spec, require_label=False))

    def serve_tsv(self, lines: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._score(*criteo.decode_lines(lines, self._spec, require_label=False))


def _signature(method: Any, name: str) -> Any:
    """A concrete function over a batch of strings. Kept off the module's attributes so that
    saving does not trace it a second time."""
    return tf.function(method, input_signature=[tf.TensorSpec([None], tf.string, name=name)],
                       autograph=False).get_concrete_function()


def check_tables_fit(feature_config: dict[str, Any], available_bytes: int) -> None:
    """Raises ValueError naming the table with which the tables outgrow `available_bytes`: a
    SavedModel holds every table whole, for one serving machine, and the exporting process
    reads them whole first (tables split over several serving machines are not exported yet)."""
    tables = {id(feature.table): feature.table for feature in feature_config.values()}
    total = 0
    for table in tables.values():
        table_bytes = table.vocabulary_size * table.dim * 4
        total += table_bytes
        if total > available_bytes:
            raise ValueError(
                f"Table '{table.name}' is {table_bytes / 2**30:.2f} GiB "
                f"({table.vocabulary_size} x {table.dim} float32), which brings the exported "
                f"tables to {total / 2**30:.2f} GiB, more than the "
                f"{available_bytes / 2**30:.2f} GiB this machine has available: a SavedModel "
                "holds each table whole, for one serving machine, so none is exported. The "
                "trained tables are in the checkpoint.")


def export(path: str, model: Any, checkpoint: str, feature_config: dict[str, Any],
           spec: DataSpec, api: ModuleType, tables_at: str = "embedding") -> None:
    """Writes the SavedModel with the tables of `checkpoint` (and a dynamic table's keys); `api`
    provides TPUEmbeddingForServing.

    `tables_at` is the checkpoint path of the object whose children are the tables under stock
    TF's keys: "embedding" for the embedding classes, "embedding/_tpu_embedding" for the Keras
    layer saved as "embedding" (TFRS's layout). `feature_config`'s tables must have no
    optimizer, so that the export holds no slots.
    """
    check_tables_fit(feature_config, memory.available_bytes())
    serving = api.TPUEmbeddingForServing(feature_config, None)
    root = serving
    for name in reversed(tables_at.split("/")):
        root = tf.train.Checkpoint(**{name: root})
    # Restored before the tables exist, so they are created from the checkpoint's values
    # without running their initializers. The rest of the checkpoint is not needed here.
    status = root.restore(checkpoint).expect_partial()
    serving.build()
    status.assert_existing_objects_matched()
    module = _ServingModule(model, serving, spec)
    tf.saved_model.save(module, path, signatures={
        "serving_default": _signature(module.serve_examples, "examples"),
        "serve_tsv": _signature(module.serve_tsv, "lines"),
    })
    os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
    with open(os.path.join(path, SPEC_FILE), "w") as f:
        json.dump(spec.to_json(), f, indent=2)
