"""Training for `tf-embedding train`: steps, checkpoints, resume, evaluation.

Everything that names an embedding implementation is in `embedding_apis` (`--embedding-api`).
The sharded and replicated APIs train in the custom loop (`_fit`), which only uses the
adapter; the Keras layers train inside one Keras model (`KerasRankingModel`) with `model.fit`
(`_fit_keras`). Both share the checkpoints, resume, evaluation and export. Where the custom
loop's steps run is the `Execution`'s business: in this process, or on the workers of a
parameter-server cluster (`tf_embedding.job.cluster`).
"""

import contextlib
import dataclasses
import json
import os
import sys
from typing import Any, Callable, Iterator, TextIO

import keras
import tensorflow as tf

from tf_embedding.job import embedding_apis
from tf_embedding.job import export
from tf_embedding.job import interrupts
from tf_embedding.job import model as model_lib
from tf_embedding.job import model_dir
from tf_embedding.job import summaries as summaries_lib
from tf_embedding.job.evaluation import evaluate
from tf_embedding.job.progress import Progress, RunningMetrics, resolve_mode
from tf_embedding.job.data import common, sources
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import TrainOptions, checkpoint_dir, mlp_sizes

class Execution:
    """Where the custom loop's steps and the evaluation run: in this process, under the default
    strategy. `cluster.ClusterExecution` runs them on a cluster's workers instead."""

    # Steps dispatched between two waits for them: the checkpoints and the progress display
    # read the run's variables only after a wait.
    steps_per_wait = 1
    # Whether a step reads its batch from the input's iterator itself (this process reads the
    # stream), or takes it as its argument (a parameter-server chief reads it for the workers).
    steps_read_input = True
    # Whether this process writes the run's files (config, metrics, export) and prints.
    is_chief = True

    def __init__(self, strategy: tf.distribute.Strategy | None = None):
        # The run's objects are created in its scope, and the steps run in its `run`.
        self.strategy = strategy or tf.distribute.get_strategy()

    def dispatch(self, function: Callable[[Any], Any], argument: Any) -> Any:
        """Starts the tf.function `function` on `argument` (a batch, or the input's iterator
        when `steps_read_input`); returns what `result` takes."""
        return function(argument)

    def result(self, value: Any) -> Any:
        """The value of a dispatched function's result, once it is done."""
        return value

    def wait(self) -> None:
        """Returns once every dispatched function has run."""

    def worker_rows(self, batch: common.Batch) -> common.Batch:
        """This process's rows of a batch (inside the step's tf.function)."""
        return batch

    def all_rows(self, value: Any) -> Any:
        """Every process's result of its `worker_rows`, in row order."""
        return value

    def checkpoint_directory(self, model_dir: str) -> str:
        """Where this process saves the run's checkpoints."""
        return checkpoint_dir(model_dir)

    def local_state(self) -> contextlib.AbstractContextManager:
        """A context in which variables are made for this process's own bookkeeping (the
        step, the malformed count, the progress metrics)."""
        return contextlib.nullcontext()

    def collectives(self) -> contextlib.AbstractContextManager:
        """A context around work that other processes take part in (checkpoints, evaluation)."""
        return contextlib.nullcontext()

    def finish(self) -> None:
        """Cleans up after the run."""

    def stop_agreed(self, requested: bool) -> bool:
        """Whether to stop before the next step, this process having been asked to or not:
        processes that train together must stop at the same step."""
        return requested


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
    compute_dtype = "bfloat16" if options.mixed_precision == "bfloat16" else "float32"
    model = model_lib.RankingModel(spec, options.embedding_dim, mlp_sizes(options.bottom_mlp),
                                   mlp_sizes(options.top_mlp), compute_dtype,
                                   "cross" if options.model == "dcnv2" else "dot")
    model((tf.zeros([1, spec.num_dense]),
           {f.name: tf.zeros([1, options.embedding_dim]) for f in spec.features}))
    return model


