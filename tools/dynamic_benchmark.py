"""A dynamic table against a fixed table of the same capacity on the same ids (docs/performance.md,
"Dynamic tables"): one step per tf.function call, the two alternated so each ratio is paired in
time.

    python tools/dynamic_benchmark.py            # capacity 10M at 70% full, dim 64, 4096 x 20
    python tools/dynamic_benchmark.py --quick    # a smoke run (seconds)
    python tools/dynamic_benchmark.py --keys shared-low-bits  # keys i * 2**32 (see below)

The fixed table looks up Zipf ranks (permuted over its first `fill` rows); the dynamic table the
same ranks as scattered 64-bit keys, after a warm-up that admits every one of them, so it is
`fill` full. Timed, per table: a training step (enqueue, dequeue, apply_gradients with Adagrad),
a forward step (training=False), and for the dynamic table a training step whose keys are all
new (each admitted, its row and slot reset), against the fixed table's step on as many ids.
Then both are exported as a serving SavedModel (`TPUEmbeddingForServing` restored from a
checkpoint), loaded back, and their lookups timed on the same batches: the dynamic one maps
keys to rows in a stock hash table first. `--keys shared-low-bits` makes every key a multiple
of 2**32, which an identity hash (`key & mask`) would pile into one bucket.
"""

import argparse
import gc
import pathlib
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf

import tf_embedding

FULL = dict(capacity=10_000_000, fill=0.7, dim=64, batch=4096, ids_per_sample=20, steps=10,
            rounds=3)
QUICK = dict(capacity=20_000, fill=0.7, dim=16, batch=256, ids_per_sample=5, steps=3, rounds=2)


def _feature(capacity: int, dim: int, dynamic: bool) -> tf_embedding.FeatureConfig:
    table = tf_embedding.TableConfig(
        vocabulary_size=capacity, dim=dim, name="items", combiner="sum",
        initializer=tf.keras.initializers.RandomUniform(-0.05, 0.05, seed=1),
        dynamic=tf_embedding.DynamicVocabulary() if dynamic else None)
    return tf_embedding.FeatureConfig(table, name="clicked")


def _export(embedding: tf_embedding.TPUEmbedding, feature: tf_embedding.FeatureConfig,
            directory: pathlib.Path) -> str:
    """Exports `embedding`'s trained table as a serving SavedModel (a `TPUEmbeddingForServing`
    restored from its checkpoint); returns the SavedModel's path."""
    checkpoint = tf.train.Checkpoint(embedding=embedding).save(str(directory / "ckpt"))
    serving = tf_embedding.TPUEmbeddingForServing(feature, None)
    tf.train.Checkpoint(embedding=serving).restore(checkpoint).expect_partial()
    module = tf.Module()
    module.embedding = serving
    module.serve = tf.function(
        lambda values, splits: serving(tf.RaggedTensor.from_row_splits(values, splits)),
        input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)])
    tf.saved_model.save(module, str(directory / "export"))
    return str(directory / "export")


def _loaded_lookup(path: str):
    """The lookup of the SavedModel at `path`, loaded: a function of a ragged batch."""
    loaded = tf.saved_model.load(path)
    return lambda ragged: loaded.serve(ragged.values, ragged.row_splits)


def _steps(embedding: tf_embedding.TPUEmbedding):
    """(training step, forward step) of one tf.function call each."""
    @tf.function
    def train(ids):
        embedding.enqueue(ids, training=True)
        activations = embedding.dequeue()
        embedding.apply_gradients(tf.ones_like(activations))

    @tf.function
    def forward(ids):
        embedding.enqueue(ids, training=False)
        return embedding.dequeue()

    return train, forward


def _ragged(ids: np.ndarray, ids_per_sample: int) -> tf.RaggedTensor:
    return tf.RaggedTensor.from_uniform_row_length(tf.constant(ids, tf.int64), ids_per_sample)


def _timed(call, argument) -> float:
    start = time.perf_counter()
    call(argument)
    return time.perf_counter() - start


def _paired_row(name: str, pair: tuple, steps: int, rounds: int) -> str:
    """One table row: `pair` (fixed call, its batches, dynamic call, its batches) timed step by
    step, fixed then dynamic, and the medians of their times and of their paired ratios."""
    call_a, batches_a, call_b, batches_b = pair
    new = name.endswith("new")  # the keys are new only once: one round, the next batch each
    times_a, times_b, ratios = [], [], []
    for _ in range(1 if new else rounds):
        for step in range(steps):
            a = _timed(call_a, batches_a[step])
            b = _timed(call_b, batches_b[step + 1 if new else step])
            times_a.append(a), times_b.append(b), ratios.append(b / a)
    return (f"| {name} | {statistics.median(times_a) * 1e3:.1f} | "
            f"{statistics.median(times_b) * 1e3:.1f} | {statistics.median(ratios):.2f}x |")


