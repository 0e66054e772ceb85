"""Report figures as PNG bytes: what a maintainer looks at after a build (no Dagster, no I/O).

Figures are small (dpi 90) because the report asset's metadata embeds every one of them in the Dagster UI."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # headless: figures are rendered to bytes, never shown
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

# The Peerify paper's chunker, for reference lines on the chunk-size histogram.
PAPER_CHUNK_MEDIAN_WORDS = 133
PAPER_CHUNK_P90_WORDS = 188
DPI = 90
RETRIEVAL_METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr@10")
# One colour per label, the same in every figure; `unparsed` (no usable answer) in grey.
LABEL_COLOURS = ("#4c72b0", "#8fb0d9", "#dd8452", "#c9c9c9")
UNPARSED_COLOUR = "#6b6b6b"
PANELS_PER_ROW = 4


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _wrapped(label: str) -> str:
    """'Partially Supported' -> two lines, so neighbouring tick labels never overlap."""
    return label.replace(" ", "\n")


def retrieval_metrics_chart(rows: Sequence[Mapping], title: str) -> bytes:
    """Grouped bars: Recall@1/5/10, nDCG@10 and MRR@10 per retriever, one panel per relevance mode."""
    modes = list(dict.fromkeys(r.get("relevance") for r in rows)) or [None]
    figure, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 3.6), squeeze=False, sharey=True,
                                layout="constrained")
    width = 0.8 / len(RETRIEVAL_METRICS)
    for axis, mode in zip(axes[0], modes):
        measured = [r for r in rows if r.get("relevance") == mode]
        for offset, metric in enumerate(RETRIEVAL_METRICS):
            positions = [i + (offset - (len(RETRIEVAL_METRICS) - 1) / 2) * width for i in range(len(measured))]
            bars = axis.bar(positions, [r.get(metric) or 0.0 for r in measured], width, label=metric)
            axis.bar_label(bars, fmt="%.2f", fontsize=6, padding=1, rotation=90)
        axis.set_xticks(range(len(measured)), [r["retriever"] for r in measured], fontsize=8)
        axis.set_ylim(0, 1.12)
        n_claims = measured[0].get("n_claims") if measured else 0
        axis.set_title(f"{mode + ' relevance, ' if mode else ''}{n_claims} claims with gold evidence", fontsize=9)
    axes[0][0].set_ylabel("score")
    handles, names = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, names, ncols=len(RETRIEVAL_METRICS), fontsize=7, loc="outside lower center")
    figure.suptitle(title, fontsize=10)
    return _png(figure)


def chunk_size_histogram(word_counts: Sequence[int], title: str) -> bytes:
    """Distribution of chunk lengths in words, with the paper's median and p90 for reference."""
    figure, axis = plt.subplots(figsize=(6.5, 3.2))
    axis.hist(word_counts, bins=30, color="#4c72b0")
    axis.axvline(PAPER_CHUNK_MEDIAN_WORDS, color="black", linestyle="--", linewidth=1,
                 label=f"paper median {PAPER_CHUNK_MEDIAN_WORDS}")
    axis.axvline(PAPER_CHUNK_P90_WORDS, color="grey", linestyle=":", linewidth=1,
                 label=f"paper p90 {PAPER_CHUNK_P90_WORDS}")
    axis.set_xlabel("words per chunk")
    axis.set_ylabel("chunks")
    axis.set_title(f"{title} ({len(word_counts)} chunks)", fontsize=10)
    axis.legend(fontsize=8)
    return _png(figure)


def slice_label_chart(counts: Mapping[str, Mapping[str, int]], labels: Sequence[str], title: str) -> bytes:
    """Horizontal stacked bars: the gold labels of each slice (slice -> label -> claims), empty slices kept."""
    slices = list(counts)
    figure, axis = plt.subplots(figsize=(7.5, 0.4 * len(slices) + 1.0))
    lefts = [0] * len(slices)
    for label, colour in zip(labels, LABEL_COLOURS):
        widths = [counts[s].get(label, 0) for s in slices]
        bars = axis.barh(slices, widths, left=lefts, color=colour, label=label)
        axis.bar_label(bars, labels=[str(w) if w else "" for w in widths], label_type="center", fontsize=7)
        lefts = [left + w for left, w in zip(lefts, widths)]
    for row, name in enumerate(slices):
        segments = sum(1 for label in labels if counts[name].get(label))
        if segments != 1:  # a one-label bar already shows its total inside
            axis.text(lefts[row], row, f" total {lefts[row]}" if segments else " empty", va="center", fontsize=7)
    axis.invert_yaxis()  # the slices top to bottom in their usual order
    axis.set_xlim(0, max(lefts, default=0) * 1.15 + 1)
    axis.set_xlabel("claims")
    axis.tick_params(axis="y", labelsize=8)
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axis.set_title(title, fontsize=10)
    return _png(figure)


