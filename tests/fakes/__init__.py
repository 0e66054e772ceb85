"""Loopback fakes of the services the tests and benchmarks talk to (OpenReview v1/v2, OpenAI, Anthropic, provider
batches, scholarly metadata, paper hosts), real servers on loopback (Postgres, Redis, SeaweedFS), and CLI helpers:
test support, never installed."""
