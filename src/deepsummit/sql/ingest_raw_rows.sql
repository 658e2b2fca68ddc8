-- Rows stored in one raw table ({raw_table}), to check against the rows the load read.
SELECT count(*) AS rows FROM {raw_table}
