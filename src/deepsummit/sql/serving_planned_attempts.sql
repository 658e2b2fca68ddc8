-- Attempts of the warehouse (the rows of `planned_keys`: expid, member_id, year) in the
-- registered model's input layout (deepsummit/core/planned.py): what the expedition and the
-- member stated before the push, and the 90 daily weather rows D-89 … D of source $source as
-- one list per variable (null on a day without weather). Training and serving see the same
-- attempts through it: the snapshot keeps the test split in this layout.
WITH planned AS (
    SELECT a.*
    FROM attempts AS a
    JOIN planned_keys AS k USING (expid, member_id, year)
),
days AS (
    SELECT DISTINCT p.peakid, p.smtdate, d.days_back, p.smtdate - d.days_back::INTEGER AS day
    FROM planned AS p
    CROSS JOIN range(90) AS d(days_back)
),
weather AS (
    SELECT
        d.peakid,
        d.smtdate,
        {{weather_lists}}
    FROM days AS d
    LEFT JOIN weather_daily AS w
        ON w.peakid = d.peakid AND w.date = d.day AND w.source = $source
    GROUP BY d.peakid, d.smtdate
)
SELECT
    p.expid,
    p.member_id,
    p.year,
    p.peakid AS peak,
    strftime(p.smtdate, '%Y-%m-%d') AS push_date,
    p.season,
    p.age::DOUBLE AS age,
    p.sex,
    p.citizenship AS nationality,
    p.expedition_role AS role,
    p.hired,
    nullif(p.totmembers, 0)::DOUBLE AS team_size,  -- 0 members: not recorded
    p.hired_staff::DOUBLE AS staff_size,
    p.agency,
    p.route1 AS route,
    p.style,
    p.commercial,
    p.o2_planned AS oxygen,
    strftime(p.basecamp_date, '%Y-%m-%d') AS basecamp_date,
    p.climber_id,
    $source AS weather_source,
    w.* EXCLUDE (peakid, smtdate)
FROM planned AS p
JOIN weather AS w ON w.peakid = p.peakid AND w.smtdate = p.smtdate
ORDER BY p.year, p.expid, p.member_id
