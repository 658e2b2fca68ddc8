-- Peak ids weather may be stored for (see weather_needed_days).
SELECT peakid FROM weather_fetchable_peaks ORDER BY peakid;
