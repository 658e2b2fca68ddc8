-- Candidates per split (by expedition year), record (a member row, or a member an expedition
-- record counts) and reason they were kept out of the attempts, or 'attempt' when they were not,
-- with their summit rate: an exclusion that depends on the outcome (no date: mostly expeditions
-- that failed early) shows as a rate far from the attempts'.
WITH candidates AS (
    SELECT
        CASE
            WHEN year <= $train_until THEN 'train'
            WHEN year <= $validation_until THEN 'validation'
            WHEN year <= $test_until THEN 'test'
            ELSE 'later'
        END AS split,
        record,
        coalesce(reason, 'attempt') AS reason,
        label
    FROM attempt_candidates
)
SELECT split, record, reason, count(*) AS members, avg(label::DOUBLE) AS summit_rate
FROM candidates
GROUP BY split, record, reason
ORDER BY
    list_position(['train', 'validation', 'test', 'later'], split),
    record DESC,
    reason = 'attempt' DESC,
    members DESC
