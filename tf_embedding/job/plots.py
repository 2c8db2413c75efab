"""The `stats` histogram, drawn with matplotlib (an optional dependency: the `job` extra)."""

from types import ModuleType

import numpy as np

INSTALL_HINT = ("pip install matplotlib (or pip install 'tf-embedding[job]'; tools/install.sh "
                "installs it)")


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the file-only Agg backend; ValueError naming the install command
    when matplotlib is missing (raised before any work, so no analysis is wasted)."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        # ValueError: the command reports it as a bad option (--png) with exit status 2.
        raise ValueError(f"--png: drawing the histogram needs matplotlib, which is not "
                         f"installed: {INSTALL_HINT}; or pass --png '' to skip it") from e
    # Agg: no display is needed, and a GUI backend must not be picked up from the environment.
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
    return plt


def shard_histogram(path: str, titles: list[str], shard_lookups: list[np.ndarray]) -> None:
    """One panel per table: its lookups per shard over the mean shard's, a line at 1.0."""
    plt = pyplot()
    fig, axes = plt.subplots(len(titles), 1, figsize=(8, 1.8 * len(titles)), squeeze=False)
    for ax, title, lookups in zip(axes[:, 0], titles, shard_lookups):
        mean = lookups.mean()
        ax.bar(range(len(lookups)), lookups / mean if mean > 0 else np.zeros(len(lookups)),
               color="tab:blue")
        ax.axhline(1.0, color="tab:red", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("lookups / mean", fontsize=8)
    axes[-1, 0].set_xlabel("shard (a block of rows)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
