"""The `tf-embedding` command: train | cluster | predict | stats | generate.

Each subcommand imports what it needs when it runs: `--help` loads no TensorFlow, and
`predict` only needs TensorFlow and the SavedModel (never the op library).
"""

import argparse
import dataclasses
import json
import sys
from typing import Any, Sequence

from tf_embedding.job import options as options_lib
from tf_embedding.job.data import spec as spec_lib

_SUBCOMMANDS = {
    "train": (options_lib.TrainOptions,
              "train the ranking model, evaluate it on held-out data and export a SavedModel "
              "(as the chief of the parameter-server cluster of TF_CONFIG, if it names one)"),
    "cluster": (options_lib.ClusterOptions,
                "train as `train` does, as the chief of a cluster of --num-ps ps tasks and 1 "
                "worker started on this machine, in a private network namespace (every "
                "option but --num-ps, --max-restarts and --allow-exposed-ports goes to "
                "`train`)"),
    "predict": (options_lib.PredictOptions,
                "score TSV or TFRecord files with an exported SavedModel"),
    "stats": (options_lib.StatsOptions,
              "per-table id statistics and shard load (of data, or of the lookup profiles "
              "training wrote), as a table and a PNG histogram"),
    "generate": (options_lib.GenerateOptions,
                 "write synthetic examples as TSV or TFRecord (e.g. to try predict)"),
}
_SPEC_KEYS = ("tables", "features", "num_dense", "dense_transform", "label_bias")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    for field in dataclasses.fields(cls):
        default = _default(field)
        shown = " ".join(default) if isinstance(default, list) else str(default)
        # argparse expands %-formats in help texts.
        help_text = f"{field.metadata['help']} (default: {shown or 'none'})".replace("%", "%%")
        kwargs: dict[str, Any] = {"default": default, "help": help_text, "dest": field.name}
        if isinstance(default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(default, list):
            kwargs.update(nargs="+", metavar="FILE")
        else:
            kwargs.update(type=type(default), choices=field.metadata["choices"])
        parser.add_argument(_flag(field.name), **kwargs)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and its subcommand parsers."""
    parser = argparse.ArgumentParser(
        prog="tf-embedding",
        description="Train, serve and inspect a DLRM-style ranking model on tf_embedding.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subparsers = {}
    for name, (cls, description) in _SUBCOMMANDS.items():
        # The cluster command passes its arguments on to `train` but its own options, which
        # must therefore be spelled out in full.
        subparsers[name] = commands.add_parser(name, help=description, description=description,
                                               allow_abbrev=name != "cluster")
        _add_options(subparsers[name], cls)
    return parser, subparsers


def _check_value(cls: type, key: str, value: Any, source: str) -> None:
    field = next(f for f in dataclasses.fields(cls) if f.name == key)
    default = _default(field)
    expected: tuple[type, ...] = (type(default),)
    if isinstance(default, float):
        expected = (int, float)
    if isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, expected) and not (isinstance(value, bool)
                                                  and not isinstance(default, bool))
    if not ok:
        raise ValueError(f"{source}: {key} must be a {type(default).__name__}, got {value!r}")
    if field.metadata["choices"] and value not in field.metadata["choices"]:
        raise ValueError(f"{source}: {key} must be one of {field.metadata['choices']}")


def _read_config(path: str, cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """(option values for `cls`, data layout keys) from a JSON config file.

    Keys of other subcommands' options are ignored, so one file can serve them all.
    """
    with open(path) as f:
        config = json.load(f)
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the config must be a JSON object")
    known = {f.name for c, _ in _SUBCOMMANDS.values() for f in dataclasses.fields(c)}
    unknown = set(config) - known - set(_SPEC_KEYS) - {"config"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    own = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in config.items() if k in own and k != "config"}
    for key, value in values.items():
        _check_value(cls, key, value, path)
    return values, {k: config[k] for k in _SPEC_KEYS if k in config}


def data_spec(options: options_lib.DataOptions, layout: dict[str, Any]) -> spec_lib.DataSpec:
    """The config's layout; without tables and features, the preset for the model (MLPerf's
    for dcnv2) or else the data kind, with the config's other layout keys applied."""
    if "tables" in layout or "features" in layout:
        return spec_lib.DataSpec.from_json(layout)
    if options.model == "dcnv2":
        preset = spec_lib.mlperf_dcnv2_spec(options.vocabulary_cap)
    elif options.data == "synthetic":
        preset = spec_lib.synthetic_spec()
    else:
        preset = spec_lib.criteo_spec()
    return dataclasses.replace(preset, **layout)


