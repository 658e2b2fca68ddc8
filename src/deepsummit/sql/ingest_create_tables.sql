-- Clean records tables (docs/architecture.md, "Warehouse tables"); the quarantine has its own file.
-- Raw tables are created from the loaded frame itself (ingest_replace_raw.sql).
CREATE TABLE IF NOT EXISTS peaks (
    peakid VARCHAR NOT NULL PRIMARY KEY,
    pkname VARCHAR,
    heightm INTEGER,
    himal VARCHAR,
    location VARCHAR,
    latitude DOUBLE,
    longitude DOUBLE,
    coord_source VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS expeditions (
    expid VARCHAR NOT NULL,
    peakid VARCHAR NOT NULL,
    year INTEGER NOT NULL,
    season VARCHAR NOT NULL,
    route1 VARCHAR,
    totmembers INTEGER,
    smtmembers INTEGER,
    smtdate DATE,
    success BOOLEAN NOT NULL,
    termreason VARCHAR,
    highpoint INTEGER,
    o2used BOOLEAN,
    commercial BOOLEAN,
    camps INTEGER,
    style VARCHAR,
    source VARCHAR NOT NULL,
    PRIMARY KEY (expid, year)
);

CREATE TABLE IF NOT EXISTS expedition_details (
    expid VARCHAR NOT NULL,
    year INTEGER NOT NULL,
    peakid VARCHAR NOT NULL,
    season VARCHAR NOT NULL,
    basecamp_date DATE,
    highpoint_date DATE,
    termination_date DATE,
    termination_reason VARCHAR,
    highpoint_metres INTEGER,
    members INTEGER,
    member_deaths INTEGER,
    hired_staff INTEGER,
    hired_staff_deaths INTEGER,
    oxygen_used BOOLEAN,
    trekking_agency VARCHAR,
    source VARCHAR NOT NULL,
    PRIMARY KEY (expid, year)
);

CREATE TABLE IF NOT EXISTS members (
    expedition_id VARCHAR NOT NULL,
    member_id VARCHAR NOT NULL,
    peakid VARCHAR NOT NULL,
    year INTEGER NOT NULL,
    season VARCHAR NOT NULL,
    sex VARCHAR,
    age INTEGER,
    citizenship VARCHAR,
    expedition_role VARCHAR,
    hired BOOLEAN,
    highpoint_metres INTEGER,
    success BOOLEAN NOT NULL,
    solo BOOLEAN,
    oxygen_used BOOLEAN,
    died BOOLEAN,
    death_cause VARCHAR,
    death_height_metres INTEGER,
    injured BOOLEAN,
    injury_type VARCHAR,
    injury_height_metres INTEGER,
    climber_id VARCHAR,
    source VARCHAR NOT NULL,
    PRIMARY KEY (member_id, year)
);
