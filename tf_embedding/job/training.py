"""Training for `tf-embedding train`: steps, checkpoints, resume, evaluation.

Everything that names an embedding implementation is in `EMBEDDING_API` and the
`EmbeddingTraining` adapters (`--embedding-api`): the sharded `TPUEmbedding` with its fused
Adagrad (the default), the replicated `TPUEmbeddingV0` with tf_keras' Adagrad, or the Keras layer
`tf_embedding.keras.TPUEmbedding` (fused Adagrad). The first two train in the custom loop
(`_fit`), which only uses the adapter; the Keras layer trains inside one Keras model
(`KerasRankingModel`) with `model.fit` (`_fit_keras`). Both share the checkpoints, resume,
evaluation and export. Where the custom loop's steps run is the `Execution`'s business: in this
process, or on the workers of a parameter-server cluster (`tf_embedding.job.cluster`).
"""

import abc
import dataclasses
import json
import os
import sys
from typing import Any, Callable, TextIO

import keras
import tensorflow as tf

import tf_embedding
from tf_embedding.job import export
from tf_embedding.job import interrupts
from tf_embedding.job import model as model_lib
from tf_embedding.job.evaluation import evaluate
from tf_embedding.job.progress import Progress, RunningMetrics, resolve_mode
from tf_embedding.job.data import common, sources
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import TrainOptions, mlp_sizes

# Table/feature configs, the training objects, the embedding optimizer and the serving lookup
# all come from here (stock TF's `tf.tpu.experimental.embedding` offers the same names).
EMBEDDING_API = tf_embedding

# Options that steer a run without changing what it computes: a resumed run may change them.
_RUN_CONTROL = ("resume", "stop_at_step", "steps", "progress", "checkpoint_every",
                "keep_checkpoints", "export_dir", "eval_examples", "eval_input", "config")

# Where both embedding optimizers start every row's Adagrad accumulator.
_INITIAL_ACCUMULATOR = 0.1


class Execution:
    """Where the custom loop's steps and the evaluation run: in this process, under the default
    strategy. `cluster.ClusterExecution` runs them on a cluster's workers instead."""

    # Steps dispatched between two waits for them: the checkpoints and the progress display
    # read the run's variables only after a wait.
    steps_per_wait = 1

    def __init__(self, strategy: tf.distribute.Strategy | None = None):
        # The run's objects are created in its scope, and the steps run in its `run`.
        self.strategy = strategy or tf.distribute.get_strategy()

    def dispatch(self, function: Callable[[common.Batch], Any], batch: common.Batch) -> Any:
        """Starts the tf.function `function` on `batch`; returns what `result` takes."""
        return function(batch)

    def result(self, value: Any) -> Any:
        """The value of a dispatched function's result, once it is done."""
        return value

    def wait(self) -> None:
        """Returns once every dispatched function has run."""


