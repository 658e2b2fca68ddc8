-- The weather values without provenance columns: the basis of the table's content digest, so
-- that a rerun that stores the same values gives the same digest.
SELECT * EXCLUDE (fetched_at, request_id)
FROM weather_daily
ORDER BY source, peakid, date;