# The batch entries a KerasRankingModel takes; the label is the target of `model.fit`.
# "lookups" is the batch's `summaries.table_lookups`, counted before the ids are padded.
_KERAS_INPUTS = ("dense", "ids", "weights", "malformed", "lookups")
# The parts of a batch the sharded API's enqueue takes (ragged, their sizes vary by batch).
_ID_KEYS = ("ids", "weights")


class KerasRankingModel(keras.Model):
    """The ranking model around the Keras embedding layer, as one Keras model for `model.fit`.

    call(batch) looks up the batch's ids and weights in the layer and runs the RankingModel on
    the dense features and the activations: the logits [B]. `batch` holds `_KERAS_INPUTS`. A
    training call also counts the batch's examples, malformed records and lookups, as the
    custom loop's step does."""

    def __init__(self, embedding: embedding_apis.KerasTraining, ranking: model_lib.RankingModel,
                 spec: DataSpec, malformed: tf.Variable, lookups: tf.Variable):
        super().__init__()
        self.embedding = embedding.layer
        self.ranking = ranking
        self._spec = spec
        self._malformed = malformed
        self._lookups = lookups
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False)

    def call(self, batch: common.Batch, training: bool = False) -> tf.Tensor:
        activations = self.embedding(batch["ids"], lookup_weights(self._spec, batch))
        if training:
            self.examples.assign_add(tf.shape(batch["dense"], out_type=tf.int64)[0])
            self._malformed.assign_add(batch["malformed"])
            self._lookups.assign_add(batch["lookups"])
        return self.ranking((batch["dense"], activations))


@dataclasses.dataclass
class _Run:
    """What a run trains and checkpoints."""

    embedding: embedding_apis.EmbeddingTraining
    model: model_lib.RankingModel
    optimizer: keras.optimizers.Optimizer
    step: Any  # tf.Variable; for --embedding-api keras, the Keras optimizer's `iterations`
    malformed: tf.Variable
    lookups: tf.Variable  # summaries.lookups_counter
    metrics: RunningMetrics | None  # None for --embedding-api keras
    manager: tf.train.CheckpointManager
    keras_model: KerasRankingModel | None  # for --embedding-api keras, compiled for model.fit


def _embedding_class(embedding_api: str) -> type[embedding_apis.EmbeddingTraining]:
    """The `--embedding-api` adapter; keras-rs's is imported only when asked for (an extra),
    and before seeding: importing keras-rs draws from Python's random generator."""
    if embedding_api == "keras-rs":
        from tf_embedding.job import keras_rs_training  # pylint: disable=import-outside-toplevel
        return keras_rs_training.KerasRsTraining
    return embedding_apis.EMBEDDING_APIS[embedding_api]


def _build_run(options: TrainOptions, spec: DataSpec, checkpoints: str,
               execution: Execution) -> _Run:
    embedding_class = _embedding_class(options.embedding_api)
    keras.utils.set_random_seed(options.seed)
    embedding = embedding_apis.build(embedding_class, spec, options)
    model = build_model(options, spec)
    optimizer = model_lib.dense_optimizer(options.model, options.learning_rate)
    with execution.local_state():
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        malformed = tf.Variable(0, dtype=tf.int64, trainable=False)
        lookups = summaries_lib.lookups_counter(spec)
    keras_model = None
    if isinstance(embedding, embedding_apis.KerasTraining):
        keras_model = KerasRankingModel(embedding, model, spec, malformed, lookups)
        keras_model.compile(optimizer=optimizer, loss=batch_loss,
                            metrics=[keras.metrics.AUC(from_logits=True, name="auc")],
                            jit_compile=options.jit_compile)
        # Keras counts the steps it applies, in the same function as the update.
        step = optimizer.iterations
    # Built now so that a restore finds every slot variable to fill.
    optimizer.build((keras_model or model).trainable_variables)
    checkpointed = dict(step=step, model=model, optimizer=optimizer, malformed=malformed,
                        **embedding.checkpointed())
    # The custom loop's progress metrics; Keras' fit displays its own.
    metrics = None
    if keras_model is None:
        with execution.local_state():
            metrics = checkpointed["running_metrics"] = RunningMetrics()
    checkpoint = tf.train.Checkpoint(**checkpointed)
    manager = tf.train.CheckpointManager(checkpoint, checkpoints,
                                         max_to_keep=options.keep_checkpoints)
    return _Run(embedding, model, optimizer, step, malformed, lookups, metrics, manager,
                keras_model)


