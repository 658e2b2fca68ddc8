-- What was sent to one endpoint since a moment (Unix seconds), oldest first.
SELECT epoch(sent_at) AS sent_at, weighted_calls
FROM weather_api_calls
WHERE api_url = $api_url AND sent_at > to_timestamp($since)
ORDER BY sent_at;
