-- Every member row, joined to its expedition on (expedition id, year) (ids repeat after a
-- century) and to the expedition's peak; `reason` names why the row cannot be an attempt
-- (first reason wins), NULL where it may be one. The weather reasons are added later by
-- features_attempt_status.sql, once the windows exist.
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
    e.o2used,
    m.sex,
    m.age,
    m.citizenship,
    m.expedition_role,
    m.hired,
    m.oxygen_used,
    m.climber_id,
    m.success AS label,
    CASE
        WHEN e.expid IS NULL THEN 'no expedition match'
        WHEN e.smtdate IS NULL THEN 'no date'
        WHEN p.peakid IS NULL THEN 'unknown peak'
        WHEN m.success IS NULL THEN 'no label'
    END AS reason
FROM members AS m
LEFT JOIN expeditions AS e ON e.expid = m.expedition_id AND e.year = m.year
LEFT JOIN peaks AS p ON p.peakid = e.peakid;