def _replica_step(run: _Run, spec: DataSpec,
                  enqueued: bool = False) -> Callable[[common.Batch], None]:
    """One replica's training step of the custom loop: lookup, dense forward and backward,
    both optimizers, the step and the metrics. If `enqueued`, the caller enqueued the batch's
    ids (the sharded API's `enqueue`) and the step only dequeues, so that its `batch` needs no
    ids."""
    embedding, model, optimizer = run.embedding, run.model, run.optimizer

    def replica_step(batch: common.Batch) -> None:
        labels = batch["label"]
        with tf.GradientTape() as tape:
            if enqueued:
                activations = embedding.dequeue()
            else:
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

    return replica_step


def _train_step(run: _Run, options: TrainOptions, spec: DataSpec, dataset: tf.data.Dataset,
                execution: Execution) -> Callable[[Any], tf.Tensor]:
    """The custom loop's step, one tf.function that returns its batch's example count. Where
    this process reads the stream, the step takes the input's iterator and reads the batch
    itself, so no batch crosses from Python into the call (that took ~2 ms a step of argument
    handling); on a parameter-server cluster it takes the batch the chief read."""
    if options.jit_compile:
        # The TPU's program shape: the ids are enqueued here and enter the compiled step
        # converted, padded to a power of two, so it compiles once per bucket (docs/xla.md);
        # everything else of the step is compiled.
        compiled_step = tf.function(_replica_step(run, spec, enqueued=True), jit_compile=True,
                                    autograph=False)

        def step_on(batch: common.Batch) -> None:
            run.embedding.enqueue(batch["ids"], lookup_weights(spec, batch), training=True)
            execution.strategy.run(compiled_step, args=(
                {key: value for key, value in batch.items() if key not in _ID_KEYS},))
    else:
        replica_step = _replica_step(run, spec)

        def step_on(batch: common.Batch) -> None:
            # Under a parameter-server strategy the whole step, enqueue to apply_gradients, is
            # one replica function of one scheduled function (docs/parameter_server.md).
            execution.strategy.run(replica_step, args=(execution.worker_rows(batch),))

    def train_step(argument: Any) -> tf.Tensor:  # the name profiles find steps by
        batch = argument.get_next() if execution.steps_read_input else argument
        run.lookups.assign_add(summaries_lib.table_lookups(spec, batch["ids"]))
        step_on(batch)
        return tf.shape(batch["label"], out_type=tf.int64)[0]

    return tf.function(train_step, autograph=False, input_signature=None
                       if execution.steps_read_input else [dataset.element_spec])


def _dispatch_step(execution: Execution, train_step: Callable[[Any], tf.Tensor],
                   batches: Iterator[common.Batch]) -> int:
    """Starts one training step on the next batch; returns the batch's example count."""
    try:
        if execution.steps_read_input:
            return int(execution.result(execution.dispatch(train_step, batches)))
        batch = next(batches)
    except (StopIteration, tf.errors.OutOfRangeError):
        raise ValueError("the training input holds no examples") from None
    execution.dispatch(train_step, batch)
    return batch["label"].shape[0]


