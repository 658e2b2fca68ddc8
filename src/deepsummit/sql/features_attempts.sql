-- Attempts: the candidates with no reason against them, label = the member summited.
-- attempt_exclusions: how many candidates each reason kept out, by the record they come from
-- (attempts + excluded = member rows + the members expedition records count).
CREATE OR REPLACE TABLE attempts AS
SELECT * EXCLUDE (reason)
FROM attempt_candidates
WHERE reason IS NULL
ORDER BY year, expid, member_id;

CREATE OR REPLACE TABLE attempt_exclusions AS
SELECT reason, record, count(*) AS members
FROM attempt_candidates
WHERE reason IS NOT NULL
GROUP BY reason, record
ORDER BY reason, record;
