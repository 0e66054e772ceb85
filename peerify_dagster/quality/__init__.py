"""Data-quality gates: great-expectations expectations, and the benchmark slices' gates built on them."""