def parse(argv: Sequence[str]) -> tuple[str, Any, spec_lib.DataSpec | None]:
    """(command, options, data spec) from the command line and its --config file."""
    parser, subparsers = build_parser()
    args = parser.parse_args(argv)
    cls = _SUBCOMMANDS[args.command][0]
    layout: dict[str, Any] = {}
    values: dict[str, Any] = {}
    if getattr(args, "config", ""):
        values, layout = _read_config(args.config, cls)
        # Config values become defaults, so flags given on the command line still win.
        subparsers[args.command].set_defaults(**values)
        args = parser.parse_args(argv)
    own = {f.name for f in dataclasses.fields(cls)}
    # `--model` of the data subcommands (predict's `--model` is an export's path).
    model = args.model if issubclass(cls, options_lib.DataOptions) else "dlrm"
    if presets := {key: value for key, value in options_lib.MODEL_DEFAULTS[model].items()
                   if key in own and key not in values}:
        # Under the config's values and the flags, as they are.
        subparsers[args.command].set_defaults(**presets)
        args = parser.parse_args(argv)
    options = cls(**{name: getattr(args, name) for name in own})
    spec = data_spec(options, layout) if hasattr(options, "data") else None
    return args.command, options, spec


def _train(options: options_lib.TrainOptions, spec: spec_lib.DataSpec) -> int:
    from tf_embedding.cluster import chief
    from tf_embedding.job import cluster, model, multi_worker, training
    if options.mixed_precision == "bfloat16" and (warning := model.slow_bfloat16_warning()):
        print(warning, file=sys.stderr)
    execution = cluster.execution_for(options, sys.stdout)
    try:
        result = training.train(options, spec, execution=execution)
    except (cluster.TaskLostError, multi_worker.WorkerLostError) as e:
        print(f"tf-embedding: error: {e}", file=sys.stderr)
        # Exiting normally, TF's eager context would log a line for each function it cannot
        # remove from the lost task (a dozen or more), after the message above.
        chief.exit_chief(1)
    status = _report(result)
    if isinstance(execution, (cluster.ClusterExecution, multi_worker.MultiWorkerExecution)):
        # After a lost worker, TF's coordinator would hang the exit (tf_embedding.cluster.chief).
        chief.exit_chief(status)
    return status


def _report(result: dict[str, Any] | None) -> int:
    """Prints a finished training's evaluation and export; its exit status."""
    if result is None:
        return 0
    print(f"evaluation on {result['examples']} held-out examples:")
    print(f"  model   AUC {result['auc']:.4f}   log loss {result['log_loss']:.4f}")
    if "bayes_auc" in result:
        print(f"  Bayes   AUC {result['bayes_auc']:.4f}   log loss {result['bayes_log_loss']:.4f}"
              "   (the planted probabilities)")
        print(f"  gap     AUC {result['bayes_auc'] - result['auc']:.4f}")
    if result["train_malformed"] or result["malformed"]:
        print(f"malformed records skipped: {result['train_malformed']} in training, "
              f"{result['malformed']} in evaluation")
    print(f"exported SavedModel to {result['export_dir']}")
    return 0


def _cluster(options: options_lib.ClusterOptions, argv: Sequence[str]) -> int:
    from tf_embedding.job import launcher
    try:
        return launcher.run(options, launcher.train_argv(argv[1:]))
    # No private network for the tasks (and --allow-exposed-ports not given), or a task exited
    # before it was ready (its output says why).
    except RuntimeError as e:
        print(f"tf-embedding cluster: {e}", file=sys.stderr)
        return 1


def _predict(options: options_lib.PredictOptions) -> int:
    from tf_embedding.job import predict
    if not options.input:
        raise ValueError("--input: give at least one file to score")
    count, malformed = predict.predict(options)
    print(f"scored {count} records ({malformed} malformed) into {options.output}")
    return 0


def _stats(options: options_lib.StatsOptions, spec: spec_lib.DataSpec) -> int:
    from tf_embedding.job import stats
    print(stats.run(options, spec))
    return 0


def _generate(options: options_lib.GenerateOptions, spec: spec_lib.DataSpec) -> int:
    from tf_embedding.job.data import generate
    count = generate.write(options, spec)
    print(f"wrote {count} {options.split} examples to {options.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a subcommand; returns the exit status (2 for bad options or data)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        command, options, spec = parse(argv)
        if command == "predict":
            return _predict(options)
        if command == "cluster":
            return _cluster(options, argv)
        return {"train": _train, "stats": _stats, "generate": _generate}[command](options, spec)
    except (ValueError, OSError) as e:
        print(f"tf-embedding: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
