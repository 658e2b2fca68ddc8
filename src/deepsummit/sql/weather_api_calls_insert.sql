INSERT INTO weather_api_calls
VALUES ($api_url, to_timestamp($sent_at), $weighted_calls, $request_id);