class EmbeddingTraining(abc.ABC):
    """The embedding as the loop sees it: a lookup (run under the gradient tape when
    training), what the loss is differentiated against, and the update with those gradients."""

    # The checkpoint path of the object that holds the tables under stock TF's keys.
    tables_at = "embedding"

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

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        self.embedding = EMBEDDING_API.TPUEmbedding(feature_config, _embedding_optimizer(options))
        # Batches have no static size (malformed records are dropped from them), so the output
        # shapes come from the batch size, and `dequeue(partial=True)` takes smaller batches.
        self.embedding.build(per_replica_input_shapes={
            name: tf.TensorShape([options.batch_size, None]) for name in feature_config})

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        self.embedding.enqueue(ids, weights, training=training)
        return self.embedding.dequeue(partial=True)

    def sources(self, activations: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return activations

    def apply_gradients(self, gradients: dict[str, tf.Tensor]) -> None:
        self.embedding.apply_gradients(gradients)

    def checkpointed(self) -> dict[str, Any]:
        return {"embedding": self.embedding}


class ReplicatedTraining(EmbeddingTraining):
    """`TPUEmbeddingV0`: the tables are trainable variables whose gradients (IndexedSlices) go
    to tf_keras' legacy Adagrad, whose sparse kernel touches only the looked-up rows (Keras 3's
    Adagrad reads the whole accumulator every step, O(vocabulary) per step)."""

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        try:
            import tf_keras  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ValueError("--embedding-api replicated needs tf_keras "
                             "(pip install --no-deps 'tf_keras>=2.21,<2.22')") from None
        self.embedding = EMBEDDING_API.TPUEmbeddingV0(feature_config, None)
        self.optimizer = tf_keras.optimizers.legacy.Adagrad(
            options.embedding_learning_rate, initial_accumulator_value=_INITIAL_ACCUMULATOR)
        # Built eagerly, outside any tf.function (TF's own classes fail to build inside one).
        self._tables = list(self.embedding.embedding_tables.values())

    def lookup(self, ids: dict[str, Any], weights: dict[str, Any],
               training: bool) -> dict[str, tf.Tensor]:
        return self.embedding(ids, weights)

    def sources(self, activations: dict[str, tf.Tensor]) -> list[tf.Variable]:
        return self._tables

    def apply_gradients(self, gradients: list[Any]) -> None:
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

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel
        self.layer = embedding_keras.TPUEmbedding(feature_config, _embedding_optimizer(options))
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


_EMBEDDING_APIS: dict[str, type[EmbeddingTraining]] = {
    "sharded": ShardedTraining, "replicated": ReplicatedTraining, "keras": KerasTraining}


def _embedding_optimizer(options: TrainOptions) -> Any:
    """The tables' Adagrad for the sharded engine and the Keras layer."""
    return EMBEDDING_API.Adagrad(options.embedding_learning_rate,
                                 initial_accumulator_value=_INITIAL_ACCUMULATOR)


def feature_config(spec: DataSpec, dim: int, seed: int) -> dict[str, Any]:
    """{feature name: FeatureConfig}, features sharing a TableConfig as the spec says."""
    tables = {
        t.name: EMBEDDING_API.TableConfig(
            vocabulary_size=t.vocabulary_size, dim=dim, combiner=t.combiner, name=t.name,
            initializer=tf.initializers.TruncatedNormal(stddev=0.05, seed=seed + i))
        for i, t in enumerate(spec.tables)}
    return {f.name: EMBEDDING_API.FeatureConfig(table=tables[f.table], name=f.name)
            for f in spec.features}


def lookup_weights(spec: DataSpec, batch: common.Batch) -> dict[str, Any]:
    """Weights in the structure of the ids: None for unweighted features."""
    return {f.name: batch["weights"].get(f.name) for f in spec.features}


def batch_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """The loss both training paths minimise: the batch's mean sigmoid cross-entropy. An
    all-malformed window gives an empty batch: a zero loss, not 0 / 0."""
    losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.math.divide_no_nan(tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32))


def build_model(options: TrainOptions, spec: DataSpec) -> model_lib.RankingModel:
    """The ranking model with its variables created."""
    model = model_lib.RankingModel(spec, options.embedding_dim, mlp_sizes(options.bottom_mlp),
                                   mlp_sizes(options.top_mlp))
    model((tf.zeros([1, spec.num_dense]),
           {f.name: tf.zeros([1, options.embedding_dim]) for f in spec.features}))
    return model


# The batch entries a KerasRankingModel takes; the label is the target of `model.fit`.
_KERAS_INPUTS = ("dense", "ids", "weights", "malformed")


class KerasRankingModel(keras.Model):
    """The ranking model around the Keras embedding layer, as one Keras model for `model.fit`.

    call(batch) looks up the batch's ids and weights in the layer and runs the RankingModel on
    the dense features and the activations: the logits [B]. `batch` holds `_KERAS_INPUTS`. A
    training call also counts the batch's examples and malformed records, as the custom loop's
    step does.
    """

    def __init__(self, embedding: KerasTraining, ranking: model_lib.RankingModel,
                 spec: DataSpec, malformed: tf.Variable):
        super().__init__()
        self.embedding = embedding.layer
        self.ranking = ranking
        self._spec = spec
        self._malformed = malformed
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False)

    def call(self, batch: common.Batch, training: bool = False) -> tf.Tensor:
        activations = self.embedding(batch["ids"], lookup_weights(self._spec, batch))
        if training:
            self.examples.assign_add(tf.shape(batch["dense"], out_type=tf.int64)[0])
            self._malformed.assign_add(batch["malformed"])
        return self.ranking((batch["dense"], activations))


