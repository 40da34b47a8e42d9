-- A service stops gracefully: its row goes at once (a killed one's goes stale instead).
DELETE FROM service_heartbeats WHERE kind = $1 AND instance = $2;
