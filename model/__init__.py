"""The DeepSummit transformer (PyTorch only), one small file per block of the model spec."""
