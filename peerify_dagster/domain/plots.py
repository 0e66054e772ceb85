"""Report figures as PNG bytes: what a maintainer looks at after a build (no Dagster, no I/O)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # headless: figures are rendered to bytes, never shown
import matplotlib.pyplot as plt  # noqa: E402

# The Peerify paper's chunker, for reference lines on the chunk-size histogram.
PAPER_CHUNK_MEDIAN_WORDS = 133
PAPER_CHUNK_P90_WORDS = 188


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def retrieval_metrics_chart(rows: Sequence[Mapping], title: str) -> bytes:
    """Grouped bars: Recall@1/5/10, nDCG@10 and MRR@10 per retriever."""
    metrics = ["recall@1", "recall@5", "recall@10", "ndcg@10", "mrr@10"]
    retrievers = [r["retriever"] for r in rows]
    figure, axis = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(metrics)
    for offset, metric in enumerate(metrics):
        positions = [i + (offset - (len(metrics) - 1) / 2) * width for i in range(len(rows))]
        values = [r.get(metric) or 0.0 for r in rows]
        bars = axis.bar(positions, values, width, label=metric)
        axis.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    axis.set_xticks(range(len(rows)), retrievers)
    axis.set_ylim(0, 1.08)
    axis.set_ylabel("score")
    n_claims = rows[0].get("n_claims") if rows else 0
    axis.set_title(f"{title} ({n_claims} claims with gold evidence)")
    axis.legend(ncols=len(metrics), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return _png(figure)


def chunk_size_histogram(word_counts: Sequence[int], title: str) -> bytes:
    """Distribution of chunk lengths in words, with the paper's median and p90 for reference."""
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.hist(word_counts, bins=30, color="#4c72b0")
    axis.axvline(PAPER_CHUNK_MEDIAN_WORDS, color="black", linestyle="--", linewidth=1,
                 label=f"paper median {PAPER_CHUNK_MEDIAN_WORDS}")
    axis.axvline(PAPER_CHUNK_P90_WORDS, color="grey", linestyle=":", linewidth=1,
                 label=f"paper p90 {PAPER_CHUNK_P90_WORDS}")
    axis.set_xlabel("words per chunk")
    axis.set_ylabel("chunks")
    axis.set_title(f"{title} ({len(word_counts)} chunks)")
    axis.legend(fontsize=8)
    return _png(figure)


def label_confusion_chart(pairs: Sequence[tuple[str | None, str]], labels: Sequence[str], title: str) -> bytes:
    """Heat map of predicted (columns, 'unparsed' included) against expected labels (rows)."""
    columns = [*labels, "unparsed"]
    counts = [[0] * len(columns) for _ in labels]
    for predicted, expected in pairs:
        if expected in labels:
            counts[labels.index(expected)][columns.index(predicted) if predicted in labels else -1] += 1
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.imshow(counts, cmap="Blues")
    for row, values in enumerate(counts):
        for column, value in enumerate(values):
            axis.text(column, row, str(value), ha="center", va="center", fontsize=9)
    axis.set_xticks(range(len(columns)), columns, rotation=20, fontsize=8)
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.set_xlabel("predicted")
    axis.set_ylabel("expected")
    axis.set_title(title)
    return _png(figure)
