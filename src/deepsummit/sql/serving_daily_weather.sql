-- The daily weather rows of one peak and source between $first and $last (a planned attempt's
-- 90-day window), one row per day present.
SELECT date, * EXCLUDE (peakid, date, source, fetched_at, request_id)
FROM weather_daily
WHERE peakid = $peakid AND source = $source AND date BETWEEN $first AND $last
ORDER BY date
