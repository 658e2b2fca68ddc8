-- What the attempts and the exclusions must add up to, counted from the clean tables apart from
-- the candidates they check: the members file's rows, and the climbing members that the
-- expeditions without member rows count (`totmembers`).
SELECT
    (SELECT count(*) FROM members) AS member_rows,
    (
        SELECT coalesce(sum(e.totmembers), 0)
        FROM expeditions AS e
        WHERE NOT EXISTS (
            SELECT 1 FROM members AS m WHERE m.expedition_id = e.expid AND m.year = e.year
        )
    )::BIGINT AS expedition_members
