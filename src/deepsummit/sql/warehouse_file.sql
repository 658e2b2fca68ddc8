-- The file of the connection's database (for messages that name where a write failed).
SELECT path FROM duckdb_databases() WHERE database_name = current_database()
