"""Drift stage: the newest season of a features snapshot against the champion's training split."""
