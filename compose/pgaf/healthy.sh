#!/usr/bin/env bash
# Healthy: this node serves the keel database and the keel role can log in with its password
# (set by the primary, replicated to the standby).
set -euo pipefail
port=${PGPORT:-5432}
[ "$(psql -X -Atq -h 127.0.0.1 -p "$port" -d keel \
    -c "SELECT count(*) FROM pg_authid WHERE rolname = 'keel' AND rolcanlogin AND rolpassword IS NOT NULL")" = 1 ]
