"""The faults: random SIGKILLs and the scenario (broker, ClickHouse, a paused consumer, second instances)."""
import collections
import os
import random
import signal
import threading
import time

from .stack import ROOT, log, sh


class Faults:
    def __init__(self, stack, args, load_seconds):
        self.stack, self.args, self.d = stack, args, load_seconds
        self.events = []
        self.kills = collections.Counter()
        self.stop = threading.Event()
        self.rng = random.Random(args.seed)

    def note(self, what):
        t = time.time() - self.t0
        self.events.append((round(t, 1), what))
        log(f"fault t+{t:.0f}s: {what}")

    def restart(self, p):
        for attempt in range(20):
            try:
                p.start()
                return
            except RuntimeError:
                time.sleep(1)
        raise RuntimeError(f"{p.name} does not come back; see {p.log}")

    def killer(self):
        while not self.stop.wait(self.args.kill_every):
            with self.stack.lock:
                victims = self.stack.relay_procs()
                if not victims:
                    continue
                p = self.rng.choice(victims)
                p.kill()
                self.kills[p.name] += 1
            time.sleep(self.rng.uniform(0.2, 1.5))
            with self.stack.lock:
                if p.wanted:
                    self.restart(p)

    def at(self, fraction, fn):
        delay = self.t0 + fraction * self.d - time.time()
        if delay > 0 and self.stop.wait(delay):
            return False
        fn()
        return True

    def scenario(self):
        s = self.stack
        def second_up():
            with s.lock:
                s.procs["dispatch-2"].start()
                s.procs["collector-2"].start()
            self.note("second dispatch and collector instances started")
        def broker_kill():
            sh(f"{ROOT}/tools/kafka/kafka-dev", "kill", f"{s.dir}/kafka", "2")
            self.note("broker 2 of 3 SIGKILLed")
        def broker_up():
            env = dict(os.environ, KAFKA_HEAP=os.environ.get("KAFKA_HEAP", "512m"))
            sh(f"{ROOT}/tools/kafka/kafka-dev", "restart", f"{s.dir}/kafka", env=env)
            self.note("broker 2 restarted")
        def ch_stop():
            os.kill(s.clickhouse_pid(), signal.SIGSTOP)
            self.note(f"ClickHouse SIGSTOPped for {self.args.clickhouse_stop} s")
        def ch_cont():
            os.kill(s.clickhouse_pid(), signal.SIGCONT)
            self.note("ClickHouse SIGCONTed")
        def pause():
            with s.lock:
                p = s.procs["dispatch"]
                if not p.alive():
                    self.restart(p)
                p.stopped = True
                p.signal(signal.SIGSTOP)
            self.note("dispatch SIGSTOPped past its session timeout (10 s): 16 s")
        def unpause():
            with s.lock:
                p = s.procs["dispatch"]
                p.signal(signal.SIGCONT)
                p.stopped = False
            self.note("dispatch SIGCONTed")
        def second_down():
            with s.lock:
                for n in ("dispatch-2", "collector-2"):
                    p = s.procs[n]
                    if p.alive():
                        p.stop()
            self.note("second dispatch and collector instances stopped (SIGTERM)")
        plan = [(0.15, second_up), (0.25, broker_kill), (0.25 + 20 / self.d, broker_up), (0.45, ch_stop),
                (0.45 + self.args.clickhouse_stop / self.d, ch_cont), (0.65, pause), (0.65 + 16 / self.d, unpause),
                (0.85, second_down)]
        for fraction, fn in sorted(plan, key=lambda x: x[0]):
            if not self.at(fraction, fn):
                return

    def run(self):
        self.t0 = time.time()
        self.threads = [threading.Thread(target=self.killer, daemon=True),
                        threading.Thread(target=self.scenario, daemon=True)]
        for t in self.threads:
            t.start()

    def heal(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        s = self.stack
        with s.lock:
            os.kill(s.clickhouse_pid(), signal.SIGCONT)
            for n in ("intake", "dispatch", "collector", "stats", "lifecycle"):
                p = s.procs[n]
                p.signal(signal.SIGCONT)
                p.stopped = False
                if not p.alive():
                    self.restart(p)
        env = dict(os.environ, KAFKA_HEAP=os.environ.get("KAFKA_HEAP", "512m"))
        sh(f"{ROOT}/tools/kafka/kafka-dev", "restart", f"{s.dir}/kafka", env=env)
        self.note("healed: every process up, faults off")
