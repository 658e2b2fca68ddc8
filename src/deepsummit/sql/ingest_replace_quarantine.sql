-- Replace the quarantined rows of the tables listed in `incoming_scope` (table_name) with the
-- registered frame `incoming_quarantine`. A row quarantined again for the same reason keeps its
-- first quarantined_at, so a rerun of the same input changes nothing.
CREATE OR REPLACE TEMP TABLE quarantine_next AS
SELECT
    n.source,
    n.table_name,
    n.row_number,
    n.record,
    n.reason,
    n.load_digest,
    coalesce(o.quarantined_at, CAST(now() AS TIMESTAMP)) AS quarantined_at
FROM incoming_quarantine AS n
LEFT JOIN quarantine AS o
    USING (source, table_name, row_number, record, reason, load_digest);
DELETE FROM quarantine WHERE table_name IN (SELECT table_name FROM incoming_scope);
INSERT INTO quarantine BY NAME SELECT * FROM quarantine_next;
DROP TABLE quarantine_next;
