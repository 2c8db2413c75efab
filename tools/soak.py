"""Soak test: trains the sharded `TPUEmbedding` and the Keras layer side by side in one process,
on fresh ragged batches of varying length, saving checkpoints as it goes, and checks that the
process's memory stays flat.

    python tools/soak.py --minutes 60

Each step draws a new batch (batch size and ids per sample vary, so the tensors' shapes do too)
and trains both models on it; every --checkpoint-every steps both are saved
(`tf.train.CheckpointManager`, keeping 2). The resident set size (VmRSS) is sampled every
--sample-seconds. After the warm-up (--warmup-minutes: tracing, allocator and huge-page pools
settle) the growth is the last sample over the first one after warm-up; the run fails (exit
status 1) if it is above --max-growth percent. docs/reliability.md records runs.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def feature_config(args: argparse.Namespace) -> dict[str, tf_embedding.FeatureConfig]:
    return {f"f{t}": tf_embedding.FeatureConfig(tf_embedding.TableConfig(
        args.vocab, args.dim, combiner=("sum", "mean", "sqrtn")[t % 3], name=f"t{t}"))
        for t in range(args.tables)}


def batch(rng: np.random.Generator, args: argparse.Namespace) -> dict[str, tf.RaggedTensor]:
    size = int(rng.integers(args.batch // 2, args.batch + 1))
    features = {}
    for t in range(args.tables):
        lengths = rng.integers(1, args.max_ids + 1, size)
        ids = rng.zipf(1.05, int(lengths.sum())) % args.vocab
        features[f"f{t}"] = tf.RaggedTensor.from_row_lengths(ids.astype(np.int64), lengths)
    return features


def sharded_step(args: argparse.Namespace):
    engine = tf_embedding.TPUEmbedding(feature_config(args), tf_embedding.Adagrad(0.05))
    spec = {f"f{t}": tf.RaggedTensorSpec([None, None], tf.int64) for t in range(args.tables)}

    @tf.function(input_signature=[spec])
    def step(features):
        engine.enqueue(features, training=True)
        with tf.GradientTape() as tape:
            activations = engine.dequeue(partial=True)
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_mean(tf.square(a)) for a in activations.values()])
        engine.apply_gradients(tape.gradient(loss, activations))
        return loss

    engine.build(per_replica_input_shapes={
        name: tf.TensorShape([args.batch, None]) for name in spec})
    return engine, step


def keras_step(args: argparse.Namespace):
    layer = embedding_keras.TPUEmbedding(feature_config(args), tf_embedding.Adagrad(0.05))
    dense = tf.keras.layers.Dense(1)
    optimizer = tf.keras.optimizers.Adam(1e-3)
    spec = {f"f{t}": tf.RaggedTensorSpec([None, None], tf.int64) for t in range(args.tables)}

    @tf.function(input_signature=[spec])
    def step(features):
        with tf.GradientTape() as tape:
            activations = layer(features)
            logits = dense(tf.concat([activations[name] for name in sorted(spec)], axis=1))
            loss = tf.reduce_mean(tf.square(logits - 1.0))
        variables = layer.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    module = tf.Module()
    module.layer, module.dense, module.optimizer = layer, dense, optimizer
    return module, step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--warmup-minutes", type=float, default=None,
                        help="default: a tenth of --minutes, at least 1")
    parser.add_argument("--sample-seconds", type=float, default=15)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--max-growth", type=float, default=1.0, help="percent")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--max-ids", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=None, help="default: a temporary directory")
    args = parser.parse_args()
    warmup = 60 * (args.warmup_minutes if args.warmup_minutes is not None
                   else max(args.minutes / 10, 1))

    model_dir = args.model_dir or tempfile.mkdtemp(prefix="tf_embedding_soak_")
    engine, train_sharded = sharded_step(args)
    keras_module, train_keras = keras_step(args)
    managers = [tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                           os.path.join(model_dir, name), max_to_keep=2)
                for name, model in (("sharded", engine), ("keras", keras_module))]
    rng = np.random.default_rng(args.seed)
    start = time.monotonic()
    next_sample = start
    baseline = None
    samples = []
    steps = 0
    print(f"soak: {args.minutes} min, warm-up {warmup / 60:.1f} min, checkpoints in {model_dir}")
    while time.monotonic() - start < 60 * args.minutes:
        features = batch(rng, args)
        losses = (float(train_sharded(features)), float(train_keras(features)))
        if not all(np.isfinite(losses)):
            print(f"soak: step {steps}: a loss is not finite: {losses}", file=sys.stderr)
            return 1
        steps += 1
        if steps % args.checkpoint_every == 0:
            for manager in managers:
                manager.save(checkpoint_number=steps)
        now = time.monotonic()
        if now >= next_sample:
            rss = rss_mb()
            samples.append((now - start, steps, rss))
            if baseline is None and now - start >= warmup:
                baseline = rss
            print(f"{(now - start) / 60:6.1f} min  step {steps:7d}  RSS {rss:8.1f} MB", flush=True)
            next_sample = now + args.sample_seconds
    final = rss_mb()
    if baseline is None:
        print("soak: the run ended inside the warm-up; nothing to compare", file=sys.stderr)
        return 1
    growth = 100 * (final - baseline) / baseline
    print(f"soak: {steps} steps, RSS after warm-up {baseline:.1f} MB, at the end {final:.1f} MB: "
          f"growth {growth:+.2f}% (limit {args.max_growth}%)")
    return 0 if growth <= args.max_growth else 1


if __name__ == "__main__":
    sys.exit(main())
