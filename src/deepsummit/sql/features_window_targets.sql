-- The (peakid, date) windows the remaining candidates need, once each (all members of an
-- expedition share its date), on peaks that have weather from source $source.
SELECT DISTINCT peakid, smtdate AS date
FROM attempt_candidates
WHERE reason IS NULL
  AND peakid IN (SELECT peakid FROM weather_daily WHERE source = $source)
ORDER BY peakid, date
