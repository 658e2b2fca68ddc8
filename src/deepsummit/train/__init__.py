"""Train stage: the trainer, evaluation against the baselines, the model artifact, MLflow
logging and registration behind the champion gate, and the hyperparameter search."""
