-- Temp tables for this session: the peaks weather may be fetched for (coordinates present and
-- not flagged geocoded-suspect), their attempt dates (expedition dates that have member rows;
-- members join expeditions on (expid, year)), and every day of each date's $window_days-day
-- window.
CREATE OR REPLACE TEMP TABLE weather_fetchable_peaks AS
SELECT peakid, latitude, longitude, heightm
FROM peaks
WHERE latitude IS NOT NULL
    AND longitude IS NOT NULL
    AND coord_source NOT IN ('empty', 'geocoded-suspect');

CREATE OR REPLACE TEMP TABLE weather_attempt_dates AS
SELECT DISTINCT e.peakid, e.smtdate
FROM expeditions AS e
JOIN members AS m ON m.expedition_id = e.expid AND m.year = e.year
JOIN weather_fetchable_peaks AS p ON p.peakid = e.peakid
WHERE e.smtdate IS NOT NULL;

CREATE OR REPLACE TEMP TABLE weather_needed_days AS
SELECT DISTINCT a.peakid, (a.smtdate - r.days_back::INTEGER) AS day
FROM weather_attempt_dates AS a
CROSS JOIN range($window_days) AS r(days_back);
