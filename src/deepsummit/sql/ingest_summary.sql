-- Clean and quarantined rows per records table, as stored (each holds one source per load).
SELECT t.table_name, t.clean, count(q.table_name) AS quarantined
FROM (
    SELECT 'peaks' AS table_name, (SELECT count(*) FROM peaks) AS clean
    UNION ALL
    SELECT 'expeditions', (SELECT count(*) FROM expeditions)
    UNION ALL
    SELECT 'expedition_details', (SELECT count(*) FROM expedition_details)
    UNION ALL
    SELECT 'members', (SELECT count(*) FROM members)
) AS t
LEFT JOIN quarantine AS q ON q.table_name = t.table_name
GROUP BY t.table_name, t.clean
ORDER BY t.table_name