def _fit(run: _Run, options: TrainOptions, spec: DataSpec, dataset: tf.data.Dataset,
         last_step: int, stream: TextIO, execution: Execution,
         summaries: summaries_lib.TrainingSummaries) -> bool:
    """Trains from the current step to last_step in the custom loop, checkpointing on the way
    and at the end; returns False when interrupted (Ctrl-C) before last_step."""
    train_step = _train_step(run, options, spec, dataset, execution)
    checkpoints = model_dir.Checkpoints(run.manager, run.step, run.malformed,
                                         options.checkpoint_every)
    progress = Progress(options.progress, checkpoints.first_step, last_step, stream)
    batches = iter(dataset)
    examples = 0
    step = checkpoints.first_step  # the steps dispatched so far
    interrupted = False
    try:
        with interrupts.stop_on_interrupt() as stop:
            while step < last_step and not execution.stop_agreed(stop.requested):
                examples += _dispatch_step(execution, train_step, batches)
                step += 1
                if (step % execution.steps_per_wait == 0
                        or step % options.checkpoint_every == 0 or step == last_step):
                    execution.wait()
                    checkpoints.after_step()
                    progress.update(step, examples, run.metrics, run.malformed,
                                    force=step == last_step)
                    summaries.after_step(step, examples, force=step == last_step)
            # The checkpoint below keeps the work; --resume continues from it.
            interrupted = step < last_step
    except KeyboardInterrupt:
        interrupted = True  # a second Ctrl-C, inside a step
    finally:
        progress.close()
    execution.wait()  # the steps still running when interrupted go into the checkpoint
    checkpoints.finish(examples)
    return not interrupted


def _fit_keras(run: _Run, options: TrainOptions, dataset: tf.data.Dataset, last_step: int,
               stream: TextIO, summaries: summaries_lib.TrainingSummaries) -> bool:
    """Trains from the current step to last_step with `model.fit` and Keras' progress bar,
    checkpointing on the way (through a Keras callback) and at the end; returns False when
    interrupted (Ctrl-C) before last_step.

    The run is one Keras epoch of the remaining steps (the stream is endless, so an epoch is
    only a unit of display). Keras' ModelCheckpoint and BackupAndRestore save `save_weights`
    files, which hold Keras variables only: not the layer's tables and accumulators, nor a
    position inside an epoch. The run's `tf.train.Checkpoint` holds everything, so a
    `LambdaCallback` saves that one, at the same steps as the custom loop."""
    checkpoints = model_dir.Checkpoints(run.manager, run.step, run.malformed,
                                         options.checkpoint_every)
    interrupted = False
    if last_step > checkpoints.first_step:
        inputs = dataset.map(lambda batch: ({key: batch[key] for key in _KERAS_INPUTS},
                                            batch["label"]))
        try:
            with interrupts.stop_on_interrupt() as stop:

                def after_batch(batch: int, logs: Any) -> None:
                    del batch, logs
                    step = checkpoints.after_step()
                    summaries.after_step(step, lambda: int(run.keras_model.examples),
                                         force=step == last_step)
                    # Keras ends the epoch, so fit returns, after this batch.
                    run.keras_model.stop_training = stop.requested

                run.keras_model.fit(
                    inputs, epochs=1, steps_per_epoch=last_step - checkpoints.first_step,
                    shuffle=False,
                    verbose=_KERAS_VERBOSITY[resolve_mode(options.progress, stream)],
                    callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=after_batch),
                               *summaries_lib.keras_callbacks(
                                   options.model_dir, summaries.every, checkpoints.first_step)])
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
    if not execution.is_chief:
        stream = open(os.devnull, "w")  # pylint: disable=consider-using-with
    config_path = os.path.join(options.model_dir, "config.json")
    checkpoints = checkpoint_dir(options.model_dir)
    model_dir.check_model_dir(options, spec, checkpoints, config_path)
    source = sources.Source(options, spec)
    with execution.strategy.scope():
        run = _build_run(options, spec, execution.checkpoint_directory(options.model_dir),
                         execution)
    if options.resume:
        run.manager.checkpoint.restore(
            tf.train.latest_checkpoint(checkpoints)).assert_existing_objects_matched()
        stream.write(f"resumed {options.model_dir} at step {int(run.step)}\n")
    elif execution.is_chief:
        os.makedirs(options.model_dir, exist_ok=True)
        with open(config_path, "w") as f:
            json.dump(model_dir.resolved_config(options, spec), f, indent=2)

    last_step = min(options.steps, options.stop_at_step or options.steps)
    dataset = source.train(int(run.step))
    if run.keras_model is not None:
        # Counted before the ids are padded (the custom loop counts them in its step).
        dataset = dataset.map(lambda batch: {
            **batch, "lookups": summaries_lib.table_lookups(spec, batch["ids"])})
    if options.jit_compile and run.keras_model is not None:
        # model.fit's compiled step takes the ids as they come: padded, it compiles once per
        # bucket of their counts, not once per batch (the sharded API pads at enqueue).
        dataset = dataset.map(common.ids_padded_to_powers_of_two)
    summaries = _summaries(run, options, spec, execution)
    try:
        if run.keras_model is not None:
            finished = _fit_keras(run, options, dataset, last_step, stream, summaries)
        else:
            with execution.collectives():
                finished = _fit(run, options, spec, dataset, last_step, stream, execution,
                                summaries)
        if int(run.step) < options.steps:
            stream.write(f"stopped at step {int(run.step)} with a checkpoint in "
                         f"{options.model_dir}; run again with --resume to continue\n")
            if not finished:
                raise KeyboardInterrupt
            return None
        with execution.collectives():
            result = _evaluate_and_export(run, options, spec, source, execution)
        summaries.evaluation(int(run.step), result)
    finally:
        summaries.close()
    execution.finish()
    return result


