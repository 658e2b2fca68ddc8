-- Whether a planned attempt's peak and nationality appear in the records (the predict checks).
SELECT
    EXISTS (SELECT 1 FROM peaks WHERE peakid = $peakid) AS peak_known,
    $nationality IS NULL
        OR EXISTS (SELECT 1 FROM members WHERE citizenship = $nationality) AS nationality_known
