-- What the records knew, per season: the history tables every tabular feature is computed from
-- (sql/features_tabular.sql). The same tables are frozen into a registered model, so that
-- serving computes a planned attempt's features exactly as training did, as of the records the
-- model was trained with.
--
-- A season's rank orders seasons in time: year * 4 + position, with Spring < Summer < Autumn
-- < Winter. Winter of year Y runs from December of Y into Y+1, so it comes after Autumn of Y.
-- History = every record with an outcome that names its expedition: the candidates of
-- sql/features_attempt_candidates.sql (member rows matched to their expedition on (id, year),
-- and the climbing members an expedition without member rows counts), dated or not.
-- Success rates count climbing members only: an expedition record counts no hired staff
-- (`totmembers`), so rates over the members file's hired staff too would fall where the members
-- file ends. A climber's experience counts every expedition of the person, hired or not.
CREATE OR REPLACE TEMP TABLE history_members AS
SELECT
    c.climber_id,
    c.expid || '/' || c.year AS expedition,
    c.peakid,
    c.route1,
    c.agency,
    c.label AS success,
    c.highpoint_metres,
    coalesce(c.hired, FALSE) AS hired,
    c.year * 4 + CASE c.season
        WHEN 'Spring' THEN 0 WHEN 'Summer' THEN 1 WHEN 'Autumn' THEN 2 WHEN 'Winter' THEN 3
    END AS season_rank
FROM attempt_candidates AS c
WHERE c.reason IS DISTINCT FROM 'no expedition match' AND c.label IS NOT NULL;

CREATE OR REPLACE TEMP TABLE history_climbing_members AS
SELECT * FROM history_members WHERE NOT hired;

-- Climbing members and their summits per season, overall and per peak, route and agency.
CREATE OR REPLACE TABLE history_seasons AS
SELECT season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_climbing_members
GROUP BY season_rank;

CREATE OR REPLACE TABLE history_peaks AS
SELECT peakid, season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_climbing_members
GROUP BY peakid, season_rank;

CREATE OR REPLACE TABLE history_routes AS
SELECT
    peakid, route1, season_rank,
    count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_climbing_members
WHERE route1 IS NOT NULL
GROUP BY peakid, route1, season_rank;

CREATE OR REPLACE TABLE history_agencies AS
SELECT agency, season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
FROM history_climbing_members
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