def _header(w: dict, keys: str) -> str:
    return (f"tf_embedding dynamic-table benchmark, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
            f"workload: capacity {w['capacity']:,} ({w['fill']:.0%} full), dim {w['dim']}, "
            f"batch {w['batch']} x {w['ids_per_sample']} ids, Adagrad, sum; Zipf 1.05 over the "
            f"occupied keys ({keys}); {w['steps']} steps x {w['rounds']} rounds, each step "
            "fixed then dynamic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"the smoke workload {QUICK}")
    parser.add_argument("--keys", choices=("random", "shared-low-bits"), default="random",
                        help="the dynamic table's keys: random int64, or multiples of 2**32")
    args = parser.parse_args()
    w = QUICK if args.quick else FULL
    rng = np.random.default_rng(0)
    occupied = int(w["capacity"] * w["fill"])
    rows = rng.permutation(occupied)
    lookups = w["batch"] * w["ids_per_sample"]
    # Distinct keys: the occupied ones, then the new ones of the "every key new" steps.
    count = occupied + lookups * (w["steps"] + 1)
    keys = (rng.permutation(np.unique(rng.integers(0, 2**62, size=2 * count)))[:count]
            if args.keys == "random" else rng.permutation(count).astype(np.int64) << 32)
    ranks = [np.minimum(rng.zipf(1.05, lookups) - 1, occupied - 1) for _ in range(w["steps"])]
    print(_header(w, args.keys))

    features = {kind: _feature(w["capacity"], w["dim"], kind == "dynamic")
                for kind in ("fixed", "dynamic")}
    fixed, dynamic = (tf_embedding.TPUEmbedding(features[kind], tf_embedding.Adagrad(0.05))
                      for kind in ("fixed", "dynamic"))
    fixed_train, fixed_forward = _steps(fixed)
    dynamic_train, dynamic_forward = _steps(dynamic)
    lookups = w["batch"] * w["ids_per_sample"]
    for start in range(0, occupied, lookups):  # admit every occupied key, a batch at a time
        chunk = keys[np.arange(start, start + lookups) % occupied]
        dynamic_train(_ragged(chunk, w["ids_per_sample"]))
    print(f"filled:   {dynamic.dynamic_statistics()['items']}")

    fixed_batches = [_ragged(rows[r], w["ids_per_sample"]) for r in ranks]
    dynamic_batches = [_ragged(keys[r], w["ids_per_sample"]) for r in ranks]
    # Batch 0 of the new keys warms up; the timed steps take the others.
    new_batches = [_ragged(keys[occupied + s * lookups:occupied + (s + 1) * lookups],
                           w["ids_per_sample"]) for s in range(w["steps"] + 1)]
    # The fixed table's "all new" partner: as many distinct ids, none repeated.
    distinct_batches = [_ragged(rows[(s * lookups + np.arange(lookups)) % occupied],
                                w["ids_per_sample"]) for s in range(w["steps"])]
    pairs = {"training step": (fixed_train, fixed_batches, dynamic_train, dynamic_batches),
             "forward step": (fixed_forward, fixed_batches, dynamic_forward, dynamic_batches),
             "training step, every key new": (fixed_train, distinct_batches, dynamic_train,
                                              new_batches)}
    for call_a, batches_a, call_b, batches_b in pairs.values():  # trace and warm up
        call_a(batches_a[0]), call_b(batches_b[0])
    print("\n| step | fixed ms | dynamic ms | dynamic / fixed |\n|:--|--:|--:|--:|")
    for name, pair in pairs.items():
        print(_paired_row(name, pair, w["steps"], w["rounds"]))
    after = dynamic.dynamic_statistics()["items"]
    with tempfile.TemporaryDirectory() as directory:
        exports = {kind: _export(embedding, features[kind], pathlib.Path(directory) / kind)
                   for kind, embedding in (("fixed", fixed), ("dynamic", dynamic))}
        # The exports are timed with the training tables freed: loaded, they are copies.
        del fixed, dynamic, fixed_train, fixed_forward, dynamic_train, dynamic_forward, pairs
        gc.collect()
        exported = {kind: _loaded_lookup(path) for kind, path in exports.items()}
    pair = (exported["fixed"], fixed_batches, exported["dynamic"], dynamic_batches)
    pair[0](pair[1][0]), pair[2](pair[3][0])  # trace and warm up
    print(_paired_row("exported lookup (SavedModel)", pair, w["steps"], w["rounds"]))
    print(f"\nafter:    {after}")

if __name__ == "__main__":
    main()
