"""tf.data, PyTorch, Ray, Dask, kill-and-resume training and the demo."""
