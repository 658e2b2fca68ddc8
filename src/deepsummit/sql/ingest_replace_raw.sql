-- Replace a raw table's rows with the registered frame `incoming_raw` (all columns VARCHAR as
-- read, plus _source, _row, _load_digest). {raw_table} is one of the raw_* names fixed in
-- deepsummit/records/loaders.py. `incoming_raw` holds every source this load configures for the
-- table (a raw table is one layout, and a load reads one source per layout), so every row
-- stored goes: a rerun of the same source never duplicates, and a source moved to another path
-- or URL leaves no rows of the old one beside the new.
CREATE TABLE IF NOT EXISTS {raw_table} AS SELECT * FROM incoming_raw LIMIT 0;
DELETE FROM {raw_table};
INSERT INTO {raw_table} BY NAME SELECT * FROM incoming_raw;
