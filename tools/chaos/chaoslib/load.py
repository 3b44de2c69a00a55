"""Signed webhooks into intake at a steady rate."""
import collections
import hashlib
import hmac
import http.client
import threading
import time

from .stack import SECRET


class Load:
    """Signed webhooks at a steady rate, each retried until intake
    acknowledges it (as GitHub's redelivery, which relay's reconciler asks
    for, would), for up to five minutes."""

    def __init__(self, stack, bodies, rate, run_id):
        self.stack, self.bodies, self.rate, self.run_id = stack, bodies, rate, run_id
        self.sent = {}  # delivery id -> body file
        self.acked = {}  # delivery id -> body file
        self.answers = collections.Counter()
        self.retries = 0
        self.stop = threading.Event()
        self.inflight = threading.Semaphore(32)
        self.lock = threading.Lock()
        self.threads = []
        self.n = 0

    def post_once(self, delivery, event, body):
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", self.stack.procs["intake"].port, timeout=20)
        try:
            conn.request("POST", "/github/webhook", body=body, headers={
                "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sig,
                "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/relay-chaos"})
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()

    def deliver(self, delivery, event, path, body):
        deadline = time.time() + 300
        backoff = 0.2
        try:
            while True:
                try:
                    status = self.post_once(delivery, event, body)
                except Exception:
                    status = 0
                with self.lock:
                    self.answers[status] += 1
                if 200 <= status < 300:
                    with self.lock:
                        self.acked[delivery] = path
                    return
                if time.time() + backoff > deadline:
                    return
                with self.lock:
                    self.retries += 1
                time.sleep(backoff)
                backoff = min(backoff * 2, 3.0)
        finally:
            self.inflight.release()

    def send(self, path, event="pull_request"):
        delivery = f"chaos-{self.run_id}-{self.n:06d}"
        self.n += 1
        body = open(path, "rb").read()
        with self.lock:
            self.sent[delivery] = path
        self.inflight.acquire()
        t = threading.Thread(target=self.deliver, args=(delivery, event, path, body), daemon=True)
        t.start()
        self.threads.append(t)
        return delivery

    def run(self, seconds):
        start = time.time()
        i = 0
        while not self.stop.is_set() and time.time() - start < seconds:
            self.send(self.bodies[i % len(self.bodies)])
            i += 1
            next_at = start + i / self.rate
            time.sleep(max(0.0, next_at - time.time()))

    def join(self):
        for t in self.threads:
            t.join()
