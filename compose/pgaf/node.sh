#!/usr/bin/env bash
# A pg_auto_failover data node: created on the first start, run from then on. The first node to
# register becomes the primary, the next one its synchronous standby (pg_basebackup from the
# primary at creation). Passwords come from compose/keel.env:
# - autoctl_node (to the monitor) and pgautofailover_replicator (streaming replication,
#   pg_basebackup, pg_rewind) go in ~/.pgpass, which libpq reads for pg_autoctl's connections
#   and for the standby's WAL receiver; nothing puts them on a command line or in a URL;
# - the primary sets pgautofailover_replicator's and keel's passwords (keel owns the database
#   keel-stream migrates; --pg-hba-lan lets the compose network reach it with scram).
set -euo pipefail
: "${PGAF_AUTOCTL_NODE_PASSWORD:?set PGAF_AUTOCTL_NODE_PASSWORD in compose/keel.env}"
: "${PGAF_REPLICATION_PASSWORD:?set PGAF_REPLICATION_PASSWORD in compose/keel.env}"
: "${PGPASSWORD:?set PGPASSWORD (the password of the keel role) in compose/keel.env}"
keel_password=$PGPASSWORD
unset PGPASSWORD # libpq would offer it to every server; ~/.pgpass says whose password is whose
monitor=${PGAF_MONITOR_HOST:-pg-monitor}
monitor_port=${PGAF_MONITOR_PORT:-5432}
port=${PGPORT:-5432}

pgpass_field() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/:/\\:/g'; }
umask 077
{
    printf '%s:%s:pg_auto_failover:autoctl_node:%s\n' \
        "$monitor" "$monitor_port" "$(pgpass_field "$PGAF_AUTOCTL_NODE_PASSWORD")"
    printf '*:*:*:pgautofailover_replicator:%s\n' "$(pgpass_field "$PGAF_REPLICATION_PASSWORD")"
} >"$HOME/.pgpass"

set_roles() {
    local recovery
    until recovery=$(psql -X -Atq -h 127.0.0.1 -p "$port" -d keel \
        -c 'SELECT pg_is_in_recovery()' 2>/dev/null); do
        sleep 1
    done
    if [ "$recovery" = t ]; then
        return 0 # a standby: the primary's roles replicate here
    fi
    until psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -d keel \
        -v keel_pw="$keel_password" -v repl_pw="$PGAF_REPLICATION_PASSWORD" \
        >/dev/null 2>&1 <<'SQL'
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'keel') AS missing \gset
\if :missing
CREATE ROLE keel LOGIN;
\endif
ALTER ROLE keel PASSWORD :'keel_pw';
ALTER ROLE pgautofailover_replicator PASSWORD :'repl_pw';
ALTER DATABASE keel OWNER TO keel;
SQL
    do sleep 1; done
    echo "node: keel and pgautofailover_replicator passwords set"
}
(set_roles &)

exec pg_autoctl create postgres --auth scram-sha-256 --ssl-self-signed --pg-hba-lan \
    --hostname "${PGAF_HOSTNAME:-$(hostname)}" --pgport "$port" --dbname keel \
    --monitor "postgres://autoctl_node@$monitor:$monitor_port/pg_auto_failover?sslmode=require" \
    --replication-quorum true --candidate-priority 50 --run
