# Shared by tools/bench/intake-bench and tools/bench/intake-probe. Source it
# after common.sh; it defines functions only.

# cpu_ticks PID: user + system CPU time of PID so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# bench_load LOADGEN PORT CORPUS CONNS RATE DUR WARM PREFIX SERVER_PID BROKER_PID
# Runs relay-loadgen (RATE 0: closed loop) and prints its JSON line plus the
# CPU time per answered request of the server, the broker and the load
# generator over the measured window: cpu_server_us, cpu_broker_us,
# cpu_loadgen_us. BROKER_PID may be empty (no broker: 0).
bench_load() {
  local loadgen=$1 port=$2 corpus=$3 conns=$4 rate=$5 dur=$6 warm=$7 prefix=$8 server=$9 broker=${10:-}
  local out lg s0 b0=0 l0 s1 b1=0 l1
  out=$(mktemp)
  "$loadgen" --port "$port" --corpus "$corpus" --connections "$conns" --rate "$rate" \
    --duration "$dur" --warmup "$warm" --pid "$server" --prefix "$prefix" --json > "$out" &
  lg=$!
  sleep "$warm"  # count CPU over the measured window only
  s0=$(cpu_ticks "$server"); l0=$(cpu_ticks "$lg"); [ -z "$broker" ] || b0=$(cpu_ticks "$broker")
  sleep "$dur"
  s1=$(cpu_ticks "$server"); l1=$(cpu_ticks "$lg"); [ -z "$broker" ] || b1=$(cpu_ticks "$broker")
  wait "$lg"
  python3 - "$(cat "$out")" "$(getconf CLK_TCK)" "$dur" $((s1 - s0)) $((b1 - b0)) $((l1 - l0)) <<'PY'
import json, sys
d = json.loads(sys.argv[1]); tck, dur = int(sys.argv[2]), float(sys.argv[3])
n = max(d["rps"] * dur, 1)
for key, ticks in zip(("cpu_server_us", "cpu_broker_us", "cpu_loadgen_us"), sys.argv[4:7]):
    d[key] = int(ticks) / tck * 1e6 / n
print(json.dumps(d))
PY
  rm -f "$out"
}
