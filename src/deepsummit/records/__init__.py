"""Records stage: Himalayan Database sources → raw tables → validation → clean tables and
quarantine."""
