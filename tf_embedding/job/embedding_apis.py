"""The `--embedding-api` adapters of `tf-embedding train`: everything that names an embedding
implementation.

`EmbeddingTraining` is what the custom loop (`training._fit`) asks of one: the sharded
`TPUEmbedding` with its fused Adagrad (the default), the replicated `TPUEmbeddingV0` with
tf_keras' Adagrad, the Keras layer `tf_embedding.keras.TPUEmbedding` (fused Adagrad, trained
inside one Keras model by `model.fit`), keras-rs's `DistributedEmbedding`
(`tf_embedding.keras_rs`, job/keras_rs_training.py), or stock TensorFlow alone (`stock`: the
baseline the others are measured against).
"""

import abc
from typing import Any

import tensorflow as tf

import tf_embedding
from tf_embedding.job import sharding
from tf_embedding import dynamic_vocabulary
from tf_embedding.job.data.spec import DataSpec, TableSpec
from tf_embedding.job.options import TrainOptions

# Table/feature configs, the training objects, the embedding optimizer and the serving lookup
# all come from here (stock TF's `tf.tpu.experimental.embedding` offers the same names).
EMBEDDING_API = tf_embedding

# Where both embedding optimizers start every row's Adagrad accumulator.
INITIAL_ACCUMULATOR = 0.1


class EmbeddingTraining(abc.ABC):
    """The embedding as the loop sees it: a lookup (run under the gradient tape when
    training), what the loss is differentiated against, and the update with those gradients."""

    # The checkpoint path of the object that holds the tables under stock TF's keys.
    tables_at = "embedding"
    # Whether its tables may be dynamic (`TableSpec.dynamic`).
    holds_dynamic_tables = False

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        """Each dynamic table's counts now (`TPUEmbedding.dynamic_statistics`)."""
        return {}

    @abc.abstractmethod
    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        """{feature: pooled activations [B, dim]} of a batch."""

    @abc.abstractmethod
    def sources(self, activations: dict[str, tf.Tensor]) -> Any:
        """What the loop watches and differentiates the loss against, given the lookup's
        activations; `apply_gradients` receives the gradients in the same structure."""

    @abc.abstractmethod
    def apply_gradients(self, gradients: Any) -> None:
        """Updates the tables with the gradients of `sources`."""

    @abc.abstractmethod
    def checkpointed(self) -> dict[str, Any]:
        """{checkpoint key: object}; the tables are under "embedding", with stock TF's keys."""


