"""Options of the `tf-embedding` subcommands, as dataclasses the command line is built from.

Every field is a flag (`--field-name`) and a key of the JSON `--config` file; a flag given on
the command line beats the config file, which beats the default. Plain Python, so `--help`
never imports TensorFlow.
"""

import dataclasses
import warnings
import os
from typing import Any

from tf_embedding.job.data.spec import MLPERF_DCNV2_EMBEDDING_DIM


def checkpoint_dir(model_dir: str) -> str:
    """Where a run in `model_dir` keeps its checkpoints (TF's `checkpoint` state file and the
    checkpoints it names)."""
    return os.path.join(model_dir, "checkpoints")


def option(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A field with its help text (and allowed values) for the command line."""
    metadata = {"help": help, "choices": choices}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class DataOptions:
    """Where examples come from; shared by train, stats and generate."""

    config: str = option("", "JSON file of option values and, optionally, the data layout "
                             "('tables', 'features', 'num_dense', 'dense_transform')")
    data: str = option("synthetic", "input kind; tsv and tfrecord default to the Criteo layout",
                       ("synthetic", "tsv", "tfrecord"))
    train_input: list = option([], "training files (tsv/tfrecord), read in the given order")
    eval_input: list = option([], "held-out files; without them every --holdout-every-th "
                                  "training record is held out instead")
    holdout_every: int = option(20, "hold out every N-th record of --train-input for "
                                    "evaluation when --eval-input is not given (0: none)")
    batch_size: int = option(4096, "examples per step")
    seed: int = option(0, "seed of the synthetic data and of the model's initial values")
    model: str = option("dlrm", "the ranking model and its data layout: dlrm, the job's DLRM "
                                "(dot interaction) on its click log (Criteo's layout for "
                                "files); dcnv2, MLPerf's DLRM-DCNv2 (low-rank cross network, "
                                "its MLP sizes, Adagrad) on MLPerf's layout (26 multi-hot "
                                "features, width 128) for every --data", ("dlrm", "dcnv2"))
    vocabulary_cap: int = option(1_000_000, "--model dcnv2: rows of MLPerf's larger tables "
                                            "(theirs go up to 40M)")

    def __post_init__(self) -> None:
        _at_least(self, batch_size=1, holdout_every=0, vocabulary_cap=1)


# The defaults `--model` brings (a config file's values and flags still win): MLPerf
# DLRM-DCNv2's widths, bottom MLP 512-256-128, top MLP 1024-1024-512-256-1 and learning rates.
MODEL_DEFAULTS = {
    "dlrm": {},
    "dcnv2": {"embedding_dim": MLPERF_DCNV2_EMBEDDING_DIM, "bottom_mlp": "512,256",
              "top_mlp": "1024,1024,512,256",
              "learning_rate": 0.004, "embedding_learning_rate": 0.004},
}


@dataclasses.dataclass
class TrainOptions(DataOptions):
    model_dir: str = option("tf_embedding_run", "checkpoints, config.json, metrics.json and, "
                                                "unless --export-dir, the export go here")
    export_dir: str = option("", "SavedModel directory; empty means MODEL_DIR/export")
    steps: int = option(2500, "training steps")
    embedding_dim: int = option(16, "width of every embedding table")
    embedding_api: str = option("sharded", "embedding training object: the sharded "
                                           "TPUEmbedding with its fused Adagrad, the "
                                           "replicated TPUEmbeddingV0 with tf_keras' Adagrad, "
                                           "or the Keras layer tf_embedding.keras.TPUEmbedding "
                                           "(fused Adagrad) in a Keras model trained by "
                                           "model.fit, or keras-rs's DistributedEmbedding "
                                           "(tf_embedding.keras_rs; its tables' Keras Adagrad "
                                           "applied the TPU way) in the same model, or stock "
                                           "TensorFlow alone (tf.Variable tables, "
                                           "tf.nn.safe_embedding_lookup_sparse, tf_keras' "
                                           "Adagrad): the baseline",
                                ("sharded", "replicated", "keras", "keras-rs", "stock"))
    embedding_learning_rate: float = option(2.0, "Adagrad learning rate of the tables")
    learning_rate: float = option(0.002, "Adam learning rate of the MLPs")
    bottom_mlp: str = option("64", "hidden layer sizes of the bottom (dense) MLP; it ends in "
                                   "a layer of --embedding-dim units")
    top_mlp: str = option("128,64", "hidden layer sizes of the top MLP; it ends in one logit")
    mixed_precision: str = option("none", "bfloat16: the MLPs and the interaction compute in "
                                          "bfloat16 (Keras' mixed_bfloat16 policy; weights, "
                                          "tables and the logit stay float32)",
                                  ("none", "bfloat16"))
    eval_examples: int = option(262144, "held-out examples to evaluate (0: all of "
                                        "--eval-input; synthetic data needs a number)")
    checkpoint_every: int = option(500, "steps between checkpoints (and one at the end)")
    keep_checkpoints: int = option(2, "checkpoints to keep")
    resume: bool = option(False, "continue the run in --model-dir from its latest checkpoint")
    stop_at_step: int = option(0, "stop (with a checkpoint) once this step is reached, as an "
                                  "interruption would; 0: train to --steps")
    progress: str = option("auto", "progress display: a carriage-return bar, one line per "
                                    "10% of the run, or none; auto picks bar on a terminal",
                           ("auto", "bar", "lines", "none"))
    summary_every: int = option(100, "steps between TensorBoard summaries, under MODEL_DIR/"
                                     "tensorboard (0: none)")
    jit_compile: bool = option(False, "compile each training step with XLA: the sharded "
                                      "API's dequeue, the model and both optimizers in one "
                                      "compiled function, enqueue in its caller as on a TPU; "
                                      "the Keras API's whole model.fit step, its ids padded "
                                      "to powers of two (not replicated, keras-rs, stock)")
    collective_timeout: float = option(600.0, "on a multi-worker cluster: seconds an exchange "
                                              "waits for the other workers before the run "
                                              "stops, naming the lost one (0: forever)")
    sharding: str = option("row", "how the sharded API's tables are split (docs/"
                                  "sharding_plans.md): row, every table over every device; "
                                  "table, each table whole on one device, the largest first "
                                  "on the least loaded; auto, the planner's plan on a "
                                  "multi-worker cluster (row elsewhere); or a JSON file of a "
                                  "ShardingPlan")
    ps_placement: str = option("split", "deprecated: --sharding table is what whole did "
                                        "(split: --sharding row)", ("split", "whole"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ps_placement == "whole":
            if self.sharding != "row":
                raise ValueError("--ps-placement whole is --sharding table; give --sharding "
                                 "alone.")
            warnings.warn("--ps-placement whole is deprecated: use --sharding table.",
                          DeprecationWarning, stacklevel=2)
            self.sharding = "table"
        if self.sharding != "row" and self.embedding_api != "sharded":
            raise ValueError(f"--sharding {self.sharding} splits the sharded API's tables; "
                             f"--embedding-api {self.embedding_api} has its own. Use "
                             "--embedding-api sharded.")
        _at_least(self, steps=1, embedding_dim=1, checkpoint_every=1, keep_checkpoints=1,
                  eval_examples=0, stop_at_step=0, collective_timeout=0, summary_every=0)
        mlp_sizes(self.bottom_mlp)
        mlp_sizes(self.top_mlp)
        if self.jit_compile and self.embedding_api in _NOT_COMPILED:
            raise ValueError(f"--jit-compile with --embedding-api {self.embedding_api}: "
                             f"{_NOT_COMPILED[self.embedding_api]}. Use --embedding-api sharded "
                             "or keras.")


# Why the other --embedding-api values do not take --jit-compile.
_NOT_COMPILED = {
    "replicated": "tf_keras' legacy Adagrad, which updates the replicated tables, has no XLA "
                  "kernel for its sparse update (ResourceSparseApplyAdagradV2)",
    "keras-rs": "keras-rs's layer is not tested under XLA (it sets supports_jit = False), and "
                "its sparse inputs keep every id, so padding cannot bound its compiles",
    "stock": "tf_keras' legacy Adagrad, which updates the stock tables, has no XLA kernel for "
             "its sparse update (ResourceSparseApplyAdagradV2)",
}


@dataclasses.dataclass
class ClusterOptions(TrainOptions):
    strategy: str = option("parameter-server", "the cluster's strategy: ps tasks holding the "
                                               "tables, trained asynchronously by a worker "
                                               "(ParameterServerStrategy), or workers holding "
                                               "a block of each table each, trained "
                                               "synchronously (MultiWorkerMirroredStrategy)",
                           ("parameter-server", "multi-worker"))
    num_ps: int = option(2, "ps tasks of the local cluster; the tables are split over them")
    num_workers: int = option(2, "with --strategy multi-worker: the workers; the tables are "
                                 "split over them and each trains 1/N of each global batch")
    max_restarts: int = option(3, "restarts of dead tasks in one run (a worker is restarted in "
                                  "place; a dead ps task restarts the cluster and resumes from "
                                  "the last checkpoint); then the run fails")
    allow_exposed_ports: bool = option(
        False, "where this machine gives no private network namespace for the tasks, run them "
               "anyway with their ports on every interface, where anyone who can reach them can "
               "run any op in them (on a trusted network only)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, num_ps=1, num_workers=1, max_restarts=0)
        check_cluster_training(self)


# Why the other --embedding-api values cannot train on a parameter-server cluster.
_NOT_ON_A_CLUSTER = {
    "replicated": "the replicated TPUEmbeddingV0 keeps every table in one variable, which "
                  "ParameterServerStrategy would place whole on one ps task, and it is not "
                  "made for that strategy",
    "keras": "the Keras layer trains with Keras 3's model.fit, which has no parameter-server "
             "support (it never schedules steps on a cluster's workers)",
    "keras-rs": "keras-rs's layer trains with Keras 3's model.fit, which has no "
                "parameter-server support (it never schedules steps on a cluster's workers)",
    "stock": "the stock baseline is the one-process job on stock TensorFlow, what the other "
             "APIs are measured against",
}


def check_cluster_training(options: TrainOptions) -> None:
    """Raises ValueError unless `options` can train on a parameter-server cluster: the
    sharded API, uncompiled."""
    if options.embedding_api in _NOT_ON_A_CLUSTER:
        raise ValueError(
            f"--embedding-api {options.embedding_api} cannot train on a cluster: "
            f"{_NOT_ON_A_CLUSTER[options.embedding_api]}. Use --embedding-api sharded (the "
            "default), whose tables are split over the ps tasks, or train in one process "
            "(tf-embedding train without TF_CONFIG).")
    if options.jit_compile:
        raise ValueError(
            "--jit-compile cannot train on a cluster: a compiled step reads the variables of "
            "its own device only, and the tables are on the ps tasks. Train without "
            "--jit-compile, or in one process (tf-embedding train without TF_CONFIG).")


@dataclasses.dataclass
class StatsOptions(DataOptions):
    batches: int = option(20, "batches to analyse")
    num_shards: int = option(8, "devices the tables are split over for the load estimate, as "
                                "the sharded TPUEmbedding splits them")
    partition_strategy: str = option("div", "how rows map to the shards: contiguous row blocks "
                                            "(div) or row r on shard r % N (mod)",
                                     ("div", "mod"))
    profile_dir: str = option("", "report the lookup statistics that training wrote to this "
                                  "profile_data_directory instead of analysing data")
    split: str = option("train", "which split to analyse", ("train", "eval"))
    png: str = option("id_stats.png", "where to write the histogram ('' for none)")
    model_dir: str = option("", "report the dynamic tables' counts (steps, occupied rows, "
                                "candidates, admitted, evicted, refused) in this run's latest "
                                "checkpoint instead of analysing data")

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, batches=1, num_shards=1)


@dataclasses.dataclass
class GenerateOptions(DataOptions):
    output: str = option("synthetic.tsv", "file to write")
    format: str = option("tsv", "file format", ("tsv", "tfrecord"))
    examples: int = option(100000, "examples to write (rounded up to whole batches)")
    split: str = option("eval", "which split of the synthetic log to write", ("train", "eval"))

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, examples=1)


@dataclasses.dataclass
class PredictOptions:
    model: str = option("tf_embedding_run/export", "exported SavedModel directory")
    input: list = option([], "files to score")
    format: str = option("tsv", "format of --input (TSV lines may omit the label column)",
                         ("tsv", "tfrecord"))
    output: str = option("predictions.txt", "one probability per input record ('nan' for a "
                                            "malformed record)")
    batch_size: int = option(4096, "records per call of the model")

    def __post_init__(self) -> None:
        _at_least(self, batch_size=1)


def _at_least(options: object, **minimums: int) -> None:
    for name, minimum in minimums.items():
        if getattr(options, name) < minimum:
            raise ValueError(f"--{name.replace('_', '-')} must be at least {minimum}, "
                             f"got {getattr(options, name)}")


def mlp_sizes(value: str) -> list[int]:
    """'128,64' -> [128, 64]; '' -> []."""
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        sizes = [0]
    if any(s < 1 for s in sizes):
        raise ValueError(f"layer sizes must be positive, got {value!r}")
    return sizes
