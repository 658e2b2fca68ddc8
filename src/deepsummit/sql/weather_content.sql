-- The weather values of the history sources ($forecasts = false) or of the forecasts (true)
-- without provenance columns: the basis of a content digest, so that a rerun that stores the
-- same values gives the same digest, and a new forecast changes nothing the history feeds.
SELECT * EXCLUDE (fetched_at, request_id)
FROM weather_daily
WHERE starts_with(source, 'forecast@') = $forecasts
ORDER BY source, peakid, date;
