-- Every record with an outcome, one row per climbing member it counts, joined to the
-- expedition's details (agency, staff, base-camp date; may be absent) and to its peak; `reason`
-- names why the row cannot be an attempt (first reason wins), NULL where it may be one. The
-- weather's part (`has_weather`, the incomplete-window reason) is added later by
-- features_attempt_status.sql, once the windows exist. The columns are the attempt input of
-- sql/features_tabular.sql plus the label and `record`; o2_planned is the expedition's oxygen
-- plan, whose training proxy is o2used (see deepsummit/core/inputs.py).
--
-- `record` says where the row comes from:
-- - 'member': a row of the members file, joined to its expedition on (expedition id, year)
--   (ids repeat after a century);
-- - 'expedition': an expedition the members file has no row of (in the bundle, Autumn 2019 to
--   2025) gives its `totmembers` climbing members, the first `smtmembers` of them summiting.
--   `totmembers` counts members, never hired staff, so these rows are not hired (is_hired 0,
--   a fact of the count); every other member attribute (sex, age, citizenship, role, climber)
--   is missing, as the model sees it, never invented.
CREATE OR REPLACE TABLE attempt_candidates AS
WITH expeditions_without_members AS (
    SELECT e.*
    FROM expeditions AS e
    WHERE NOT EXISTS (
        SELECT 1 FROM members AS m WHERE m.expedition_id = e.expid AND m.year = e.year
    )
),
counted_members AS (
    SELECT e.*, unnest(range(1, coalesce(e.totmembers, 0) + 1)) AS position
    FROM expeditions_without_members AS e
),
candidates AS (
    SELECT
        'member' AS record,
        m.expedition_id AS expid,
        m.member_id,
        m.year,
        e.season,
        e.peakid,
        e.smtdate,
        e.route1,
        e.style,
        e.totmembers,
        e.commercial,
        e.o2used AS o2_planned,
        m.sex,
        m.age,
        m.citizenship,
        m.expedition_role,
        m.hired,
        m.oxygen_used,
        m.climber_id,
        m.highpoint_metres,  -- after the climb: read only as earlier seasons' history
        m.success AS label,
        e.expid IS NULL AS no_expedition
    FROM members AS m
    LEFT JOIN expeditions AS e ON e.expid = m.expedition_id AND e.year = m.year
    UNION ALL
    SELECT
        'expedition' AS record,
        c.expid,
        format('{}-climber{:02d}', c.expid, c.position) AS member_id,
        c.year,
        c.season,
        c.peakid,
        c.smtdate,
        c.route1,
        c.style,
        c.totmembers,
        c.commercial,
        c.o2used AS o2_planned,
        NULL AS sex,
        NULL AS age,
        NULL AS citizenship,
        NULL AS expedition_role,
        FALSE AS hired,
        NULL AS oxygen_used,
        NULL AS climber_id,
        NULL AS highpoint_metres,
        c.position <= c.smtmembers AS label,
        FALSE AS no_expedition
    FROM counted_members AS c
)
SELECT
    c.* EXCLUDE (no_expedition),
    d.trekking_agency AS agency,
    d.hired_staff,
    d.basecamp_date,
    NULL::BOOLEAN AS has_weather,  -- set by features_attempt_status.sql
    CASE
        WHEN c.no_expedition THEN 'no expedition match'
        WHEN c.smtdate IS NULL THEN 'no date'
        WHEN p.peakid IS NULL THEN 'unknown peak'
        WHEN c.label IS NULL THEN 'no label'
    END AS reason
FROM candidates AS c
LEFT JOIN expedition_details AS d ON d.expid = c.expid AND d.year = c.year
LEFT JOIN peaks AS p ON p.peakid = c.peakid;
