-- Upsert an outlook (registered as `outlook_batch`) on its key: the same forecast scored again
-- by the same model replaces its rows, never duplicates them.
INSERT OR REPLACE INTO outlooks BY NAME
SELECT *, current_localtimestamp() AS computed_at FROM outlook_batch;
