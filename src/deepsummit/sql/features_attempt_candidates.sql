-- Every member row, joined to its expedition on (expedition id, year) (ids repeat after a
-- century), to the expedition's details (agency, staff, base-camp date; may be absent) and to
-- the expedition's peak; `reason` names why the row cannot be an attempt (first reason wins),
-- NULL where it may be one. The weather's part (`has_weather`, the incomplete-window reason)
-- is added later by features_attempt_status.sql, once the windows exist. The columns are the attempt input of
-- sql/features_tabular.sql plus the label; o2_planned is the expedition's oxygen plan, whose
-- training proxy is o2used (see deepsummit/core/inputs.py).
CREATE OR REPLACE TABLE attempt_candidates AS
SELECT
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
    d.trekking_agency AS agency,
    d.hired_staff,
    d.basecamp_date,
    m.sex,
    m.age,
    m.citizenship,
    m.expedition_role,
    m.hired,
    m.oxygen_used,
    m.climber_id,
    m.success AS label,
    NULL::BOOLEAN AS has_weather,  -- set by features_attempt_status.sql
    CASE
        WHEN e.expid IS NULL THEN 'no expedition match'
        WHEN e.smtdate IS NULL THEN 'no date'
        WHEN p.peakid IS NULL THEN 'unknown peak'
        WHEN m.success IS NULL THEN 'no label'
    END AS reason
FROM members AS m
LEFT JOIN expeditions AS e ON e.expid = m.expedition_id AND e.year = m.year
LEFT JOIN expedition_details AS d ON d.expid = m.expedition_id AND d.year = m.year
LEFT JOIN peaks AS p ON p.peakid = e.peakid;
