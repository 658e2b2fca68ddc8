-- Rejected weather rows (registered as `weather_rejects`) with the reason they failed.
INSERT INTO quarantine BY NAME
SELECT
    source,
    'weather_daily' AS table_name,
    row_number,
    record,
    reason,
    load_digest,
    now()::TIMESTAMP AS quarantined_at
FROM weather_rejects;
