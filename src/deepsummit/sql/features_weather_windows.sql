-- Weather windows for every (peakid, date) of `window_targets`, all at once: one row per
-- (window, token), 26 tokens in the spec's order, from the `weather_daily` rows of source
-- $source. `window_days` (registered by deepsummit/features/windows.py from
-- deepsummit.core.inputs.WINDOW_SCALES)
-- maps each token to the days before the window date it averages. A day without a weather row
-- contributes nothing; a variable NULL on every day of a token stays NULL. `missing_days`
-- counts the days of the whole window that have no weather row.
-- The weather_aggregates placeholder is rendered from deepsummit/core/inputs.py: avg() per
-- variable; for the wind direction, the mean of its sine and of its cosine (two channels).
WITH weather AS (
    SELECT * FROM weather_daily WHERE source = $source
),
tokens AS (
    SELECT
        t.peakid,
        t.date,
        d.token,
        any_value(d.scale) AS scale,
        avg(d.days_before) AS days_before,
        dayofyear(t.date - any_value(d.middle_days_before)) AS day_of_year,
        {{weather_aggregates}}
    FROM window_targets AS t
    CROSS JOIN window_days AS d
    LEFT JOIN weather AS w ON w.peakid = t.peakid AND w.date = t.date - d.days_before
    GROUP BY t.peakid, t.date, d.token
),
window_span AS (
    SELECT DISTINCT days_before FROM window_days
),
coverage AS (
    SELECT
        t.peakid,
        t.date,
        (SELECT count(*) FROM window_span) - count(w.date) AS missing_days
    FROM window_targets AS t
    CROSS JOIN window_span AS d
    LEFT JOIN weather AS w ON w.peakid = t.peakid AND w.date = t.date - d.days_before
    GROUP BY t.peakid, t.date
)
SELECT tokens.*, coverage.missing_days
FROM tokens
JOIN coverage USING (peakid, date)
ORDER BY peakid, date, token