def _slanted_ticks(axis, names: Sequence[str]) -> None:
    """Column names under narrow panels, slanted so that long neighbours ('Not Supported', 'Not Determined') never
    run into each other."""
    axis.set_xticks(range(len(names)), names, fontsize=6, rotation=35, ha="right", rotation_mode="anchor")


def _panel_grid(rows: Sequence[Sequence], width: float, height: float) -> tuple:
    """A figure with one row of panels per entry of `rows` (one verifier each); a single long row is wrapped.
    Returns the figure and (axis, panel, first in its row) for each panel."""
    if len(rows) == 1:
        rows = [rows[0][start:start + PANELS_PER_ROW] for start in range(0, len(rows[0]), PANELS_PER_ROW)]
    columns = max(len(row) for row in rows)
    figure, axes = plt.subplots(len(rows), columns, figsize=(width * columns, height * len(rows)), squeeze=False,
                                layout="constrained")
    placed = []
    for row_axes, row in zip(axes, rows):
        for column, axis in enumerate(row_axes):
            if column < len(row):
                placed.append((axis, row[column], column == 0))
            else:
                axis.set_visible(False)
    return figure, placed


def confusion_panels(rows: Sequence[Sequence[tuple[str, Mapping[str, Mapping[str, int]]]]], labels: Sequence[str],
                     predicted_columns: Sequence[str], title: str) -> bytes:
    """One heat map per panel (title, gold label -> predicted column -> count), a row of panels per verifier: gold
    labels as rows, predicted labels (and `unparsed`) as columns, each cell's count written in it."""
    figure, placed = _panel_grid(rows, 3.4, 3.0)
    for axis, (panel_title, matrix), first in placed:
        counts = [[matrix.get(gold, {}).get(column, 0) for column in predicted_columns] for gold in labels]
        peak = max(max(row) for row in counts) or 1
        axis.imshow(counts, cmap="Blues", vmin=0, vmax=peak, aspect="auto")
        for row, values in enumerate(counts):
            for column, value in enumerate(values):
                axis.text(column, row, str(value), ha="center", va="center", fontsize=8,
                          color="white" if value > peak * 0.6 else "black")
        _slanted_ticks(axis, predicted_columns)
        axis.set_yticks(range(len(labels)), [_wrapped(label) for label in labels] if first else [], fontsize=6)
        axis.set_title(panel_title, fontsize=8)
    figure.suptitle(title, fontsize=10)
    return _png(figure)


def label_distribution_panels(rows: Sequence[Sequence[tuple[str, Mapping[str, int], Mapping[str, int]]]],
                              columns: Sequence[str], title: str) -> bytes:
    """Per panel (title, gold label -> claims, predicted label -> claims), a row of panels per verifier: gold and
    predicted bars side by side for each label (and `unparsed`, which only predictions have)."""
    figure, placed = _panel_grid(rows, 3.4, 2.9)
    positions = range(len(columns))
    for axis, (panel_title, gold, predicted), first in placed:
        gold_bars = axis.bar([p - 0.2 for p in positions], [gold.get(c, 0) for c in columns], 0.4,
                             color="#4c72b0", label="gold")
        predicted_bars = axis.bar([p + 0.2 for p in positions], [predicted.get(c, 0) for c in columns], 0.4,
                                  color="#dd8452", label="predicted")
        for bars in (gold_bars, predicted_bars):
            axis.bar_label(bars, labels=[str(int(b.get_height())) if b.get_height() else "" for b in bars],
                           fontsize=6, padding=1)
        _slanted_ticks(axis, columns)
        axis.set_ylim(0, max([*gold.values(), *predicted.values(), 1]) * 1.2)
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))  # claim counts
        axis.tick_params(axis="y", labelsize=6)
        if first:
            axis.set_ylabel("claims", fontsize=7)
        axis.set_title(panel_title, fontsize=8)
    placed[0][0].legend(fontsize=6, loc="upper right")
    figure.suptitle(title, fontsize=10)
    return _png(figure)
