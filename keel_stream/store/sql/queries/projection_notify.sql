SELECT pg_notify('keel_projections', $1);
