-- Per peak: the days attempts need, how many are stored for $source, how many are quarantined
-- (not stored: the source gave a value the store rejected) and how many are still missing
-- (split into days before $first_date, which no ERA5 source has, and the rest).
WITH quarantined AS (
    SELECT DISTINCT
        json_extract_string(record, '$.peakid') AS peakid,
        TRY_CAST(json_extract_string(record, '$.date') AS DATE) AS day
    FROM quarantine
    WHERE table_name = 'weather_daily' AND json_extract_string(record, '$.source') = $source
),
needed AS (
    SELECT
        n.peakid,
        count(*)::INTEGER AS needed_days,
        count(w.date)::INTEGER AS stored_needed_days,
        count(*) FILTER (WHERE w.date IS NULL AND n.day < $first_date)::INTEGER AS before_first_date,
        count(*) FILTER (
            WHERE w.date IS NULL AND n.day >= $first_date AND q.day IS NOT NULL
        )::INTEGER AS quarantined_days,
        count(*) FILTER (
            WHERE w.date IS NULL AND n.day >= $first_date AND q.day IS NULL
        )::INTEGER AS missing_days
    FROM weather_needed_days AS n
    LEFT JOIN weather_daily AS w
        ON w.peakid = n.peakid AND w.date = n.day AND w.source = $source
    LEFT JOIN quarantined AS q
        ON q.peakid = n.peakid AND q.day = n.day
    GROUP BY n.peakid
),
stored AS (
    SELECT peakid, count(*)::INTEGER AS stored_days
    FROM weather_daily
    WHERE source = $source
    GROUP BY peakid
)
SELECT
    coalesce(n.peakid, s.peakid) AS peakid,
    coalesce(s.stored_days, 0) AS stored_days,
    coalesce(n.needed_days, 0) AS needed_days,
    coalesce(n.stored_needed_days, 0) AS stored_needed_days,
    coalesce(n.quarantined_days, 0) AS quarantined_days,
    coalesce(n.missing_days, 0) AS missing_days,
    coalesce(n.before_first_date, 0) AS before_first_date
FROM needed AS n
FULL JOIN stored AS s USING (peakid)
ORDER BY peakid;
