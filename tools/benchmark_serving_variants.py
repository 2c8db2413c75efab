"""Benchmark variants of serving lookups: stock TF's and our `TPUEmbeddingForServing`, called
in process or exported to a SavedModel by another process and loaded (`exported_serving_lookup`),
as a server runs it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import benchmark_registry
from benchmark_registry import (Context, Setup, Workload, import_tensorflow, make_table_configs,
                                one_feature_per_table, variant)

if TYPE_CHECKING:
    import tensorflow as tf
    import tf_embedding

benchmark_registry.uses_tensorflow(__name__)


def _serving_embedding(workload: Workload, configs: Any, **options: Any
                       ) -> tuple[Any, list[tf.Variable]]:
    """A built TPUEmbeddingForServing of `configs` (tf_embedding, or stock's module) with one
    feature per table, and its tables, filled by the workload."""
    table_configs = make_table_configs(workload, configs)
    embedding = configs.TPUEmbeddingForServing(one_feature_per_table(table_configs, configs),
                                               None, **options)
    embedding.build()
    tables = [embedding.embedding_tables[config] for config in table_configs]
    workload.fill_tables(tables)
    return embedding, tables


def stock_serving_lookup(workload: Workload) -> Callable[[list[Any]], Any]:
    """Stock TF's TPUEmbeddingForServing of `workload` (one feature per table), its lookup as a
    tf.function; the returned function keeps the tables alive."""
    embedding, _ = _serving_embedding(workload, tf.tpu.experimental.embedding)
    return tf.function(embedding.embedding_lookup)


@variant("stock-serving", "serve", "stock TF TPUEmbeddingForServing.embedding_lookup",
         baseline=True)
def _stock_serving(ctx: Context) -> Setup:
    return _stock_serving_setup(ctx, "sparse")


@variant("stock-serving-ragged", "serve", "stock-serving taking RaggedTensors", default=False)
def _stock_serving_ragged(ctx: Context) -> Setup:
    return _stock_serving_setup(ctx, "ragged")


def _stock_serving_setup(ctx: Context, kind: str) -> Setup:
    return dataclasses.replace(
        ctx.forward_setup(stock_serving_lookup(ctx.workload), [], kind=kind),
        model_bytes=ctx.workload.table_bytes)


@variant("stock-serving-export", "serve",
         "stock TF's TPUEmbeddingForServing lookup exported to a SavedModel, loaded and called",
         default=False)
def _stock_serving_export(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=None)


@variant("serving-export", "serve",
         "our TPUEmbeddingForServing's lookup exported to a SavedModel, loaded and called",
         target=2.0)
def _serving_export(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=False)


@variant("serving-export-xla", "serve",
         "serving-export with TPUEmbeddingForServing(jit_compile=True)", target=2.0)
def _serving_export_xla(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=True)


@variant("serving-export-ragged", "serve", "serving-export taking RaggedTensors",
         default=False, versus=(("stock-serving-ragged", 2.0),))
def _serving_export_ragged(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=False, kind="ragged")


@variant("serving-export-xla-ragged", "serve", "serving-export-xla taking RaggedTensors",
         default=False, versus=(("stock-serving-ragged", 2.0),))
def _serving_export_xla_ragged(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=True, kind="ragged")


# The exported lookup's input signature per input kind (`Context.batch`).
_SERVING_INPUT_SPECS = {
    "sparse": lambda per_sample: tf.SparseTensorSpec([None, per_sample], tf.int64),
    "ragged": lambda per_sample: tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1,
                                                     row_splits_dtype=tf.int64),
}


def _export_serving_lookup(workload: Workload, jit_compile: bool | None, kind: str,
                           export_dir: str) -> None:
    """In a process of its own: our TPUEmbeddingForServing of `workload` (stock TF's if
    `jit_compile` is None), its tables filled as every variant's, with its lookup of `kind`
    features exported to `export_dir`."""
    import_tensorflow()
    embedding, _ = (_serving_embedding(workload, tf.tpu.experimental.embedding)
                    if jit_compile is None else
                    _serving_embedding(workload, tf_embedding, jit_compile=jit_compile))
    module = tf.Module()
    module.embedding = embedding
    module.lookup = tf.function(
        embedding.embedding_lookup,
        input_signature=[[_SERVING_INPUT_SPECS[kind](workload.ids_per_sample)]
                         * workload.tables])
    tf.saved_model.save(module, export_dir)


def exported_serving_lookup(workload: Workload, jit_compile: bool | None,
                            kind: str = "sparse") -> Callable[[list[Any]], Any]:
    """Our serving lookup of `workload`'s `kind` features ("sparse" or "ragged"; stock TF's if
    `jit_compile` is None), exported by another process, loaded here: the loaded function, as a
    server that loads the export runs it (any batch size).

    This process holds only what loading gives it (an export made here would leave the
    exporter's graphs, and its freed tables in TensorFlow's allocator pool, in its memory)."""
    import multiprocessing  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory(prefix="serving_export_") as export_dir:
        exporter = multiprocessing.get_context("spawn").Process(
            target=_export_serving_lookup, args=(workload, jit_compile, kind, export_dir))
        exporter.start()
        exporter.join()
        if exporter.exitcode != 0:
            raise RuntimeError(f"the exporting process failed (exit code {exporter.exitcode})")
        # Loading restores the tables into memory, so the files are not needed afterwards.
        loaded = tf.saved_model.load(export_dir)
    # The lambda keeps `loaded`, which owns the variables, alive.
    return lambda features: loaded.lookup(features)


def _serving_export_setup(ctx: Context, jit_compile: bool | None,
                          kind: str = "sparse") -> Setup:
    return dataclasses.replace(
        ctx.forward_setup(exported_serving_lookup(ctx.workload, jit_compile, kind), [],
                          kind=kind),
        model_bytes=ctx.workload.table_bytes)