def _resolved_config(options: TrainOptions, spec: DataSpec) -> dict[str, Any]:
    """Options and layout as written to config.json (JSON round-tripped, so comparable)."""
    return json.loads(json.dumps({"options": dataclasses.asdict(options),
                                  "data_spec": spec.to_json()}))


def _check_model_dir(options: TrainOptions, spec: DataSpec, checkpoints: str,
                     path: str) -> None:
    """A fresh run needs an unused directory; a resumed run must compute what the first did."""
    latest = tf.train.latest_checkpoint(checkpoints)
    if not options.resume:
        if latest:
            raise ValueError(f"{options.model_dir} already holds a run; pass --resume to "
                             "continue it or choose another --model-dir")
        return
    if not os.path.exists(path):
        raise ValueError(f"--resume: no run to resume in {options.model_dir}")
    if not latest:
        # Killed before its first checkpoint: nothing of it is kept, so it starts afresh.
        raise ValueError(f"--resume: the run in {options.model_dir} has no checkpoint yet (it "
                         "stopped before its first); run without --resume to start it from the "
                         "beginning")
    with open(path) as f:
        saved = json.load(f)
    current = _resolved_config(options, spec)
    if saved["data_spec"] != current["data_spec"]:
        raise ValueError("--resume: the data layout differs from the run being resumed")
    for key, value in saved["options"].items():
        if key not in _RUN_CONTROL and current["options"].get(key) != value:
            raise ValueError(f"--resume: option {key} is {current['options'].get(key)!r} but "
                             f"the run being resumed used {value!r}")


@dataclasses.dataclass
class _Run:
    """What a run trains and checkpoints."""

    embedding: EmbeddingTraining
    model: model_lib.RankingModel
    optimizer: keras.optimizers.Optimizer
    step: Any  # tf.Variable; for --embedding-api keras, the Keras optimizer's `iterations`
    malformed: tf.Variable
    metrics: RunningMetrics | None  # None for --embedding-api keras
    manager: tf.train.CheckpointManager
    keras_model: KerasRankingModel | None  # for --embedding-api keras, compiled for model.fit


def _build_run(options: TrainOptions, spec: DataSpec, checkpoints: str) -> _Run:
    keras.utils.set_random_seed(options.seed)
    embedding = _EMBEDDING_APIS[options.embedding_api](
        feature_config(spec, options.embedding_dim, options.seed), options)
    model = build_model(options, spec)
    optimizer = keras.optimizers.Adam(options.learning_rate)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    malformed = tf.Variable(0, dtype=tf.int64, trainable=False)
    keras_model = None
    if isinstance(embedding, KerasTraining):
        keras_model = KerasRankingModel(embedding, model, spec, malformed)
        keras_model.compile(optimizer=optimizer, loss=batch_loss,
                            metrics=[keras.metrics.AUC(from_logits=True, name="auc")])
        # Keras counts the steps it applies, in the same function as the update.
        step = optimizer.iterations
    # Built now so that a restore finds every slot variable to fill.
    optimizer.build((keras_model or model).trainable_variables)
    checkpointed = dict(step=step, model=model, optimizer=optimizer, malformed=malformed,
                        **embedding.checkpointed())
    # The custom loop's progress metrics; Keras' fit displays its own.
    metrics = None
    if keras_model is None:
        metrics = checkpointed["running_metrics"] = RunningMetrics()
    checkpoint = tf.train.Checkpoint(**checkpointed)
    manager = tf.train.CheckpointManager(checkpoint, checkpoints,
                                         max_to_keep=options.keep_checkpoints)
    return _Run(embedding, model, optimizer, step, malformed, metrics, manager, keras_model)


