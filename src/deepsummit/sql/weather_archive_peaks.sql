-- Every peak the records know, and whether weather may be stored for it (see
-- weather_needed_days): the archive's rows of any other peak go to quarantine.
SELECT p.peakid, f.peakid IS NOT NULL AS fetchable
FROM peaks AS p
LEFT JOIN weather_fetchable_peaks AS f USING (peakid)
ORDER BY p.peakid;
