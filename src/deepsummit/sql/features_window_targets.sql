-- The (peakid, date) windows the remaining candidates need, once each (all members of an
-- expedition share its date). A peak without weather from the source gets its windows too:
-- all missing, which is how the model reads "weather absent".
SELECT DISTINCT peakid, smtdate AS date
FROM attempt_candidates
WHERE reason IS NULL
ORDER BY peakid, date
