-- The weather's part, once the windows exist. A candidate on a peak with no weather at all from
-- source $source keeps its place with its weather absent (has_weather false: an all-missing
-- window that the model's attention leaves out; never a made-up or nearest-peak series). On a
-- peak that has weather, a window missing more than $max_missing_days days is no attempt; nor
-- is any candidate after the last split year ($test_until).
UPDATE attempt_candidates AS c
SET
    has_weather = c.peakid IN (SELECT peakid FROM weather_daily WHERE source = $source),
    reason = CASE
        WHEN c.peakid IN (SELECT peakid FROM weather_daily WHERE source = $source) AND (
            SELECT any_value(w.missing_days)
            FROM weather_windows AS w
            WHERE w.peakid = c.peakid AND w.date = c.smtdate
        ) > $max_missing_days
            THEN 'window incomplete'
        WHEN c.year > $test_until
            THEN 'after the test years'
    END
WHERE c.reason IS NULL
