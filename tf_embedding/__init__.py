"""tf_embedding: TensorFlow's `tf.tpu.experimental.embedding` API, trained and served anywhere.

Code moves from TF by changing one import:

    import tf_embedding as embedding   # was: embedding = tf.tpu.experimental.embedding

The public names load on first use. That first use loads the op library and raises ImportError
(naming both TensorFlow versions and the rebuild command) when the library was built for another
TensorFlow. Keeping `import tf_embedding` itself light lets `tf-embedding predict`, which needs
only stock TensorFlow, run where the op library is missing or broken.

The root holds the public API; each package's `__init__.py` docstring is that package's map.

* `config`: `TableConfig`, `FeatureConfig`, `QuantizationConfig`, `RowIdInitializer`;
  `combiners`: the combiners' names; `serialization`: configs as JSON-ready dicts and back (what
  the Keras layers' `get_config` stores); `argument_checks`: the rules, stricter than TF's, of
  the configs' and embedding classes' arguments, each defined once.
* `optimizers/`: the embedding optimizers, each described once.
* `dynamic_vocabulary`: (not in TF) `DynamicVocabulary`, a table whose rows go to ids as
  they arrive (`TableConfig(dynamic=...)`).
* `sharding_plan`: (not in TF, so not in this namespace, which mirrors TF's) `ShardingPlan`
  and `TableSharding`, how each table of `TPUEmbedding` is split and where it lives;
  `sharded/planning/planner.py`'s `plan_sharding` makes one.
* `sharded/`: `TPUEmbedding` and its engine; `replicated`: `TPUEmbeddingV0`, tables replicated on
  every replica; `embedding_base`: the table and slot variables every embedding class shares,
  named and tracked as TF's.
* `for_serving`: `TPUEmbeddingForServing` and `serving_embedding_lookup`, stock TF ops only;
  `pooled_lookup`: its faster stock-op formulations of TF's pooled lookups; `serving_keys` and
  `keyed_lookup`: a dynamic table's keys in a stock hash table, and its features looked up
  by key.
* `feature_inputs/`: the rules of one feature's input (kinds, shapes, sequence, weights).
* `ops`: typed wrappers of the op library's engine ops (`dynamic_index_ops`: of the key index
  of dynamic tables); `_loader`: loads that library once per
  process, after checking the TensorFlow it was built for.
* `keras/`, `keras_rs/`, `feature_column/`: the front ends (TFRS's Keras layer, keras-rs's
  `DistributedEmbedding`, the TPUEstimator-era feature columns), through the engine's interface.
* `tpu/`: TF's TPU-embedding module layout (`tensorflow.python.tpu`), mirrored.
* `cluster/`: process plumbing (the task server, local clusters, private network namespaces, the
  chief's end); `server`: `python -m tf_embedding.server`, the command of every ps and worker
  task, which runs `cluster.server`.
* `chief`, `local_cluster`, `private_network`, `interfaces`: deprecated aliases of
  `cluster.chief`, `cluster.local_cluster`, `cluster.private_network` and
  `cluster.network_interfaces`, where they moved in 0.2.0; importing one warns.
* `job/`: the `tf-embedding` command, which `__main__` runs as `python -m tf_embedding`; nothing
  in the library imports it.
"""

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC_NAMES = {
    "Adagrad": "tf_embedding.optimizers",
    "AdagradMomentum": "tf_embedding.optimizers",
    "Adam": "tf_embedding.optimizers",
    "DynamicVocabulary": "tf_embedding.dynamic_vocabulary",
    "FTRL": "tf_embedding.optimizers",
    "FeatureConfig": "tf_embedding.config",
    "QuantizationConfig": "tf_embedding.config",
    "RowIdInitializer": "tf_embedding.config",
    "SGD": "tf_embedding.optimizers",
    "TPUEmbedding": "tf_embedding.sharded.tpu_embedding",
    "TPUEmbeddingForServing": "tf_embedding.for_serving",
    "TPUEmbeddingV0": "tf_embedding.replicated",
    "TableConfig": "tf_embedding.config",
    "serving_embedding_lookup": "tf_embedding.for_serving",
}

__all__ = sorted(_PUBLIC_NAMES)

if TYPE_CHECKING:
    from tf_embedding.dynamic_vocabulary import DynamicVocabulary
    from tf_embedding.config import FeatureConfig, QuantizationConfig, RowIdInitializer, TableConfig
    from tf_embedding.optimizers import FTRL, SGD, Adagrad, AdagradMomentum, Adam
    from tf_embedding.replicated import TPUEmbeddingV0
    from tf_embedding.for_serving import TPUEmbeddingForServing, serving_embedding_lookup
    from tf_embedding.sharded.tpu_embedding import TPUEmbedding


def __getattr__(name: str) -> Any:
    module = _PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_embedding' has no attribute '{name}'")
    from tf_embedding import _loader  # pylint: disable=import-outside-toplevel
    _loader.load_ops()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC_NAMES))
