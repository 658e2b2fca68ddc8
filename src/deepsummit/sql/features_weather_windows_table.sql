-- Store the windows computed by features_weather_windows.sql (registered as `windows_frame`),
-- tagged with their weather source: a model is only fed weather from the source it was
-- trained on.
CREATE OR REPLACE TABLE weather_windows AS
SELECT $source AS source, *
FROM windows_frame
