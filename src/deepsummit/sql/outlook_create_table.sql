-- outlooks: the push-day outlooks (deepsummit/serve/outlook.py), one row per peak, forecast issue,
-- push day, member (or `team`: expected summiters) and model version. `probability` is the
-- member's P(summit), or the team's expected summiters; the band is the model's seeds'.
CREATE TABLE IF NOT EXISTS outlooks (
    peakid VARCHAR NOT NULL,
    issued_at TIMESTAMP NOT NULL,
    push_day DATE NOT NULL,
    member VARCHAR NOT NULL,
    probability DOUBLE NOT NULL,
    band_low DOUBLE NOT NULL,
    band_high DOUBLE NOT NULL,
    model_version VARCHAR NOT NULL,
    weather_source VARCHAR NOT NULL,
    computed_at TIMESTAMP NOT NULL DEFAULT current_localtimestamp(),
    PRIMARY KEY (peakid, issued_at, push_day, member, model_version)
);
