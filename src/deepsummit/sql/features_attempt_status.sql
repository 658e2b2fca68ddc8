-- The weather's part, once the windows exist. A candidate whose 90-day window has no day at all
-- from source $source (a peak the source has no weather of, or days the source does not reach,
-- e.g. before 1940 or after the archive's last day) keeps its place with its weather absent
-- (has_weather false: an all-missing window that the model's attention leaves out; never a
-- made-up or nearest-peak series). A window with some days but more than $max_missing_days
-- missing is no attempt; nor is any candidate after the last split year ($test_until).
UPDATE attempt_candidates AS c
SET
    has_weather = coalesce(w.missing_days < $window_days, FALSE),
    reason = CASE
        WHEN w.missing_days < $window_days AND w.missing_days > $max_missing_days
            THEN 'window incomplete'
        WHEN c.year > $test_until
            THEN 'after the test years'
    END
FROM (
    SELECT peakid, date, any_value(missing_days) AS missing_days
    FROM weather_windows
    GROUP BY peakid, date
) AS w
WHERE c.reason IS NULL AND w.peakid = c.peakid AND w.date = c.smtdate
