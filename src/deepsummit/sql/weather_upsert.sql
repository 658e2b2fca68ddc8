-- Upsert a validated batch (registered as `weather_batch`) on the key (peakid, date, source):
-- a rerun replaces the rows it fetched again and never duplicates them.
INSERT OR REPLACE INTO weather_daily BY NAME
SELECT * FROM weather_batch;
