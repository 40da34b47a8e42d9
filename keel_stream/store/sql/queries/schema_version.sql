SELECT max(version) FROM keel_schema_migrations;
