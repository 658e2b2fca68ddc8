-- Replace one source's rows in a raw table with the registered frame `incoming_raw`
-- (all columns VARCHAR as read, plus _source, _row, _load_digest). {raw_table} is one of the
-- raw_* names fixed in deepsummit/records/loaders.py; a rerun of the same source never duplicates.
CREATE TABLE IF NOT EXISTS {raw_table} AS SELECT * FROM incoming_raw LIMIT 0;
DELETE FROM {raw_table} WHERE _source IN (SELECT DISTINCT _source FROM incoming_raw);
INSERT INTO {raw_table} BY NAME SELECT * FROM incoming_raw;
