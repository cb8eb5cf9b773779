"""Benchmarks: ``python -m zoo.bench`` (sweep throughput, Zoology as a peer) and ``python -m zoo.bench.step``."""
