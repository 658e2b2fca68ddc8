-- One row per attempt window (unique peak and expedition date with members) with the peak's
-- position: the seed system's one-request-per-window plan, for bench/weather_requests.py.
SELECT a.peakid, a.smtdate, p.latitude, p.longitude, p.heightm
FROM weather_attempt_dates AS a
JOIN weather_fetchable_peaks AS p USING (peakid)
ORDER BY a.peakid, a.smtdate;