def _summaries(run: _Run, options: TrainOptions, spec: DataSpec,
               execution: Execution) -> summaries_lib.TrainingSummaries:
    """The run's TensorBoard summaries (--summary-every; written by the chief only)."""
    def learning_rates() -> dict[str, float]:
        # Read as Keras' own TensorBoard callback reads it (a mirrored variable on MWMS).
        return {"dense": float(keras.ops.convert_to_numpy(run.optimizer.learning_rate)),
                "embedding": options.embedding_learning_rate}

    running = dict if run.metrics is None else (
        lambda: {"loss": run.metrics.loss(), "auc": run.metrics.auc()})
    return summaries_lib.TrainingSummaries(
        options.model_dir, options.summary_every if execution.is_chief else 0, spec,
        run.lookups, learning_rates, run.embedding.dynamic_statistics, running)


def _evaluate_and_export(run: _Run, options: TrainOptions, spec: DataSpec,
                         source: sources.Source, execution: Execution) -> dict[str, Any]:
    """Evaluates the trained run, exports it and writes metrics.json; returns the metrics."""
    eval_dataset = source.eval(options.eval_examples)

    def replica_predict(batch: common.Batch) -> tf.Tensor:
        activations = run.embedding.lookup(batch["ids"], lookup_weights(spec, batch),
                                           training=False)
        return tf.sigmoid(run.model((batch["dense"], activations)))

    @tf.function(input_signature=[eval_dataset.element_spec], autograph=False)
    def predict(batch: common.Batch) -> tf.Tensor:
        return execution.all_rows(execution.strategy.run(
            replica_predict, args=(execution.worker_rows(batch),)))

    result = evaluate(lambda batch: execution.result(execution.dispatch(predict, batch)),
                      eval_dataset)
    result.update(steps=int(run.step), train_malformed=int(run.malformed))
    if dynamic := run.embedding.dynamic_statistics():
        result["dynamic_tables"] = dynamic
    export_dir = options.export_dir or os.path.join(options.model_dir, "export")
    result["export_dir"] = export_dir
    if not execution.is_chief:
        return result
    try:
        # A fresh config: training wrote its optimizer into the TableConfigs, and the serving
        # tables must come without optimizer slots.
        export.export(export_dir, run.model, run.manager.latest_checkpoint,
                      embedding_apis.feature_config(spec, options.embedding_dim, options.seed),
                      spec, embedding_apis.EMBEDDING_API, tables_at=run.embedding.tables_at)
    finally:
        # The metrics of a run whose tables are too large to export are kept all the same.
        with open(os.path.join(options.model_dir, "metrics.json"), "w") as f:
            json.dump(result, f, indent=2)
    return result
