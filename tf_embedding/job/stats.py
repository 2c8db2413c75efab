"""`tf-embedding stats`: how ids fall on each table, as a text table and a PNG histogram.

Per table, over the analysed batches:
  ids/sample     lookups per example (all the table's features together)
  unique/batch   distinct rows per batch, and their share of the batch's lookups
  hot 1%         share of lookups that hit the 1% most frequent rows of the vocabulary
  max shard      the busiest shard's lookups over the mean shard's, per batch, averaged,
                 with the table split over --num-shards devices the way the sharded
                 `TPUEmbedding` splits it with --partition-strategy: contiguous row blocks
                 ('div') or row r on shard r % N ('mod') (`tf_embedding.sharded.layout`)
With --profile-dir, the same columns come from the lookup-statistics files that training with
`profile_data_directory` wrote (`tf_embedding.sharded.profile_files`): one row per file, its
table's layout in the row's name; the files do not record the hot rows. A dynamic table's ids
are keys: its shards are the blocks its keys hash to (`dynamic_vocabulary.key_blocks`).
With --model-dir, the dynamic tables' counts in a run's latest checkpoint (steps, occupied
rows, candidates, admitted, evicted, refused; docs/dynamic_vocabulary.md).
The PNG shows each table's lookups per shard over all batches, relative to the mean.
"""

import dataclasses
import itertools
import math

import numpy as np
import tensorflow as tf

from tf_embedding import dynamic_vocabulary
from tf_embedding.job import plots
from tf_embedding.job.data import sources
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job import options as options_lib
from tf_embedding.job.options import StatsOptions
from tf_embedding.sharded import dynamic_table, profile_files
from tf_embedding.sharded.layout import ShardLayout


@dataclasses.dataclass
class TableStats:
    table: str
    vocabulary_size: int
    ids_per_sample: float
    unique_per_batch: float
    unique_share: float
    hot_share: float
    max_shard_load: float
    # Lookups per row block over all batches; a table with fewer rows than shards has fewer
    # blocks, as in the engine.
    shard_lookups: np.ndarray


def collect(batches: list[dict], spec: DataSpec, num_shards: int,
            partition_strategy: str = "div") -> list[TableStats]:
    """Statistics of each table over the batches (dicts of numpy-convertible tensors)."""
    result = []
    for table in spec.tables:
        features = [f.name for f in spec.features if f.table == table.name]
        # The engine's own layout (devices are not touched: the layout only records them).
        layout = ShardLayout(table.vocabulary_size, [None] * num_shards, partition_strategy)
        shard_lookups = np.zeros(len(layout.rows), np.int64)
        samples = 0
        seen, unique, unique_share, max_load = [], [], [], []
        for batch in batches:
            ids = np.concatenate([batch["ids"][name].flat_values.numpy() for name in features])
            samples += int(batch["label"].shape[0])
            seen.append(ids)
            if not len(ids):
                continue
            per_shard = np.bincount(_blocks(ids, layout, table.dynamic is not None),
                                    minlength=len(layout.rows))
            shard_lookups += per_shard
            distinct = len(np.unique(ids))
            unique.append(distinct)
            unique_share.append(distinct / len(ids))
            max_load.append(per_shard.max() / (len(ids) / len(layout.rows)))
        counts = np.unique(np.concatenate(seen), return_counts=True)[1] if seen else []
        lookups = int(np.sum(counts))
        hot = min(len(counts), max(1, math.ceil(table.vocabulary_size / 100)))
        top = np.partition(counts, len(counts) - hot)[-hot:].sum() if lookups else 0
        result.append(TableStats(
            table=table.name, vocabulary_size=table.vocabulary_size,
            ids_per_sample=lookups / max(samples, 1),
            unique_per_batch=float(np.mean(unique)) if unique else 0.0,
            unique_share=float(np.mean(unique_share)) if unique_share else 0.0,
            hot_share=top / max(lookups, 1),
            max_shard_load=float(np.mean(max_load)) if max_load else 0.0,
            shard_lookups=shard_lookups))
    return result


def _blocks(ids: np.ndarray, layout: ShardLayout, dynamic: bool) -> np.ndarray:
    """Each id's block: its row's in `layout`, or for a dynamic table's keys the block the key
    hashes to."""
    if not dynamic:
        return layout.block_of(tf.constant(ids, tf.int64)).numpy()
    return dynamic_vocabulary.key_blocks(ids, len(layout.rows))


