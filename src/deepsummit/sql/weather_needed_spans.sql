-- Needed days not yet stored for $source (from $first_date on, where the source has data),
-- merged into contiguous spans per peak: overlapping windows fall into one island, a gap of
-- one or more unneeded (or already stored) days starts a new one (gaps and islands).
WITH missing AS (
    SELECT n.peakid, n.day
    FROM weather_needed_days AS n
    ANTI JOIN weather_daily AS w
        ON w.peakid = n.peakid AND w.date = n.day AND w.source = $source
    WHERE n.day >= $first_date
),
islands AS (
    SELECT
        peakid,
        day,
        day - (row_number() OVER (PARTITION BY peakid ORDER BY day))::INTEGER AS island
    FROM missing
)
SELECT
    i.peakid,
    min(i.day) AS start_date,
    max(i.day) AS end_date,
    count(*)::INTEGER AS days,
    any_value(p.latitude) AS latitude,
    any_value(p.longitude) AS longitude,
    any_value(p.heightm) AS heightm
FROM islands AS i
JOIN weather_fetchable_peaks AS p USING (peakid)
GROUP BY i.peakid, i.island
ORDER BY start_date, i.peakid;
