-- Every rejected row of every stage (docs/architecture.md): the input, the row as read, why.
CREATE TABLE IF NOT EXISTS quarantine (
    source VARCHAR,
    table_name VARCHAR,
    row_number INTEGER,
    record VARCHAR,
    reason VARCHAR,
    load_digest VARCHAR,
    quarantined_at TIMESTAMP
);
