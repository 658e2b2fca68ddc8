-- Attempts: the candidates with no reason against them, label = the member summited.
-- attempt_exclusions: how many member rows each reason kept out (attempts + excluded =
-- member rows).
CREATE OR REPLACE TABLE attempts AS
SELECT * EXCLUDE (reason)
FROM attempt_candidates
WHERE reason IS NULL
ORDER BY year, expid, member_id;

CREATE OR REPLACE TABLE attempt_exclusions AS
SELECT reason, count(*) AS members
FROM attempt_candidates
WHERE reason IS NOT NULL
GROUP BY reason
ORDER BY reason;
