"""Strategies and planning."""
