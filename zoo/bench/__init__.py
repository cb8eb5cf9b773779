"""Benchmarks: ``python -m zoo.bench`` (sweep throughput, Zoology as a peer) and ``python -m zoo.bench.step``."""
import argparse


def positive_counts(text: str) -> list[int]:
    """A comma list of positive integers, e.g. GPU counts (an argparse type: bad input exits 2 naming the flag)."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of positive integers, e.g. 1,2,4")
    return counts
