"""What the stages exchange, below all of them: the planned-attempt schema, the model arrays,
the preprocessing and calibration a model carries, distribution profiles, the member groups the
answer is judged on, the model artifact and the champion lookups."""
