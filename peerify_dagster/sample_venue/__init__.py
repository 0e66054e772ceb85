"""The bundled `sample` OpenReview venue: five project-authored papers, their review threads,
an answer key of reviewer claims, an answer key of the manuscripts' own citing sentences, and the generated
API v2 snapshot (see README.md here).

The paths below are the contract other code uses to find the sample; `snapshot.py` holds the
generator that `scripts/build_sample_venue.py` runs.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE_VENUE_ID = "PeerifySample.cc/2026/Workshop"

SAMPLE_VENUE_DIR = Path(__file__).resolve().parent
SNAPSHOT_DIR = SAMPLE_VENUE_DIR / "snapshot"
MANUSCRIPTS_DIR = SAMPLE_VENUE_DIR / "manuscripts"
THREADS_PATH = SAMPLE_VENUE_DIR / "threads.yaml"
CLAIM_KEY_PATH = SAMPLE_VENUE_DIR / "claim_key.yaml"
CITATION_KEY_PATH = SAMPLE_VENUE_DIR / "citation_key.yaml"
