-- Rejected weather rows (registered as `weather_rejects`) with the reason they failed. A row
-- already quarantined from the same origin with the same record and reason (a rerun asking
-- again and getting the same bad value) is not appended twice.
INSERT INTO quarantine BY NAME
SELECT
    r.source,
    'weather_daily' AS table_name,
    r.row_number,
    r.record,
    r.reason,
    r.load_digest,
    now()::TIMESTAMP AS quarantined_at
FROM weather_rejects AS r
WHERE NOT EXISTS (
    SELECT 1
    FROM quarantine AS q
    WHERE q.table_name = 'weather_daily'
        AND q.source = r.source
        AND q.record = r.record
        AND q.reason = r.reason
);
