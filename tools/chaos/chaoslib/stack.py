"""The stack under test: processes, Kafka, ClickHouse, and the helpers to reach them."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SECRET = "relay-chaos-webhook-secret"
UPSTREAM = "Codertocat/Hello-World"  # the sample payloads' repository
APP_ID = "29310"
OIDC_ISSUER, OIDC_AUDIENCE = "https://oidc.relay.dev", "relay-dev"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout.strip()


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def http_post(url, body, timeout=10):
    req = urllib.request.Request(url, data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def metric_sum(text, name, match=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and match in line:
            total += float(line.rsplit(" ", 1)[1])
    return total

class Proc:
    """One relay process (or the fake GitHub): started in its own process
    group with a port file, killed with SIGKILL, restarted the same way."""

    def __init__(self, name, argv, env, workdir):
        self.name, self.argv, self.env, self.dir = name, argv, env, workdir
        self.p = None
        self.port_file = os.path.join(workdir, f"{name}.port")
        self.log = os.path.join(workdir, f"{name}.log")
        self.kills = 0
        self.stopped = False  # SIGSTOPped by a fault
        self.wanted = False  # to be running (a killed process comes back)

    def start(self):
        self.wanted = True
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(self.argv + ["--port-file", self.port_file], env=self.env, stdout=out,
                                      stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.path.exists(self.port_file) and open(self.port_file).read().strip():
                # Comes back on the same port, as behind a Service: the
                # canary and the load keep their address.
                self.env["RELAY_HTTP_LISTEN"] = f"127.0.0.1:{self.port}"
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start; see {self.log}")

    def alive(self):
        return self.p is not None and self.p.poll() is None

    @property
    def port(self):
        return int(open(self.port_file).read().strip())

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig):
        if self.alive():
            os.killpg(self.p.pid, sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.p:
            self.p.wait()
        self.kills += 1

    def stop(self):
        """SIGTERM: drains (the graceful stop), SIGKILL after 40 s."""
        self.wanted = False
        self.signal(signal.SIGTERM)
        try:
            self.p.wait(40)
        except subprocess.TimeoutExpired:
            self.kill()

    def ready(self):
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2) as r:
                return r.status == 200
        except Exception:
            return False


def lifecycle_dirs(d):
    """relay-lifecycle's state dir and, as root, the user its jobs run as
    (lifecycle.local.run_as: a job is never root). That user must reach the
    state dir: under /tmp when `d` is closed to it (as tools/dev does)."""
    if os.geteuid() != 0:
        return {"RELAY_LIFECYCLE_STATE_DIR": f"{d}/lifecycle"}
    state = f"{d}/lifecycle"
    probe = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "test", "-x", d]
    if subprocess.call(probe) != 0:
        state = f"/tmp/relay-chaos-{hashlib.sha256(d.encode()).hexdigest()[:10]}/lifecycle"
    return {"RELAY_LIFECYCLE_STATE_DIR": state, "RELAY_LIFECYCLE_LOCAL_RUN_AS": "nobody"}


class Stack:
    def __init__(self, args):
        self.args = args
        self.dir = args.dir
        self.build = args.build
        self.procs = {}
        self.lock = threading.Lock()

    # --- set-up ---------------------------------------------------------------
    def credentials(self):
        d = self.dir
        if not os.path.exists(f"{d}/github-app.pem"):
            sh("openssl", "genrsa", "-out", f"{d}/github-app.pem", "2048")
            sh("openssl", "rsa", "-in", f"{d}/github-app.pem", "-pubout", "-out", f"{d}/github-app.pub")
        with open(f"{d}/relay-token-keys.yaml", "w") as f:
            f.write(f"signing_key: chaos1\nkeys:\n  chaos1: {os.urandom(32).hex()}\n")
        shutil.copy(f"{ROOT}/deploy/config/allowlist.dev.yaml", f"{d}/allowlist.yaml")
        if not os.path.exists(f"{d}/oidc.pem"):
            sh("openssl", "genrsa", "-out", f"{d}/oidc.pem", "2048")
        with open(f"{d}/oidc-jwks.json", "w") as f:
            f.write(sh(f"{self.build}/tools/relay-canary", "jwks", "--key", f"{d}/oidc.pem", "--kid", "chaos1"))
        token = os.urandom(24).hex()
        with open(f"{d}/lifecycle-tokens.yaml", "w") as f:
            f.write(f"tokens:\n  - {{name: chaos, team: chaos, role: admin, sha256: {hashlib.sha256(token.encode()).hexdigest()}}}\n")

    def env(self, **kw):
        e = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        e.update({"RELAY_HTTP_LISTEN": "127.0.0.1:0", "RELAY_HTTP_DRAIN_DELAY": "1s", "RELAY_LOG_LEVEL": "info"})
        e.update({k: str(v) for k, v in kw.items()})
        return e

    def define(self):
        b, d, kafka, ch = self.build, self.dir, self.bootstrap, self.clickhouse
        consumer = {"RELAY_KAFKA_BOOTSTRAP": kafka, "RELAY_KAFKA_SESSION_TIMEOUT": "10s"}
        self.procs["github"] = Proc("github", [f"{b}/tools/relay-fake-github", "--listen", "127.0.0.1:0",
                                               "--app-id", APP_ID, "--public-key", f"{d}/github-app.pub",
                                               "--record", f"{d}/github-calls.jsonl"], self.env(), d)
        self.procs["github"].start()
        self.procs["intake"] = Proc("intake", [f"{b}/services/intake/relay-intake"], self.env(
            RELAY_KAFKA_BOOTSTRAP=kafka, RELAY_INTAKE_WEBHOOK_SECRETS=SECRET), d)

        def dispatch(name):
            return Proc(name, [f"{b}/services/dispatch/relay-dispatch"], self.env(
                **consumer, RELAY_GITHUB_API_URL=self.procs["github"].url, RELAY_GITHUB_APP_ID=APP_ID,
                RELAY_GITHUB_PRIVATE_KEY_FILE=f"{d}/github-app.pem", RELAY_ALLOWLIST_FILE=f"{d}/allowlist.yaml",
                RELAY_TOKENS_KEYS_FILE=f"{d}/relay-token-keys.yaml", RELAY_DISPATCH_UPSTREAM_REPO=UPSTREAM,
                RELAY_GITHUB_MAX_WRITES_PER_MINUTE=100000, RELAY_GITHUB_MAX_WRITES_PER_HOUR=1000000,
                RELAY_GITHUB_MAX_CONCURRENCY=16), d)

        def collector(name):
            return Proc(name, [f"{b}/services/collector/relay-collector"], self.env(
                **consumer, RELAY_ALLOWLIST_FILE=f"{d}/allowlist.yaml",
                RELAY_TOKENS_KEYS_FILE=f"{d}/relay-token-keys.yaml", RELAY_COLLECTOR_OIDC_ISSUER=OIDC_ISSUER,
                RELAY_COLLECTOR_OIDC_AUDIENCE=OIDC_AUDIENCE, RELAY_COLLECTOR_OIDC_JWKS_FILE=f"{d}/oidc-jwks.json",
                RELAY_COLLECTOR_GRPC_LISTEN="127.0.0.1:0", RELAY_COLLECTOR_RATE_PER_REPO=10000,
                RELAY_COLLECTOR_BURST_PER_REPO=10000), d)

        self.procs["dispatch"] = dispatch("dispatch")
        self.procs["dispatch-2"] = dispatch("dispatch-2")
        self.procs["collector"] = collector("collector")
        self.procs["collector-2"] = collector("collector-2")
        self.procs["stats"] = Proc("stats", [f"{b}/services/stats/relay-stats"], self.env(
            RELAY_KAFKA_BOOTSTRAP=kafka, RELAY_CLICKHOUSE_URL=ch, RELAY_STATS_CI_FILES_DIR=f"{d}/ci-files"), d)
        self.procs["lifecycle"] = Proc("lifecycle", [f"{b}/services/lifecycle/relay-lifecycle"], self.env(
            RELAY_KAFKA_BOOTSTRAP=kafka, RELAY_GRPC_LISTEN="127.0.0.1:0", **lifecycle_dirs(d),
            RELAY_LIFECYCLE_LOCAL_TEAM="chaos", RELAY_LIFECYCLE_OWNER=f"relay-chaos-{os.getpid()}",
            RELAY_LIFECYCLE_TOKENS_FILE=f"{d}/lifecycle-tokens.yaml", RELAY_LIFECYCLE_RAY_BIN=""), d)

    def up(self):
        os.makedirs(self.dir, exist_ok=True)
        log("starting Kafka (three brokers) and ClickHouse")
        env = dict(os.environ, KAFKA_HEAP=os.environ.get("KAFKA_HEAP", "512m"))
        self.bootstrap = sh(f"{ROOT}/tools/kafka/kafka-dev", "start", f"{self.dir}/kafka", "--brokers", "3", env=env)
        self.clickhouse = sh(f"{ROOT}/tools/clickhouse/clickhouse-dev", "start", f"{self.dir}/clickhouse")
        self.credentials()
        sh(f"{ROOT}/tools/fixtures/corpus", f"{self.dir}/corpus", SECRET)
        self.define()
        self.pb = proto_modules(self.build, f"{self.dir}/pyproto")
        # Generous limits: the faults under test are relay's, not GitHub's.
        http_post(self.procs["github"].url + "/_fake/config",
                  json.dumps({"rate_limit": {"limit": 10000000, "window_seconds": 3600}}))
        subprocess.run([f"{self.build}/services/stats/relay-stats", "migrate"], check=True, capture_output=True,
                       env=self.env(RELAY_CLICKHOUSE_URL=self.clickhouse))
        for name in ("intake", "dispatch", "collector", "stats", "lifecycle"):
            self.procs[name].start()
        self.wait_ready(["intake", "dispatch", "collector", "stats"], 120)

    def wait_ready(self, names, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if all(self.procs[n].ready() for n in names):
                return
            time.sleep(0.5)
        raise RuntimeError("not ready: " + ", ".join(n for n in names if not self.procs[n].ready()))

    def relay_procs(self):
        return [p for n, p in self.procs.items() if n != "github" and p.alive() and not p.stopped]

    def down(self):
        for p in self.procs.values():
            if p.alive():
                p.signal(signal.SIGCONT)
                p.kill()
        subprocess.run([f"{ROOT}/tools/kafka/kafka-dev", "stop", f"{self.dir}/kafka"], capture_output=True)
        subprocess.run([f"{ROOT}/tools/clickhouse/clickhouse-dev", "stop", f"{self.dir}/clickhouse"],
                       capture_output=True)

    def clickhouse_pid(self):
        return int(open(f"{self.dir}/clickhouse/pid").read().strip())

    def query(self, sql):
        return http_get(self.clickhouse + "/?" + urllib.parse.urlencode(
            {"query": sql + " FORMAT JSONEachRow", "database": "relay"}), timeout=120)


def proto_modules(build_dir, out_dir):
    """relay's protobuf messages for Python, generated with protoc from proto/."""
    os.makedirs(out_dir, exist_ok=True)
    protos = [os.path.relpath(os.path.join(d, f), f"{ROOT}/proto")
              for d, _, fs in os.walk(f"{ROOT}/proto") for f in fs if f.endswith(".proto")]
    subprocess.run(["protoc", "-I", f"{ROOT}/proto", f"--python_out={out_dir}"] + protos, check=True)
    sys.path.insert(0, out_dir)
    from relay.v1 import collector_pb2, dispatch_pb2  # noqa: E402
    return collector_pb2, dispatch_pb2
