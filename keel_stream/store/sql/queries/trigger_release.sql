UPDATE triggers SET lease_token = NULL, lease_until = NULL
WHERE trigger_id = $1 AND lease_token = $2;
