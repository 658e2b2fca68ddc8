-- What the records knew, per season: the history tables every tabular feature is computed from
-- (sql/features_tabular.sql). The same tables are frozen into a registered model, so that
-- serving computes a planned attempt's features exactly as training did, as of the records the
-- model was trained with.
--
-- A season's rank orders seasons in time: year * 4 + position, with Spring < Summer < Autumn
-- < Winter. Winter of year Y runs from December of Y into Y+1, so it comes after Autumn of Y.
-- History = every member row matched to its expedition (expedition ids repeat after a century:
-- the join is on (id, year)).
CREATE OR REPLACE TEMP TABLE history_members AS
SELECT
    m.climber_id,
    m.expedition_id || '/' || m.year AS expedition,
    e.peakid,
    e.route1,
    d.trekking_agency AS agency,
    m.success,
    m.highpoint_metres,
    m.year * 4 + CASE e.season
        WHEN 'Spring' THEN 0 WHEN 'Summer' THEN 1 WHEN 'Autumn' THEN 2 WHEN 'Winter' THEN 3
    END AS season_rank
FROM members AS m
JOIN expeditions AS e ON e.expid = m.expedition_id AND e.year = m.year
LEFT JOIN expedition_details AS d ON d.expid = m.expedition_id AND d.year = m.year;

-- Members and summits per season, overall and per peak, route, agency and climber.
CREATE OR REPLACE TABLE history_seasons AS
SELECT season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_members
GROUP BY season_rank;

CREATE OR REPLACE TABLE history_peaks AS
SELECT peakid, season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_members
GROUP BY peakid, season_rank;

CREATE OR REPLACE TABLE history_routes AS
SELECT
    peakid, route1, season_rank,
    count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_members
WHERE route1 IS NOT NULL
GROUP BY peakid, route1, season_rank;

CREATE OR REPLACE TABLE history_agencies AS
SELECT agency, season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_members
WHERE agency IS NOT NULL
GROUP BY agency, season_rank;

-- A climber is in one expedition per season at most in practice; counting distinct ones per
-- season keeps the sum over seasons a count of distinct expeditions all the same.
CREATE OR REPLACE TABLE history_climbers AS
SELECT
    climber_id, season_rank,
    count(DISTINCT expedition) AS expeditions,
    count(*) FILTER (WHERE success) AS summits,
    max(highpoint_metres) AS highest_m
FROM history_members
WHERE climber_id IS NOT NULL
GROUP BY climber_id, season_rank;

-- The peaks' fixed facts the features read.
CREATE OR REPLACE TABLE history_peak_facts AS
SELECT peakid, heightm, himal FROM peaks;
