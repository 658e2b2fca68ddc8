-- The tabular features of each attempt in `attempt_input` (registered by
-- deepsummit/features/tabular.py: the `attempts` table when building, planned attempts when
-- serving), from the history tables of sql/features_history.sql: what was known before the
-- attempt's season only.
--
-- Only seasons ranked strictly before the attempt's count (its own season: teammates and
-- concurrent expeditions, and later ones never do). Success rates are member-level (share of
-- members who summited, the label's own unit), each shrunk toward a broader rate of those same
-- earlier seasons with $prior_strength pseudo-members, (summits + k * prior) / (members + k),
-- in a hierarchy: the route toward its peak's rate, the peak toward its height band's rate,
-- the band and the agency toward every member's rate. A peak with a dozen members in history
-- thus reads mostly as its height band, not as its own noise. With no earlier season at all a
-- rate is NULL (missing). A route is (peakid, route1). The height band (500 m wide; below
-- 6,000 m and from 8,000 m one band each) is also the token a rare peak folds into
-- (deepsummit/contracts/preprocessing.py).
-- Climber experience needs a person id (climber_id, native HDB export only): NULL (missing)
-- without one; highest_prev_altitude_m is NULL when the climber has no earlier high point.
-- is_sherpa: the TidyTuesday layout has no ethnicity; a hired member with Nepali citizenship
-- is what the records mean by Sherpa staff.
-- Oxygen: the expedition's plan (o2_planned) feeds both oxygen tokens; oxygen_used, recorded
-- after the climb, is carried for the retrospective profile only.
-- The calendar: the push day's day of the year, and its days since the season opened (the
-- first of the month `season_openings` names, registered from deepsummit/core/planned.py; a
-- push before the opening counts negative), so a peak without weather still tells its days
-- apart.
WITH peak_facts AS (
    SELECT
        peakid,
        heightm,
        himal,
        CASE
            WHEN heightm >= 8000 THEN '8000 m and above'
            WHEN heightm < 6000 THEN 'below 6000 m'
            WHEN heightm IS NOT NULL THEN format(
                '{}–{} m', floor(heightm / 500)::INTEGER * 500, floor(heightm / 500)::INTEGER * 500 + 499
            )
        END AS height_band
    FROM history_peak_facts
),
input AS (
    SELECT
        a.*,
        p.height_band,
        make_date(a.year, o.month, 1) AS season_opened,
        a.year * 4 + CASE a.season
            WHEN 'Spring' THEN 0 WHEN 'Summer' THEN 1 WHEN 'Autumn' THEN 2 WHEN 'Winter' THEN 3
        END AS season_rank
    FROM attempt_input AS a
    LEFT JOIN peak_facts AS p ON p.peakid = a.peakid
    LEFT JOIN season_openings AS o ON o.season = a.season
),
prior_rates AS (
    SELECT k.season_rank, sum(t.summits) / sum(t.members) AS rate
    FROM (SELECT DISTINCT season_rank FROM input) AS k
    LEFT JOIN history_seasons AS t ON t.season_rank < k.season_rank
    GROUP BY k.season_rank
),
band_rates AS (
    SELECT
        k.height_band, k.season_rank,
        (coalesce(sum(t.summits), 0) + $prior_strength * any_value(g.rate))
            / nullif(coalesce(sum(t.members), 0) + $prior_strength, 0) AS rate
    FROM (SELECT DISTINCT height_band, season_rank FROM input) AS k
    JOIN prior_rates AS g ON g.season_rank = k.season_rank
    LEFT JOIN (
        SELECT h.*, f.height_band
        FROM history_peaks AS h
        JOIN peak_facts AS f USING (peakid)
    ) AS t ON t.height_band = k.height_band AND t.season_rank < k.season_rank
    GROUP BY k.height_band, k.season_rank
),
peak_counts AS (
    SELECT
        k.peakid, k.season_rank,
        coalesce(sum(t.members), 0) AS members, coalesce(sum(t.summits), 0) AS summits
    FROM (SELECT DISTINCT peakid, season_rank FROM input) AS k
    LEFT JOIN history_peaks AS t ON t.peakid = k.peakid AND t.season_rank < k.season_rank
    GROUP BY k.peakid, k.season_rank
),
peak_rates AS (
    SELECT
        pk.peakid, pk.season_rank,
        (pk.summits + $prior_strength * coalesce(b.rate, g.rate))
            / nullif(pk.members + $prior_strength, 0) AS rate
    FROM peak_counts AS pk
    JOIN (SELECT DISTINCT peakid, height_band, season_rank FROM input) AS k
        ON k.peakid = pk.peakid AND k.season_rank = pk.season_rank
    JOIN prior_rates AS g ON g.season_rank = pk.season_rank
    LEFT JOIN band_rates AS b
        ON b.height_band IS NOT DISTINCT FROM k.height_band AND b.season_rank = pk.season_rank
),
route_counts AS (
    SELECT
        k.peakid, k.route1, k.season_rank,
        coalesce(sum(t.members), 0) AS members, coalesce(sum(t.summits), 0) AS summits
    FROM (SELECT DISTINCT peakid, route1, season_rank FROM input WHERE route1 IS NOT NULL) AS k
    LEFT JOIN history_routes AS t
        ON t.peakid = k.peakid AND t.route1 = k.route1 AND t.season_rank < k.season_rank
    GROUP BY k.peakid, k.route1, k.season_rank
),
agency_counts AS (
    SELECT
        k.agency, k.season_rank,
        coalesce(sum(t.members), 0) AS members, coalesce(sum(t.summits), 0) AS summits
    FROM (SELECT DISTINCT agency, season_rank FROM input WHERE agency IS NOT NULL) AS k
    LEFT JOIN history_agencies AS t ON t.agency = k.agency AND t.season_rank < k.season_rank
    GROUP BY k.agency, k.season_rank
),
experience AS (
    SELECT
        k.climber_id, k.season_rank,
        coalesce(sum(h.expeditions), 0) AS prior_expeditions,
        coalesce(sum(h.summits), 0) AS prior_summits,
        max(h.highest_m) AS highest_prev_altitude_m
    FROM (SELECT DISTINCT climber_id, season_rank FROM input WHERE climber_id IS NOT NULL) AS k
    LEFT JOIN history_climbers AS h
        ON h.climber_id = k.climber_id AND h.season_rank < k.season_rank
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
    nullif(i.totmembers, 0)::DOUBLE AS totmembers,  -- 0 members: not recorded
    p.heightm::DOUBLE AS heightm,
    (r.summits + $prior_strength * pr.rate) / nullif(r.members + $prior_strength, 0)
        AS route_success_rate,
    pr.rate AS peak_success_rate,
    i.hired_staff::DOUBLE / nullif(i.totmembers, 0) AS staff_per_member,
    -- Base camp reached 0 to 120 days before the push; anything else is a recording error.
    CASE WHEN (i.smtdate - i.basecamp_date) BETWEEN 0 AND 120
        THEN (i.smtdate - i.basecamp_date)::DOUBLE
    END AS days_at_base_camp,
    (ag.summits + $prior_strength * g.rate) / nullif(ag.members + $prior_strength, 0)
        AS agency_success_rate,
    dayofyear(i.smtdate)::DOUBLE AS day_of_year,
    (i.smtdate - i.season_opened)::DOUBLE AS days_in_season,
    -- categorical
    i.citizenship AS nationality,
    i.route1,
    p.himal,
    i.season,
    i.style,
    i.peakid,
    i.agency,
    i.expedition_role AS team_role,
    i.height_band,  -- not an input: the token a rare peak folds into
    -- binary (0/1, NULL = missing)
    CASE i.sex WHEN 'M' THEN 1 WHEN 'F' THEN 0 END AS sex,
    i.o2_planned::INTEGER AS oxygen_planned,
    i.hired::INTEGER AS is_hired,
    (i.hired AND i.citizenship ILIKE '%nepal%')::INTEGER AS is_sherpa,
    i.commercial::INTEGER AS is_commercial,
    i.o2_planned::INTEGER AS o2_available,
    i.oxygen_used::INTEGER AS oxygen_used
FROM input AS i
LEFT JOIN peak_facts AS p ON p.peakid = i.peakid
LEFT JOIN prior_rates AS g ON g.season_rank = i.season_rank
LEFT JOIN peak_rates AS pr ON pr.peakid = i.peakid AND pr.season_rank = i.season_rank
LEFT JOIN route_counts AS r
    ON r.peakid = i.peakid AND r.route1 = i.route1 AND r.season_rank = i.season_rank
LEFT JOIN agency_counts AS ag ON ag.agency = i.agency AND ag.season_rank = i.season_rank
LEFT JOIN experience AS x ON x.climber_id = i.climber_id AND x.season_rank = i.season_rank
ORDER BY i.year, i.expid, i.member_id
