"""What the stages exchange, below all of them: the planned-attempt schema, the model arrays,
the preprocessing and calibration a model carries, drift profiles, the model artifact and the
champion lookups."""
