"""Deterministic, recorded paper sampling.

The draw depends only on the seed and the set of forum ids (sorted first), never on the order
the API listed them in, so the same registry entry always chooses the same papers.
"""

from __future__ import annotations

import random
from typing import Iterable


def choose_papers(forum_ids: Iterable[str], seed: int, sample_size: int | None) -> list[str]:
    """The chosen forum ids in draw order; all of them (sorted) when sample_size is None or too large."""
    population = sorted(set(forum_ids))
    if sample_size is None or sample_size >= len(population):
        return population
    if sample_size < 0:
        raise ValueError(f"sample_size must be >= 0, got {sample_size}")
    return random.Random(seed).sample(population, sample_size)
