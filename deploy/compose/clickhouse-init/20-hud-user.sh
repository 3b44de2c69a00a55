#!/bin/bash
# Sourced by the ClickHouse image's entrypoint on its first start (see
# 10-grafana-user.sh): relay-stats' CI HUD reads as a user of its own,
# read-only (readonly=1), on relay's database only, allowed to set only the
# per-query limits it sends (time, rows read, memory). The statements are
# deploy/clickhouse/hud-user.sql's, with the password from its secret.
# Sourced, so no `set` here: the entrypoint runs with -eo pipefail already.
hud_password=$(cat /run/secrets/hud-clickhouse-password)
clickhouse client --host 127.0.0.1 --user "$CLICKHOUSE_USER" --password "$CLICKHOUSE_PASSWORD" --multiquery <<SQL
CREATE USER IF NOT EXISTS relay_hud IDENTIFIED WITH sha256_password BY '${hud_password}'
  SETTINGS readonly = 1,
           max_execution_time = 30 MAX 60 CHANGEABLE_IN_READONLY,
           max_rows_to_read = 200000000 CHANGEABLE_IN_READONLY,
           max_memory_usage = 1073741824 CHANGEABLE_IN_READONLY,
           max_threads = 1 CHANGEABLE_IN_READONLY,
           priority = 2 CHANGEABLE_IN_READONLY;
GRANT SELECT ON relay.* TO relay_hud;
SQL
