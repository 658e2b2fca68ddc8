-- The tables of the warehouse: which stage outputs exist (flows/ reruns a stage whose are gone).
SELECT table_name
FROM information_schema.tables;
