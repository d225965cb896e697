"""sqlfeed.ml: training, evaluation, the split, the metrics."""
