-- The 20 tabular features of each attempt in `attempt_input` (registered by
-- pipeline/attempts.py: the `attempts` table when building, one planned attempt when
-- predicting), from what was known before the attempt's season only.
--
-- History = every member row matched to its expedition. A season's rank orders seasons in
-- time: year, then Winter < Spring < Summer < Autumn. Only seasons ranked strictly before the
-- attempt's count: its own season (teammates, concurrent expeditions) and later never do.
-- Success rates are member-level (share of members who summited, the label's own unit),
-- smoothed toward the global member rate of those same earlier seasons with
-- $prior_strength pseudo-members: (summits + k * prior) / (members + k). With no earlier
-- season at all the rate is NULL (missing). A route is (peakid, route1).
-- Climber experience needs a person id (members.climber_id, native HDB export only): NULL
-- (missing) without one; highest_prev_altitude_m is NULL when the climber has no earlier
-- high point.
-- is_sherpa: the TidyTuesday layout has no ethnicity; a hired member with Nepali
-- citizenship (citizenship naming Nepal) is what the records mean by Sherpa staff.
WITH season_positions AS (
    SELECT * FROM (VALUES ('Winter', 0), ('Spring', 1), ('Summer', 2), ('Autumn', 3))
        AS s (season, position)
),
history AS (
    SELECT
        m.climber_id,
        m.expedition_id,
        m.year,
        e.peakid,
        e.route1,
        m.success,
        m.highpoint_metres,
        m.year * 4 + s.position AS season_rank
    FROM members AS m
    JOIN expeditions AS e ON e.expid = m.expedition_id AND e.year = m.year
    JOIN season_positions AS s ON s.season = e.season
),
input AS (
    SELECT a.*, a.year * 4 + s.position AS season_rank
    FROM attempt_input AS a
    LEFT JOIN season_positions AS s ON s.season = a.season
),
season_totals AS (
    SELECT season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
    FROM history
    GROUP BY season_rank
),
peak_totals AS (
    SELECT peakid, season_rank, count(*) AS members, count(*) FILTER (WHERE success) AS summits
    FROM history
    GROUP BY peakid, season_rank
),
route_totals AS (
    SELECT
        peakid, route1, season_rank,
        count(*) AS members, count(*) FILTER (WHERE success) AS summits
    FROM history
    WHERE route1 IS NOT NULL
    GROUP BY peakid, route1, season_rank
),
prior_rates AS (
    SELECT k.season_rank, sum(t.summits) / sum(t.members) AS rate
    FROM (SELECT DISTINCT season_rank FROM input) AS k
    LEFT JOIN season_totals AS t ON t.season_rank < k.season_rank
    GROUP BY k.season_rank
),
peak_counts AS (
    SELECT
        k.peakid, k.season_rank,
        coalesce(sum(t.members), 0) AS members, coalesce(sum(t.summits), 0) AS summits
    FROM (SELECT DISTINCT peakid, season_rank FROM input) AS k
    LEFT JOIN peak_totals AS t ON t.peakid = k.peakid AND t.season_rank < k.season_rank
    GROUP BY k.peakid, k.season_rank
),
route_counts AS (
    SELECT
        k.peakid, k.route1, k.season_rank,
        coalesce(sum(t.members), 0) AS members, coalesce(sum(t.summits), 0) AS summits
    FROM (SELECT DISTINCT peakid, route1, season_rank FROM input WHERE route1 IS NOT NULL) AS k
    LEFT JOIN route_totals AS t
        ON t.peakid = k.peakid AND t.route1 = k.route1 AND t.season_rank < k.season_rank
    GROUP BY k.peakid, k.route1, k.season_rank
),
experience AS (
    SELECT
        k.climber_id, k.season_rank,
        count(DISTINCT h.expedition_id || '/' || h.year) AS prior_expeditions,
        count(*) FILTER (WHERE h.success) AS prior_summits,
        max(h.highpoint_metres) AS highest_prev_altitude_m
    FROM (SELECT DISTINCT climber_id, season_rank FROM input WHERE climber_id IS NOT NULL) AS k
    LEFT JOIN history AS h ON h.climber_id = k.climber_id AND h.season_rank < k.season_rank
    GROUP BY k.climber_id, k.season_rank
)
SELECT
    i.expid,
    i.member_id,
    i.year,
    i.smtdate,
    -- numeric
    i.age::DOUBLE AS age,
    x.prior_expeditions::DOUBLE AS prior_expeditions,
    x.prior_summits::DOUBLE AS prior_summits,
    x.highest_prev_altitude_m::DOUBLE AS highest_prev_altitude_m,
    i.totmembers::DOUBLE AS totmembers,
    p.heightm::DOUBLE AS heightm,
    (r.summits + $prior_strength * g.rate) / nullif(r.members + $prior_strength, 0)
        AS route_success_rate,
    (pk.summits + $prior_strength * g.rate) / nullif(pk.members + $prior_strength, 0)
        AS peak_success_rate,
    -- categorical
    i.citizenship AS nationality,
    i.route1,
    p.himal,
    i.season,
    i.style,
    i.peakid,
    -- binary (0/1, NULL = missing)
    CASE i.sex WHEN 'M' THEN 1 WHEN 'F' THEN 0 END AS sex,
    i.oxygen_used::INTEGER AS oxygen_planned,
    i.hired::INTEGER AS is_hired,
    (i.hired AND i.citizenship ILIKE '%nepal%')::INTEGER AS is_sherpa,
    i.commercial::INTEGER AS is_commercial,
    i.o2used::INTEGER AS o2_available
FROM input AS i
LEFT JOIN peaks AS p ON p.peakid = i.peakid
LEFT JOIN prior_rates AS g ON g.season_rank = i.season_rank
LEFT JOIN peak_counts AS pk ON pk.peakid = i.peakid AND pk.season_rank = i.season_rank
LEFT JOIN route_counts AS r
    ON r.peakid = i.peakid AND r.route1 = i.route1 AND r.season_rank = i.season_rank
LEFT JOIN experience AS x ON x.climber_id = i.climber_id AND x.season_rank = i.season_rank
ORDER BY i.year, i.expid, i.member_id
