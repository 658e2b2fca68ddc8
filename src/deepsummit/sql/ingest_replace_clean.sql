-- Rebuild a clean table ({clean_table}: peaks, expeditions or members) from the registered
-- frame `incoming_clean`. The table holds the configured source only: the TidyTuesday layout and
-- a native HDB export describe the same members and would collide on the key.
DELETE FROM {clean_table};
INSERT INTO {clean_table} BY NAME SELECT * FROM incoming_clean;
