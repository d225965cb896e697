"""Lease queues, workers, faults and elastic jobs."""
