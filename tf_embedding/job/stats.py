"""`tf-embedding stats`: how ids fall on each table, as a text table and a PNG histogram.

Per table, over the analysed batches:
  ids/sample     lookups per example (all the table's features together)
  unique/batch   distinct rows per batch, and their share of the batch's lookups
  hot 1%         share of lookups that hit the 1% most frequent rows of the vocabulary
  max shard      the busiest shard's lookups over the mean shard's, per batch, averaged,
                 when row r lives on shard r % num_shards
The PNG shows each table's lookups per shard over all batches, relative to the mean.
"""

import dataclasses
import importlib.util
import itertools
import math

import numpy as np

from tf_embedding import png
from tf_embedding.job.data import sources
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import StatsOptions


@dataclasses.dataclass
class TableStats:
    table: str
    vocabulary_size: int
    ids_per_sample: float
    unique_per_batch: float
    unique_share: float
    hot_share: float
    max_shard_load: float
    shard_lookups: np.ndarray


def collect(batches: list[dict], spec: DataSpec, num_shards: int) -> list[TableStats]:
    """Statistics of each table over the batches (dicts of numpy-convertible tensors)."""
    result = []
    for table in spec.tables:
        features = [f.name for f in spec.features if f.table == table.name]
        counts = np.zeros(table.vocabulary_size, np.int64)
        shard_lookups = np.zeros(num_shards, np.int64)
        samples = lookups = 0
        unique, unique_share, max_load = [], [], []
        for batch in batches:
            ids = np.concatenate([batch["ids"][name].flat_values.numpy() for name in features])
            samples += int(batch["label"].shape[0])
            lookups += len(ids)
            if not len(ids):
                continue
            counts += np.bincount(ids, minlength=table.vocabulary_size)
            per_shard = np.bincount(ids % num_shards, minlength=num_shards)
            shard_lookups += per_shard
            distinct = len(np.unique(ids))
            unique.append(distinct)
            unique_share.append(distinct / len(ids))
            max_load.append(per_shard.max() / (len(ids) / num_shards))
        hot = max(1, math.ceil(table.vocabulary_size / 100))
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


def format_table(stats: list[TableStats], num_shards: int) -> str:
    """The statistics as an aligned text table."""
    header = ("table", "vocabulary", "ids/sample", "unique/batch", "unique %", "hot 1%",
              f"max shard/{num_shards}")
    rows = [(s.table, f"{s.vocabulary_size:,}", f"{s.ids_per_sample:.2f}",
             f"{s.unique_per_batch:,.0f}", f"{100 * s.unique_share:.1f}%",
             f"{100 * s.hot_share:.1f}%", f"{s.max_shard_load:.2f}x") for s in stats]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths)))
             for row in [header] + rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _title(s: TableStats) -> str:
    return f"{s.table}: max shard {s.max_shard_load:.2f}x, hot 1% {100 * s.hot_share:.0f}%"


def _relative(s: TableStats) -> np.ndarray:
    mean = s.shard_lookups.mean()
    return s.shard_lookups / mean if mean > 0 else np.zeros_like(s.shard_lookups, float)


def _plot_matplotlib(path: str, stats: list[TableStats], num_shards: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, axes = plt.subplots(len(stats), 1, figsize=(8, 1.8 * len(stats)), squeeze=False)
    for ax, s in zip(axes[:, 0], stats):
        ax.bar(range(num_shards), _relative(s), color="tab:blue")
        ax.axhline(1.0, color="tab:red", linewidth=1)
        ax.set_title(_title(s), fontsize=9)
        ax.set_ylabel("lookups / mean", fontsize=8)
    axes[-1, 0].set_xlabel(f"shard (row id % {num_shards})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_plain(path: str, stats: list[TableStats], num_shards: int) -> None:
    """The same chart with the built-in PNG writer: bars, a red line at the mean."""
    panel, margin, width = 130, 40, 720
    canvas = png.Canvas(width, panel * len(stats) + 30)
    for i, s in enumerate(stats):
        top = i * panel + 10
        canvas.text(margin, top, _title(s))
        relative = _relative(s)
        scale = max(float(relative.max()), 1.0)
        plot_top, plot_height = top + 20, panel - 40
        bar = (width - 2 * margin) // num_shards
        for shard, value in enumerate(relative):
            height = int(plot_height * value / scale)
            canvas.rect(margin + shard * bar + 1, plot_top + plot_height - height,
                        max(bar - 2, 1), height, (31, 119, 180))
        mean_y = plot_top + plot_height - int(plot_height / scale)
        canvas.rect(margin, mean_y, width - 2 * margin, 1, (214, 39, 40))
        canvas.rect(margin, plot_top + plot_height, width - 2 * margin, 1, (0, 0, 0))
        canvas.text(4, mean_y - 4, "1.0", scale=1)
    canvas.text(margin, panel * len(stats) + 10,
                f"lookups per shard / mean, shard = row id % {num_shards}")
    with open(path, "wb") as f:
        f.write(canvas.png())


def write_png(path: str, stats: list[TableStats], num_shards: int) -> None:
    """Draws with matplotlib when it is installed, else with the built-in writer."""
    if importlib.util.find_spec("matplotlib") is None:
        _plot_plain(path, stats, num_shards)
    else:
        _plot_matplotlib(path, stats, num_shards)


def run(options: StatsOptions, spec: DataSpec) -> str:
    """Analyses --batches batches of the chosen split; returns the report text."""
    source = sources.Source(options, spec)
    if options.split == "train":
        dataset = source.train(0)
    else:
        dataset = source.eval(options.batches * options.batch_size)
    batches = list(itertools.islice(iter(dataset), options.batches))
    stats = collect(batches, spec, options.num_shards)
    samples = sum(int(b["label"].shape[0]) for b in batches)
    report = (f"{len(batches)} batches, {samples} examples ({options.data}, {options.split})\n"
              + format_table(stats, options.num_shards))
    if options.png:
        write_png(options.png, stats, options.num_shards)
        report += f"\nhistogram: {options.png}"
    return report
