-- weather_daily: one row per (peakid, date, source); `date` is the local (Nepal) calendar day.
-- The 15 variable columns follow deepsummit.core.inputs.WEATHER_VARIABLES (a test pins the order).
CREATE TABLE IF NOT EXISTS weather_daily (
    peakid VARCHAR NOT NULL,
    date DATE NOT NULL,
    source VARCHAR NOT NULL,
    temperature_2m_mean DOUBLE,
    temperature_2m_max DOUBLE,
    temperature_2m_min DOUBLE,
    apparent_temperature_mean DOUBLE,
    apparent_temperature_max DOUBLE,
    apparent_temperature_min DOUBLE,
    precipitation_sum DOUBLE,
    rain_sum DOUBLE,
    snowfall_sum DOUBLE,
    precipitation_hours DOUBLE,
    wind_speed_10m_max DOUBLE,
    wind_gusts_10m_max DOUBLE,
    wind_direction_10m_dominant DOUBLE,
    shortwave_radiation_sum DOUBLE,
    et0_fao_evapotranspiration DOUBLE,
    fetched_at TIMESTAMP NOT NULL,
    request_id VARCHAR NOT NULL,
    PRIMARY KEY (peakid, date, source)
);

-- Weighted calls sent to an Open-Meteo endpoint, one row per request: the rate limiter's memory
-- across runs, since the API's per-day limit spans runs (a rerun or the nightly schedule must not
-- spend what an earlier run already used). `sent_at` is on the limiter's clock (Unix time).
CREATE TABLE IF NOT EXISTS weather_api_calls (
    api_url VARCHAR NOT NULL,
    sent_at TIMESTAMPTZ NOT NULL,
    weighted_calls DOUBLE NOT NULL,
    request_id VARCHAR NOT NULL
);