class ShardedTraining(EmbeddingTraining):
    """`TPUEmbedding`: the lookup is enqueue then dequeue, the loss is differentiated against
    the activations, and `apply_gradients` runs the fused Adagrad on the looked-up rows only,
    in place. Tables and accumulators are both in the embedding object."""

    holds_dynamic_tables = True

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions,
                 sharding_plan: Any = None):
        """`sharding_plan`: `--sharding`'s plan (`job/sharding.py`; None: row-wise)."""
        if sharding_plan is not None:
            print(f"sharding plan (--sharding {options.sharding}):\n{sharding_plan.describe()}",
                  flush=True)
        self.embedding = EMBEDDING_API.TPUEmbedding(
            feature_config, embedding_optimizer(options), sharding_plan=sharding_plan)
        # Batches have no static size (malformed records are dropped from them), so the output
        # shapes come from the batch size, and `dequeue(partial=True)` takes smaller batches.
        # Each of a multi-worker cluster's N replicas takes at most ceil(B / N) of a batch.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        self.embedding.build(per_replica_input_shapes={
            name: tf.TensorShape([-(-options.batch_size // replicas), None])
            for name in feature_config})

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        self.enqueue(ids, weights, training)
        return self.dequeue()

    def enqueue(self, ids: dict[str, Any], weights: dict[str, Any], training: bool) -> None:
        """The first half of `lookup`: for a compiled step, run in its caller."""
        self.embedding.enqueue(ids, weights, training=training)

    def dequeue(self) -> dict[str, tf.Tensor]:
        """The second half of `lookup`: the activations of the batch `enqueue` took."""
        return self.embedding.dequeue(partial=True)

    def sources(self, activations: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return activations

    def apply_gradients(self, gradients: dict[str, tf.Tensor]) -> None:
        self.embedding.apply_gradients(gradients)

    def checkpointed(self) -> dict[str, Any]:
        return {"embedding": self.embedding}

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        return self.embedding.dynamic_statistics()


class ReplicatedTraining(EmbeddingTraining):
    """`TPUEmbeddingV0`: the tables are trainable variables whose gradients (IndexedSlices) go
    to tf_keras' legacy Adagrad (`sparse_adagrad`)."""

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        self.optimizer = sparse_adagrad(options)
        self.embedding = EMBEDDING_API.TPUEmbeddingV0(feature_config, None)
        # Built eagerly, outside any tf.function (TF's own classes fail to build inside one).
        self._tables = list(self.embedding.embedding_tables.values())

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        return self.embedding(ids, weights)

    def sources(self, activations: dict[str, tf.Tensor]) -> list[tf.Variable]:
        return self._tables

    def apply_gradients(self, gradients: list[Any]) -> None:
        # Under "embedding_...", so that profiles count its Adagrad as the embedding's.
        with tf.name_scope("embedding_apply_gradients"):
            self.optimizer.apply_gradients(zip(gradients, self._tables))

    def checkpointed(self) -> dict[str, Any]:
        return {"embedding": self.embedding, "embedding_optimizer": self.optimizer}


class StockTraining(EmbeddingTraining):
    """Stock TensorFlow only, the baseline of the others: each table a `tf.Variable` made by
    its TableConfig's initializer (so its initial values are the other APIs'), each feature
    looked up with `tf.nn.safe_embedding_lookup_sparse` and its table's combiner, and the
    tables' gradients (IndexedSlices) applied by tf_keras' legacy Adagrad (`sparse_adagrad`).
    Nothing of tf_embedding runs in the step; the configs only name the tables."""

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        self.optimizer = sparse_adagrad(options)
        tables = {}  # table name: its variable
        self._features = {}  # feature name: (its table's variable, combiner)
        for name, feature in feature_config.items():
            table = feature.table
            if table.name not in tables:
                tables[table.name] = tf.Variable(
                    table.initializer((table.vocabulary_size, table.dim), dtype=tf.float32),
                    name=table.name)
            self._features[name] = (tables[table.name], table.combiner)
        self._tables = list(tables.values())
        # The tables under the table names, as stock TF's checkpoints hold them.
        self.embedding = tf.train.Checkpoint(**tables)

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        # Under "embedding/" so that profiles count these ops as the embedding's.
        with tf.name_scope("embedding"):
            activations = {}
            for name, (table, combiner) in self._features.items():
                feature_weights = weights[name]
                activations[name] = tf.nn.safe_embedding_lookup_sparse(
                    table, ids[name].to_sparse(),
                    None if feature_weights is None else feature_weights.to_sparse(),
                    combiner=combiner, name=name)
            return activations

    def sources(self, activations: dict[str, tf.Tensor]) -> list[tf.Variable]:
        return self._tables

    def apply_gradients(self, gradients: list[Any]) -> None:
        with tf.name_scope("embedding_apply_gradients"):
            self.optimizer.apply_gradients(zip(gradients, self._tables))

    def checkpointed(self) -> dict[str, Any]:
        return {"embedding": self.embedding, "embedding_optimizer": self.optimizer}


class KerasTraining(EmbeddingTraining):
    """The Keras layer `tf_embedding.keras.TPUEmbedding` (TFRS's layer), trained by `model.fit`
    inside `KerasRankingModel`. As on a TPU, its tables are not trainable variables; a helper
    variable is, and differentiating the loss against it (as Keras does with the model's
    trainable variables) runs the layer's fused Adagrad on the looked-up rows, in place. So the
    update happens in `tape.gradient`, and `apply_gradients` has nothing left to do."""

    # The layer holds its engine under TFRS's attribute name.
    tables_at = "embedding/_tpu_embedding"
    holds_dynamic_tables = True

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel
        self.layer = embedding_keras.TPUEmbedding(feature_config, embedding_optimizer(options))
        # Creates the tables and the helper now, so the optimizer can be built before a restore.
        self.layer.build()

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        return self.layer(ids, weights)

    def sources(self, activations: dict[str, tf.Tensor]) -> list[tf.Variable]:
        # The helper: the TensorFlow variable under the Keras one (what tape.watch takes).
        return [variable.value for variable in self.layer.trainable_variables]

    def apply_gradients(self, gradients: list[Any]) -> None:
        """Nothing to do: computing the gradients applied the embedding optimizer."""

    def checkpointed(self) -> dict[str, Any]:
        # The tables and accumulators under `embedding/_tpu_embedding/`, TFRS's layout.
        return {"embedding": self.layer}

    def dynamic_statistics(self) -> dict[str, dict[str, int]]:
        return self.layer.dynamic_statistics()


# The adapters this module holds, by `--embedding-api`; keras-rs's, an extra, is in
# keras_rs_training.py (which builds on `KerasTraining`).
EMBEDDING_APIS: dict[str, type[EmbeddingTraining]] = {
    "sharded": ShardedTraining, "replicated": ReplicatedTraining, "keras": KerasTraining,
    "stock": StockTraining}


def build(embedding_class: type[EmbeddingTraining], spec: DataSpec,
          options: TrainOptions) -> EmbeddingTraining:
    """The `--embedding-api` adapter over `spec`'s feature config, with `--sharding`'s plan for
    the sharded API (TrainOptions refuses --sharding for the others).

    Raises:
      ValueError: a dynamic table for an adapter that cannot hold one, naming the table.
    """
    dynamic = [table.name for table in spec.tables if table.dynamic is not None]
    if dynamic and not embedding_class.holds_dynamic_tables:
        raise dynamic_vocabulary.dynamic_table_error(
            dynamic[0], f"--embedding-api {options.embedding_api} cannot hold it (its ids "
            "would be read as rows): train it with --embedding-api sharded or keras.")
    features = feature_config(spec, options.embedding_dim, options.seed)
    plan = sharding.plan_for(options.sharding, features, spec, options.batch_size)
    if plan is None:
        return embedding_class(features, options)
    return embedding_class(features, options, sharding_plan=plan)


def embedding_optimizer(options: TrainOptions) -> Any:
    """The tables' Adagrad for the sharded engine and the Keras layer."""
    return EMBEDDING_API.Adagrad(options.embedding_learning_rate,
                                 initial_accumulator_value=INITIAL_ACCUMULATOR)


def sparse_adagrad(options: TrainOptions) -> Any:
    """The tables' Adagrad for the replicated and stock APIs: tf_keras' legacy Adagrad, whose
    sparse kernel (ResourceSparseApplyAdagradV2) touches only the looked-up rows. Keras 3's
    Adagrad takes the square root of the whole accumulator every step, O(vocabulary) per step.
    Its rule is the TPU's but for an epsilon of 1e-7 added to the root (tf_keras replaces 0 by
    its default): with accumulators from 0.1 up, a relative change of at most 3.2e-7 (a few
    float32 roundings) to an update."""
    try:
        import tf_keras  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ValueError(f"--embedding-api {options.embedding_api} needs tf_keras "
                         "(pip install --no-deps 'tf_keras>=2.21,<2.22')") from None
    return tf_keras.optimizers.legacy.Adagrad(
        options.embedding_learning_rate, initial_accumulator_value=INITIAL_ACCUMULATOR)


def _dynamic_options(table: TableSpec) -> tf_embedding.DynamicVocabulary | None:
    """The spec's `dynamic` options of `table` as the API's, or None for a fixed table."""
    if table.dynamic is None:
        return None
    try:
        return tf_embedding.DynamicVocabulary(**table.dynamic)
    except (TypeError, ValueError) as error:
        raise ValueError(f"tables[{table.name!r}].dynamic: {error}") from None


def feature_config(spec: DataSpec, dim: int, seed: int) -> dict[str, Any]:
    """{feature name: FeatureConfig}, features sharing a TableConfig as the spec says."""
    tables = {
        t.name: EMBEDDING_API.TableConfig(
            vocabulary_size=t.vocabulary_size, dim=dim, combiner=t.combiner, name=t.name,
            initializer=tf.initializers.TruncatedNormal(stddev=0.05, seed=seed + i),
            dynamic=_dynamic_options(t))
        for i, t in enumerate(spec.tables)}
    return {f.name: EMBEDDING_API.FeatureConfig(table=tables[f.table], name=f.name)
            for f in spec.features}


