"""What the benchmark scripts under tools/bench share: starting a service
and waiting for its port file, reading its /metrics, its CPU and memory from
/proc, and the webhook payload they post. Imported by the scripts beside it
(they put this directory on sys.path)."""
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import urllib.request

PROG = os.path.basename(sys.argv[0])


def sh(*args, **kw):
    return subprocess.check_output(args, text=True, **kw).strip()


def wait_port(path, proc, name, timeout=60):
    """The port a service wrote to `path` once it listens; exits the script
    if `proc` ends first or `timeout` seconds pass."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return int(open(path).read().strip())
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    sys.exit(f"{PROG}: {name} did not start")


def start(cmd, env, log, port_file, name, timeout=60):
    """Starts a relay binary (`cmd` + --port-file) in a session of its own,
    its output appended to `log`; returns (process, port)."""
    proc = subprocess.Popen(cmd + ["--port-file", port_file], env={**os.environ, **env},
                            stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, wait_port(port_file, proc, name, timeout)


def metric(port, name):
    """The value of a metric on 127.0.0.1:port/metrics: `name` as /metrics
    prints it (labels included, for one series), or a bare name for its
    first series; 0.0 when absent, None when the process does not answer."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_kib(pid, key):
    """A /proc/<pid>/status memory line (VmHWM, VmRSS, ...) in KiB; -1 when
    the process is gone."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def vm(pid, key):
    """vm_kib in MiB (-1 when the process is gone)."""
    kib = vm_kib(pid, key)
    return kib // 1024 if kib >= 0 else -1


def opened_payload(corpus_dir, repo):
    """The body of a real `pull_request` `opened` webhook of `repo` from the
    octokit corpus (tools/fixtures)."""
    for line in open(os.path.join(corpus_dir, "manifest.tsv")):
        event, path, _ = line.rstrip("\n").split("\t")
        if event != "pull_request":
            continue
        body = open(os.path.join(corpus_dir, path), "rb").read()
        doc = json.loads(body)
        if doc.get("action") == "opened" and doc["repository"]["full_name"] == repo:
            return body
    sys.exit(f"{PROG}: no pull_request opened payload of {repo} in the corpus")


def webhook_signature(secret, body):
    """X-Hub-Signature-256 as GitHub computes it."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