def from_profile(profile: profile_files.TableProfile) -> TableStats:
    """A lookup-statistics file's totals as the columns of the report (no hot rows)."""
    parameters = profile.parameters
    return TableStats(
        table=(f"{profile.table} ({parameters['partition_strategy']}, "
               f"{parameters['num_blocks']} blocks)"),
        vocabulary_size=parameters["vocabulary_size"],
        ids_per_sample=profile.lookups / max(profile.examples, 1),
        unique_per_batch=profile.unique / max(profile.batches, 1),
        unique_share=profile.unique / max(profile.lookups, 1),
        hot_share=float("nan"),
        max_shard_load=profile.max_shard_load / max(profile.batches, 1),
        shard_lookups=np.array(profile.shard_lookups, np.int64))


# Where a checkpoint holds a dynamic table's index counts: <path to the table>..dynamic/...
_DYNAMIC_STATS_KEY = "..dynamic/index/.ATTRIBUTES/stats"


def dynamic_report(model_dir: str) -> str:
    """The counts of each dynamic table in `model_dir`'s latest checkpoint, as a text table.

    Raises:
      ValueError: no checkpoint in `model_dir`, or one without dynamic tables.
    """
    path = tf.train.latest_checkpoint(options_lib.checkpoint_dir(model_dir))
    if path is None:
        raise ValueError(f"--model-dir {model_dir}: no checkpoint in "
                         f"{options_lib.checkpoint_dir(model_dir)}")
    reader = tf.train.load_checkpoint(path)
    tables = sorted((key[:-len(_DYNAMIC_STATS_KEY)].rsplit("/", 1)[-1], reader.get_tensor(key))
                    for key in reader.get_variable_to_shape_map()
                    if key.endswith(_DYNAMIC_STATS_KEY))
    if not tables:
        raise ValueError(f"--model-dir {model_dir}: its checkpoint {path} holds no dynamic table")
    rows = [(name,) + tuple(f"{int(value):,}" for value in values) for name, values in tables]
    return f"dynamic tables of {path}\n" + _aligned(("table",) + dynamic_table.STATISTICS, rows)


def format_table(stats: list[TableStats], shards: str) -> str:
    """The statistics as an aligned text table; `shards` describes the split ("8", ...)."""
    header = ("table", "vocabulary", "ids/sample", "unique/batch", "unique %", "hot 1%",
              f"max shard/{shards}")
    rows = [(s.table, f"{s.vocabulary_size:,}", f"{s.ids_per_sample:.2f}",
             f"{s.unique_per_batch:,.0f}", f"{100 * s.unique_share:.1f}%",
             "-" if math.isnan(s.hot_share) else f"{100 * s.hot_share:.1f}%",
             f"{s.max_shard_load:.2f}x") for s in stats]
    return _aligned(header, rows)


def _aligned(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A text table: the first column left-aligned, the others right-aligned, a rule under
    the header."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths)))
             for row in [header] + rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def run(options: StatsOptions, spec: DataSpec) -> str:
    """Analyses --batches batches of the chosen split, or reads --profile-dir; returns the
    report text."""
    if options.model_dir:
        return dynamic_report(options.model_dir)
    if options.png:
        plots.pyplot()  # a missing matplotlib fails here, before the analysis
    if options.profile_dir:
        profiles = profile_files.read_directory(options.profile_dir)
        stats = [from_profile(profile) for profile in profiles]
        report = (f"{len(profiles)} lookup profiles in {options.profile_dir}, "
                  f"{sum(p.batches for p in profiles)} sampled table batches\n"
                  + format_table(stats, "blocks"))
        return report + _histogram(options.png, stats)
    source = sources.Source(options, spec)
    if options.split == "train":
        dataset = source.train(0)
    else:
        dataset = source.eval(options.batches * options.batch_size)
    batches = list(itertools.islice(iter(dataset), options.batches))
    stats = collect(batches, spec, options.num_shards, options.partition_strategy)
    samples = sum(int(b["label"].shape[0]) for b in batches)
    report = (f"{len(batches)} batches, {samples} examples ({options.data}, {options.split})\n"
              + format_table(stats, f"{options.num_shards} {options.partition_strategy}"))
    return report + _histogram(options.png, stats)


def _histogram(png: str, stats: list[TableStats]) -> str:
    """Draws the histogram to `png` (if given); the report's line naming it."""
    if not png:
        return ""
    plots.shard_histogram(
        png,
        [f"{s.table}: max shard {s.max_shard_load:.2f}x"
         + ("" if math.isnan(s.hot_share) else f", hot 1% {100 * s.hot_share:.0f}%")
         for s in stats],
        [s.shard_lookups for s in stats])
    return f"\nhistogram: {png}"
