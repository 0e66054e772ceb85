"""The citation half (RefVerifier): a manuscript's own citing sentences checked against the papers they cite.

detection (citing sentences and their markers), bibliography (reference entries parsed into fields), metadata
(entries against Crossref / OpenAlex / Semantic Scholar records), resolution (an entry to a full text and the
right-paper check), evidence (sentence windows of the cited paper), verdicts (the four citation labels) and
metrics (each stage's figures beside RefVerifier's). No Dagster import here.
"""