class _Checkpoints:
    """Saves the run every `every` steps and where training stopped."""

    def __init__(self, run: _Run, every: int):
        self._run = run
        self._every = every
        self.first_step = self._saved_at = int(run.step)

    def after_step(self) -> int:
        """Saves when the step just done is due; returns that step."""
        step = int(self._run.step)
        if step % self._every == 0:
            self._run.manager.save(checkpoint_number=step)
            self._saved_at = step
        return step

    def finish(self, examples: int) -> None:
        """Saves the step training stopped at, unless saved there already. Steps trained
        without one example mean the input holds none (all malformed): an error."""
        step = int(self._run.step)
        if step > self.first_step and not examples:
            raise ValueError(f"the training input holds no examples ({int(self._run.malformed)} "
                             "malformed records)")
        if self._saved_at != step:
            self._run.manager.save(checkpoint_number=step)


def _fit(run: _Run, options: TrainOptions, spec: DataSpec, dataset: tf.data.Dataset,
         last_step: int, stream: TextIO, execution: Execution) -> bool:
    """Trains from the current step to last_step in the custom loop, checkpointing on the way
    and at the end; returns False when interrupted (Ctrl-C) before last_step."""
    embedding, model, optimizer = run.embedding, run.model, run.optimizer

    def replica_step(batch: common.Batch) -> None:
        labels = batch["label"]
        with tf.GradientTape() as tape:
            activations = embedding.lookup(batch["ids"], lookup_weights(spec, batch),
                                           training=True)
            # Dequeued activations come from a queue, not from variables the tape watches.
            sources = embedding.sources(activations)
            tape.watch(sources)
            logits = model((batch["dense"], activations))
            loss = batch_loss(labels, logits)
        dense_variables = model.trainable_variables
        dense_gradients, embedding_gradients = tape.gradient(loss, (dense_variables, sources))
        optimizer.apply_gradients(zip(dense_gradients, dense_variables))
        embedding.apply_gradients(embedding_gradients)
        run.step.assign_add(1)
        run.malformed.assign_add(batch["malformed"])
        run.metrics.update(labels, tf.sigmoid(logits), loss)

    @tf.function(input_signature=[dataset.element_spec], autograph=False)
    def train_step(batch: common.Batch) -> None:
        # Under a parameter-server strategy the whole step, enqueue to apply_gradients, is one
        # replica function of one scheduled function (docs/parameter_server.md).
        execution.strategy.run(replica_step, args=(batch,))

    checkpoints = _Checkpoints(run, options.checkpoint_every)
    progress = Progress(options.progress, checkpoints.first_step, last_step, stream)
    batches = iter(dataset)
    examples = 0
    step = checkpoints.first_step  # the steps dispatched so far
    interrupted = False
    try:
        with interrupts.stop_on_interrupt() as stop:
            while step < last_step and not stop.requested:
                try:
                    batch = next(batches)
                except StopIteration:
                    raise ValueError("the training input holds no examples") from None
                execution.dispatch(train_step, batch)
                examples += int(tf.shape(batch["label"])[0])
                step += 1
                if (step % execution.steps_per_wait == 0
                        or step % options.checkpoint_every == 0 or step == last_step):
                    execution.wait()
                    checkpoints.after_step()
                    progress.update(step, examples, run.metrics, int(run.malformed),
                                    force=step == last_step)
            # The checkpoint below keeps the work; --resume continues from it.
            interrupted = stop.requested
    except KeyboardInterrupt:
        interrupted = True  # a second Ctrl-C, inside a step
    finally:
        progress.close()
    execution.wait()  # the steps still running when interrupted go into the checkpoint
    checkpoints.finish(examples)
    return not interrupted


