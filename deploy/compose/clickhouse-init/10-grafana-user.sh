#!/bin/bash
# Sourced by the ClickHouse image's entrypoint on its first start (an empty
# data directory), with the server up and $CLICKHOUSE_USER/$CLICKHOUSE_PASSWORD
# set: Grafana's own user, read-only (readonly=1: SELECT only, and only the
# query time limit may be changed by a dashboard), on relay's database only.
# Grafana runs whatever SQL a dashboard holds, so it must not write as relay.
# Sourced, so no `set` here: the entrypoint runs with -eo pipefail already.
grafana_password=$(cat /run/secrets/grafana-clickhouse-password)
clickhouse client --host 127.0.0.1 --user "$CLICKHOUSE_USER" --password "$CLICKHOUSE_PASSWORD" --multiquery <<SQL
CREATE USER IF NOT EXISTS grafana IDENTIFIED WITH sha256_password BY '${grafana_password}'
  SETTINGS readonly = 1, max_execution_time = 60 CHANGEABLE_IN_READONLY;
GRANT SELECT ON relay.* TO grafana;
SQL
