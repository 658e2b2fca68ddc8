-- What the records say of a planned attempt's peak and nationality (the predict checks): whether
-- they appear at all, the peak's first expedition date, and the weather sources that have any
-- day of the peak (none: its attempts are answered with the weather absent, as trained).
SELECT
    EXISTS (SELECT 1 FROM peaks WHERE peakid = $peakid) AS peak_known,
    (SELECT min(smtdate) FROM expeditions WHERE peakid = $peakid) AS first_record,
    (
        SELECT coalesce(list(DISTINCT source ORDER BY source), [])
        FROM weather_daily WHERE peakid = $peakid
    ) AS weather_sources,
    $nationality IS NULL
        OR EXISTS (SELECT 1 FROM members WHERE citizenship = $nationality) AS nationality_known
