"""The DeepSummit transformer (PyTorch only), one small file per block of the model spec:
`config.ModelConfig` (no torch: the settings hold one), `transformer.DeepSummitTransformer`, and
the blocks it is made of."""
