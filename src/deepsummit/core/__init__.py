"""The ground floor: settings (one object with profiles), errors, the run context a stage is
given, the DuckDB warehouse and its named SQL files, and the declaration of every model input."""
