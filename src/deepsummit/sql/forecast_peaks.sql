-- The peaks a forecast is asked for, with their position and how it is known.
SELECT peakid, latitude, longitude, heightm, coord_source
FROM peaks
WHERE peakid IN (SELECT unnest($peakids::VARCHAR[]))
ORDER BY peakid;
