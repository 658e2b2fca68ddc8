-- The newest stored forecast of each peak in $peakids (sources `forecast@<issue time>` sort in
-- time order), its daily rows.
WITH newest AS (
    SELECT peakid, max(source) AS source
    FROM weather_daily
    WHERE peakid IN (SELECT unnest($peakids::VARCHAR[])) AND starts_with(source, 'forecast@')
    GROUP BY peakid
)
SELECT w.* EXCLUDE (fetched_at, request_id)
FROM weather_daily AS w
JOIN newest USING (peakid, source)
ORDER BY w.peakid, w.date;
