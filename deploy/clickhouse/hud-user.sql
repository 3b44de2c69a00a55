-- relay-stats' CI HUD reads as this user, never as relay's writer
-- (stats.hud_clickhouse_user, stats.hud_clickhouse_password_file), on
-- ClickHouse releases with SQL access control (20.x and later; 18.16:
-- users.d/relay-hud.xml). Run as an admin, with the password replaced:
--   readonly = 1: reads only; the per-query limits relay-stats sends with
--   every HUD query may be set (CHANGEABLE_IN_READONLY), within MAX where
--   one is given, and its priority (2: below relay-stats' inserts), and
--   nothing else; SELECT on relay's database only.
-- deploy/compose/clickhouse-init/20-hud-user.sh runs the same statements.
CREATE USER IF NOT EXISTS relay_hud IDENTIFIED WITH sha256_password BY 'REPLACE-WITH-THE-PASSWORD'
  SETTINGS readonly = 1,
           max_execution_time = 30 MAX 60 CHANGEABLE_IN_READONLY,
           max_rows_to_read = 200000000 CHANGEABLE_IN_READONLY,
           max_memory_usage = 1073741824 CHANGEABLE_IN_READONLY,
           max_threads = 1 CHANGEABLE_IN_READONLY,
           priority = 2 CHANGEABLE_IN_READONLY;
GRANT SELECT ON relay.* TO relay_hud;
