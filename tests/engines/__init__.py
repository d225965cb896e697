"""Whole-pipeline correctness on every real engine: corpora, properties, writes in flight."""
