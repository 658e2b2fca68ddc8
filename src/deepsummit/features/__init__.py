"""Features stage: attempts, multi-scale weather windows, leak-free tabular features, the time
split, train-only preprocessing, and the content-addressed snapshot training reads."""