def _fit_keras(run: _Run, options: TrainOptions, dataset: tf.data.Dataset, last_step: int,
               stream: TextIO) -> bool:
    """Trains from the current step to last_step with `model.fit` and Keras' progress bar,
    checkpointing on the way (through a Keras callback) and at the end; returns False when
    interrupted (Ctrl-C) before last_step.

    The run is one Keras epoch of the remaining steps (the stream is endless, so an epoch is
    only a unit of display). Keras' ModelCheckpoint and BackupAndRestore save `save_weights`
    files, which hold Keras variables only: not the layer's tables and accumulators, nor a
    position inside an epoch. The run's `tf.train.Checkpoint` holds everything, so a
    `LambdaCallback` saves that one, at the same steps as the custom loop.
    """
    checkpoints = _Checkpoints(run, options.checkpoint_every)
    interrupted = False
    if last_step > checkpoints.first_step:
        inputs = dataset.map(lambda batch: ({key: batch[key] for key in _KERAS_INPUTS},
                                            batch["label"]))
        try:
            with interrupts.stop_on_interrupt() as stop:

                def after_batch(batch: int, logs: Any) -> None:
                    del batch, logs
                    checkpoints.after_step()
                    # Keras ends the epoch, so fit returns, after this batch.
                    run.keras_model.stop_training = stop.requested

                run.keras_model.fit(
                    inputs, epochs=1, steps_per_epoch=last_step - checkpoints.first_step,
                    shuffle=False,
                    verbose=_KERAS_VERBOSITY[resolve_mode(options.progress, stream)],
                    callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=after_batch)])
                # As in the custom loop: saved below, --resume continues.
                interrupted = stop.requested
        except KeyboardInterrupt:
            interrupted = True  # a second Ctrl-C, inside a step
    checkpoints.finish(int(run.keras_model.examples))
    return not interrupted


# Keras' `verbose` for each --progress mode: Keras' bar; one line at the end of the epoch (the
# run); nothing.
_KERAS_VERBOSITY = {"bar": 1, "lines": 2, "none": 0}


def train(options: TrainOptions, spec: DataSpec, stream: TextIO = sys.stdout,
          execution: Execution | None = None) -> dict[str, Any] | None:
    """Trains (or resumes), then evaluates and exports; returns the evaluation metrics, or
    None when the run stopped at --stop-at-step. On Ctrl-C it saves a checkpoint and raises
    KeyboardInterrupt. `execution` (default: this process) runs the steps and the evaluation."""
    execution = execution or Execution()
    config_path = os.path.join(options.model_dir, "config.json")
    checkpoints = os.path.join(options.model_dir, "checkpoints")
    _check_model_dir(options, spec, checkpoints, config_path)
    source = sources.Source(options, spec)
    with execution.strategy.scope():
        run = _build_run(options, spec, checkpoints)
    if options.resume:
        run.manager.checkpoint.restore(
            run.manager.latest_checkpoint).assert_existing_objects_matched()
        stream.write(f"resumed {options.model_dir} at step {int(run.step)}\n")
    else:
        os.makedirs(options.model_dir, exist_ok=True)
        with open(config_path, "w") as f:
            json.dump(_resolved_config(options, spec), f, indent=2)

    last_step = min(options.steps, options.stop_at_step or options.steps)
    dataset = source.train(int(run.step))
    if run.keras_model is not None:
        finished = _fit_keras(run, options, dataset, last_step, stream)
    else:
        finished = _fit(run, options, spec, dataset, last_step, stream, execution)
    if int(run.step) < options.steps:
        stream.write(f"stopped at step {int(run.step)} with a checkpoint in "
                     f"{options.model_dir}; run again with --resume to continue\n")
        if not finished:
            raise KeyboardInterrupt
        return None

    eval_dataset = source.eval(options.eval_examples)

    def replica_predict(batch: common.Batch) -> tf.Tensor:
        activations = run.embedding.lookup(batch["ids"], lookup_weights(spec, batch),
                                           training=False)
        return tf.sigmoid(run.model((batch["dense"], activations)))

    @tf.function(input_signature=[eval_dataset.element_spec], autograph=False)
    def predict(batch: common.Batch) -> tf.Tensor:
        return execution.strategy.run(replica_predict, args=(batch,))

    result = evaluate(lambda batch: execution.result(execution.dispatch(predict, batch)),
                      eval_dataset)
    result.update(steps=int(run.step), train_malformed=int(run.malformed))
    export_dir = options.export_dir or os.path.join(options.model_dir, "export")
    # A fresh config: training wrote its optimizer into the TableConfigs, and the serving
    # tables must come without optimizer slots.
    export.export(export_dir, run.model, run.manager.latest_checkpoint,
                  feature_config(spec, options.embedding_dim, options.seed), spec, EMBEDDING_API,
                  tables_at=run.embedding.tables_at)
    result["export_dir"] = export_dir
    with open(os.path.join(options.model_dir, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result
