#!/bin/bash
# Creates relay's topics (TOPICS_FILE, a copy of deploy/kafka/topics.txt that
# tools/deploy/check keeps identical) on BOOTSTRAP with the declared
# replication and configs; existing topics are left as they are. The same
# parsing as tools/kafka/kafka-dev create-topics. REPLICATION=1 (a one-broker
# dev Kafka) overrides the declared replication and min.insync.replicas.
# COMMAND_CONFIG: a Kafka client properties file (security.protocol,
# sasl.mechanism, sasl.jaas.config, ssl.truststore.*) for brokers that
# require authentication, e.g. a Secret mounted into the Job.
set -euo pipefail
KAFKA_BIN=${KAFKA_BIN:-/opt/kafka/bin}
auth=()
[ -n "${COMMAND_CONFIG:-}" ] && auth=(--command-config "$COMMAND_CONFIG")
while read -r name parts repl cfg; do
  case "$name" in ''|\#*) continue ;; esac
  [ "${REPLICATION:-}" = 1 ] && repl=1
  args=(--bootstrap-server "$BOOTSTRAP" "${auth[@]}" --create --if-not-exists --topic "$name" --partitions "$parts" --replication-factor "$repl")
  if [ -n "${cfg:-}" ]; then
    cfg=${cfg//\\,/$'\x1f'}   # "\," is a comma inside a value
    IFS=, read -ra kvs <<< "$cfg"
    for kv in "${kvs[@]}"; do
      kv=${kv//$'\x1f'/,}
      [ "${REPLICATION:-}" = 1 ] && [ "${kv%%=*}" = min.insync.replicas ] && kv=min.insync.replicas=1
      args+=(--config "$kv")
    done
  fi
  "$KAFKA_BIN/kafka-topics.sh" "${args[@]}"
  echo "topic $name: ok"
done < "$TOPICS_FILE"
