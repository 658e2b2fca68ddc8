-- The weather reasons, once the windows exist: a candidate whose peak has no weather from
-- source $source, or whose window misses more than $max_missing_days days, is no attempt;
-- nor is one after the last split year ($test_until).
UPDATE attempt_candidates AS c
SET reason = CASE
    WHEN c.peakid NOT IN (SELECT peakid FROM weather_daily WHERE source = $source)
        THEN 'peak without weather'
    WHEN (
        SELECT any_value(w.missing_days)
        FROM weather_windows AS w
        WHERE w.peakid = c.peakid AND w.date = c.smtdate
    ) > $max_missing_days
        THEN 'window incomplete'
    WHEN c.year > $test_until
        THEN 'after the test years'
END
WHERE c.reason IS NULL
