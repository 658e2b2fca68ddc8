-- The features table: the tabular features (registered as `tabular_frame`), the label and the
-- record it comes from (a member row, or a member an expedition record counts) from `attempts`,
-- the weather window key (peakid, smtdate, weather_source), whether the window has weather from
-- that source, the member's role in the team (not a model input: the evaluation's member groups
-- read it), and the time split by expedition year, so every member of an expedition falls on
-- the same side.
CREATE OR REPLACE TABLE features AS
SELECT
    f.expid,
    f.member_id,
    f.year,
    f.smtdate,
    f.weather_source,
    a.record,
    a.has_weather,
    a.expedition_role AS role,
    CASE
        WHEN f.year <= $train_until THEN 'train'
        WHEN f.year <= $validation_until THEN 'validation'
        ELSE 'test'
    END AS split,
    a.label,
    f.* EXCLUDE (expid, member_id, year, smtdate, weather_source)
FROM tabular_frame AS f
JOIN attempts AS a ON a.member_id = f.member_id AND a.year = f.year
ORDER BY f.year, f.expid, f.member_id
