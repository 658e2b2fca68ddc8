-- The most frequent quarantine reasons of the records tables, with the offending values left
-- out ("peakid = PIMU: unknown peak id" counts as "peakid: unknown peak id").
SELECT
    table_name,
    regexp_replace(reason, ' = (''[^'']*''|[^:;]*): ', ': ', 'g') AS reason,
    count(*) AS rows
FROM quarantine
WHERE table_name IN ('peaks', 'expeditions', 'expedition_details', 'members')
GROUP BY ALL
ORDER BY table_name, rows DESC, reason
