#!/usr/bin/env bash
# The pg_auto_failover monitor: created on the first start, run from then on (`create --run`
# on an existing data directory runs it). Data nodes log in to it as autoctl_node with scram and
# the password PGAF_AUTOCTL_NODE_PASSWORD (compose/keel.env), set here once it answers.
set -euo pipefail
: "${PGAF_AUTOCTL_NODE_PASSWORD:?set PGAF_AUTOCTL_NODE_PASSWORD in compose/keel.env}"
port=${PGPORT:-5432}

set_password() {
    until psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -d pg_auto_failover \
        -v pw="$PGAF_AUTOCTL_NODE_PASSWORD" >/dev/null 2>&1 <<'SQL'
ALTER ROLE autoctl_node PASSWORD :'pw';
SQL
    do sleep 1; done
    echo "monitor: autoctl_node password set"
}
# In a subshell that exits at once: the loop is re-parented to the init process, not to
# pg_autoctl, which supervises its own children.
(set_password &)

exec pg_autoctl create monitor --auth scram-sha-256 --ssl-self-signed \
    --hostname "${PGAF_HOSTNAME:-$(hostname)}" --pgport "$port" --run
