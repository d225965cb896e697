"""Shardsets, datasets and reshard."""
