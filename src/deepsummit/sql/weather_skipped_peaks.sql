-- Peaks that attempts need but that are never fetched, and why: no coordinates, coordinates
-- known to be wrong (geocoded-suspect), or a peak id missing from the clean peaks table.
WITH attempt_peaks AS (
    SELECT e.peakid, count(DISTINCT e.smtdate) AS attempt_dates
    FROM expeditions AS e
    JOIN members AS m ON m.expedition_id = e.expid AND m.year = e.year
    WHERE e.smtdate IS NOT NULL
    GROUP BY e.peakid
)
SELECT
    a.peakid,
    CASE
        WHEN p.peakid IS NULL THEN 'not in the peaks table'
        WHEN p.coord_source = 'geocoded-suspect' THEN 'coordinates flagged geocoded-suspect'
        ELSE 'no coordinates'
    END AS reason,
    a.attempt_dates
FROM attempt_peaks AS a
LEFT JOIN peaks AS p USING (peakid)
WHERE p.peakid IS NULL
    OR p.coord_source IS NULL
    OR p.coord_source IN ('empty', 'geocoded-suspect')
    OR p.latitude IS NULL
    OR p.longitude IS NULL
ORDER BY a.peakid;
