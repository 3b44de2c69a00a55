"""Counting, Jepsen-style: what each stage acknowledged, lost and duplicated; the verdict and the report."""
import collections
import json
import os
import platform
import subprocess
import time

from .stack import ROOT, http_get, sh


def fake_dispatch_times(stack):
    """(delivery, repo) -> when (ms) the fake GitHub accepted each dispatch of it."""
    calls = json.loads(http_get(stack.procs["github"].url + "/_fake/calls?brief=1", timeout=60))
    times = collections.defaultdict(list)
    for c in calls:
        if c.get("endpoint") == "POST /repos/{owner}/{repo}/dispatches" and c.get("status") == 204:
            cp = (c.get("body") or {}).get("client_payload") or {}
            times[(cp.get("delivery_id", ""), c["repo"].lower())].append(int(c.get("t0", 0)))
    return times


def fake_pairs(stack):
    return collections.Counter({p: len(t) for p, t in fake_dispatch_times(stack).items()})


def wait_quiet(label, probe, settle, timeout):
    """Until probe() returns the same value `settle` seconds in a row."""
    last, since, deadline = None, time.time(), time.time() + timeout
    while time.time() < deadline:
        try:
            v = probe()
        except Exception:
            v = None
        if v != last:
            last, since = v, time.time()
        elif v is not None and time.time() - since >= settle:
            return v
        time.sleep(1)
    raise RuntimeError(f"{label} did not settle in {timeout} s (last: {last})")


def measure_fanout(stack, load, bodies):
    """Each payload once, before any fault: the repos relay dispatches it to."""
    ids = {load.send(b): b for b in bodies}
    load.join()
    wait_quiet("warm-up dispatches", lambda: sum(fake_pairs(stack).values()), 5, 120)
    pairs = fake_pairs(stack)
    fanout = {}
    for delivery, body in ids.items():
        fanout[body] = sorted(repo for (d, repo) in pairs if d == delivery)
    return fanout, set(ids)


def topic_delivery_ids(stack, prefix):
    out = subprocess.run(["kcat", "-b", stack.bootstrap, "-C", "-t", "github.webhooks", "-o", "beginning", "-e",
                          "-q", "-X", "isolation.level=read_committed", "-f", "%h\n"], capture_output=True, text=True, timeout=300).stdout
    counts = collections.Counter()
    for line in out.splitlines():
        for kv in line.split(","):
            if kv.startswith("relay-delivery-id="):
                d = kv.split("=", 1)[1]
                if d.startswith(prefix):
                    counts[d] += 1
    return counts


def topic_records(stack, topic):
    """(key, value) of every committed record of TOPIC, binary-safe: kcat
    prints each record's key and value lengths before their bytes."""
    out = subprocess.run(["kcat", "-b", stack.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", "isolation.level=read_committed", "-f", "%K %S\n%k%s"],
                         capture_output=True, timeout=300).stdout
    records, i = [], 0
    while i < len(out):
        nl = out.index(b"\n", i)
        klen, vlen = (max(int(x), 0) for x in out[i:nl].split())
        i = nl + 1
        records.append((out[i:i + klen].decode(), out[i + klen:i + klen + vlen]))
        i += klen + vlen
    return records


def count(stack, load, fanout, warm, callbacks_log, prefix):
    stages = []
    # 1. webhook topic
    acked = {d: b for d, b in load.acked.items() if d not in warm}
    sent = {d: b for d, b in load.sent.items() if d not in warm}
    in_topic = topic_delivery_ids(stack, prefix)
    lost = sorted(d for d in acked if d not in in_topic)
    dups = {d: n for d, n in in_topic.items() if n > 1 and d not in warm}
    stages.append({"stage": "webhook topic (github.webhooks)", "attempted": len(sent), "acknowledged": len(acked),
                   "lost": len(lost), "duplicated": sum(n - 1 for n in dups.values()), "lost_ids": lost[:20],
                   "duplicate_ids": sorted(dups)[:20],
                   "note": f"{len([d for d in in_topic if d not in warm])} delivery ids in the topic"
                           + (f"; {len(dups)} recorded twice (intake SIGKILLed between the broker's ack and its "
                              f"answer, the retry reached a new process): allowed, consumers are idempotent by "
                              f"delivery id, as the next stages show" if dups else "")})
    dup_webhooks = set(dups)
    # 2. GitHub dispatches
    call_times = fake_dispatch_times(stack)
    pairs = {p: len(t) for p, t in call_times.items()}
    expected = {(d, r) for d, b in acked.items() for r in fanout[b]}
    seen = {p: n for p, n in pairs.items() if p[0] in acked}
    # relay.dispatches: one record per call GitHub accepted; `repeated` marks
    # a call made again by the partition's next owner (in flight at a kill).
    dispatch_pb2 = stack.pb[1]
    repeated = set()
    for key, value in topic_records(stack, "relay.dispatches"):
        r = dispatch_pb2.DispatchRecord()
        r.ParseFromString(value)
        if r.repeated:
            repeated.add((r.delivery_id, r.downstream_repo.lower()))
    lost2 = sorted(expected - set(seen))
    dup_pairs = {p: n for p, n in seen.items() if n > 1}
    # Every call made twice must be marked: an instance that lost its group
    # session without knowing it is fenced by the group (its STARTED marks
    # are refused), so there is no allowance for overlapping owners.
    unmarked = sorted(p for p in dup_pairs if p not in repeated)
    unexpected = sorted(set(seen) - expected)
    stages.append({"stage": "GitHub dispatches (fake GitHub)", "attempted": len(expected),
                   "acknowledged": len(seen), "lost": len(lost2), "duplicated": sum(n - 1 for n in dup_pairs.values()),
                   "duplicated_marked_repeated": sum(n - 1 for p, n in dup_pairs.items() if p in repeated),
                   "duplicated_unmarked": len(unmarked), "unexpected_pairs": len(unexpected),
                   "lost_ids": [list(p) for p in lost2[:20]], "duplicate_ids": [list(p) for p in unmarked[:20]]})
    # 3. callbacks decided
    lines = [json.loads(l) for l in open(callbacks_log)] if os.path.exists(callbacks_log) else []
    lines = [l for l in lines if l["delivery_id"].startswith(prefix) and l["delivery_id"] not in warm]
    ok = [l for l in lines if l["http"] == 200]
    # ci.results: one record per accepted transition. A batch the owner
    # wrote again after a crash writes the same transition again (same job,
    # same version): idempotent, collapsed by ReplacingMergeTree(version).
    # The same transition under two versions would be a second decision.
    collector_pb2 = stack.pb[0]
    per_job = collections.defaultdict(collections.Counter)
    recorded = set()  # (delivery, repo, run, job, status) of every transition written
    for key, value in topic_records(stack, "ci.results"):
        r = collector_pb2.JobResult()
        r.ParseFromString(value)
        per_job[r.job_id][(r.trusted.status, r.version)] += 1
        recorded.add((r.trusted.delivery_id, r.trusted.verified_repo.lower(), r.reported.run_id,
                      r.reported.job_name, r.trusted.status))
    rewritten = sum(n - 1 for c in per_job.values() for n in c.values() if n > 1)
    records = sum(sum(c.values()) for c in per_job.values())
    twice_decided = sum(1 for c in per_job.values()
                        for st in {s for s, _ in c} if len({v for s2, v in c if s2 == st}) > 1)
    jobs_acked = {(l["delivery_id"], l["repo"].lower(), l["run_id"], l["job_name"]) for l in ok
                  if l.get("outcome") != "ignored"}
    # A callback answered 200 and not ignored (L1 repos) is acknowledged:
    # its transition must be in ci.results, or it was lost after the answer.
    unrecorded = sorted({(l["delivery_id"], l["repo"].lower(), l["run_id"], l["job_name"], l["status"])
                         for l in ok if l.get("outcome") != "ignored"} - recorded)
    # Every dispatch GitHub accepted must have been answered by the
    # downstream, or this stage counted only part of the run.
    answered = {(l["delivery_id"], l["repo"].lower()) for l in lines}
    unanswered = sorted(p for p in seen if p not in answered)
    stages.append({"stage": "callbacks decided (collector, ci.results)", "attempted": len(lines),
                   "acknowledged": len(ok), "lost": len(lines) - len(ok) + len(unrecorded),
                   "duplicated": twice_decided, "rewritten": rewritten, "unanswered_dispatches": len(unanswered),
                   "unanswered_ids": [list(p) for p in unanswered[:20]], "unrecorded": len(unrecorded),
                   "lost_ids": [list(p) for p in unrecorded[:20]],
                   "note": f"{len(answered)} dispatches answered by the downstream, {len(unanswered)} not; "
                           f"{len(unrecorded)} accepted transitions missing from ci.results; "
                           f"{len(jobs_acked)} jobs; {records} ci.results records for {len(per_job)} job ids; "
                           f"{rewritten} the same transition written again (same version) by an owner that "
                           f"crashed before its batch was done",
                   "retried": sum(1 for l in lines if l["tries"] > 1),
                   "outcomes": dict(collections.Counter(l.get("outcome", str(l["http"])) for l in lines))})
    # 4. ClickHouse after FINAL
    def rows(sql):
        return [json.loads(l) for l in stack.query(sql).splitlines()]
    wd = rows(f"SELECT delivery_id, count() AS n FROM webhook_deliveries FINAL WHERE delivery_id LIKE '{prefix}%' "
              f"GROUP BY delivery_id")
    # The warm-up webhooks (sent before the faults) are not counted.
    wd_ids = {r["delivery_id"]: int(r["n"]) for r in wd if r["delivery_id"] not in warm}
    ds = rows(f"SELECT delivery_id, lower(downstream_repo) AS repo, count() AS n FROM dispatches FINAL "
              f"WHERE delivery_id LIKE '{prefix}%' GROUP BY delivery_id, repo")
    ds_pairs = {(r["delivery_id"], r["repo"]): int(r["n"]) for r in ds if r["delivery_id"] not in warm}
    jb = rows(f"SELECT delivery_id, lower(downstream_repo) AS repo, run_id, job_name, any(status) AS status, "
              f"any(conclusion) AS conclusion, count() AS n FROM crcr_workflow_job FINAL "
              f"WHERE delivery_id LIKE '{prefix}%' GROUP BY delivery_id, repo, run_id, job_name")
    jobs = {(r["delivery_id"], r["repo"], r["run_id"], r["job_name"]): r for r in jb
            if r["delivery_id"] not in warm}
    # L1 repos' callbacks are acknowledged and ignored (recorded nowhere).
    completed = {(l["delivery_id"], l["repo"].lower(), l["run_id"], l["job_name"]): l["conclusion"]
                 for l in ok if l["status"] == "completed" and l.get("outcome") != "ignored"}
    lost_wd = [d for d in acked if d not in wd_ids]
    lost_ds = [p for p in seen if p not in ds_pairs]
    lost_jobs = [k for k, c in completed.items()
                 if k not in jobs or jobs[k]["status"] != "completed" or jobs[k]["conclusion"] != c]
    dup4 = (sum(n - 1 for n in wd_ids.values() if n > 1) + sum(n - 1 for n in ds_pairs.values() if n > 1)
            + sum(int(r["n"]) - 1 for r in jobs.values() if int(r["n"]) > 1))
    stages.append({"stage": "ClickHouse rows after FINAL", "attempted": len(acked) + len(seen) + len(completed),
                   "acknowledged": len(wd_ids) + len(ds_pairs) + len(jobs),
                   "lost": len(lost_wd) + len(lost_ds) + len(lost_jobs), "duplicated": dup4,
                   "note": f"webhook_deliveries {len(wd_ids)}/{len(acked)}, dispatches {len(ds_pairs)}/{len(seen)}, "
                           f"completed jobs {len(completed) - len(lost_jobs)}/{len(completed)}",
                   "lost_ids": [str(x) for x in (lost_wd + lost_ds + lost_jobs)[:20]]})
    return stages, dup_webhooks


def verdict(stages):
    problems = []
    for s in stages:
        if s["lost"]:
            problems.append(f"{s['stage']}: {s['lost']} lost")
    if stages[1].get("duplicated_unmarked"):
        problems.append(f"{stages[1]['stage']}: {stages[1]['duplicated_unmarked']} pairs called again without "
                        f"the repeated mark")
    if stages[1].get("unexpected_pairs"):
        problems.append(f"{stages[1]['stage']}: {stages[1]['unexpected_pairs']} pairs no payload fans out to")
    if stages[2].get("unanswered_dispatches"):
        problems.append(f"the downstream did not answer {stages[2]['unanswered_dispatches']} dispatches: the "
                        f"callbacks stage covers only part of the run")
    if stages[2]["duplicated"]:
        problems.append(f"{stages[2]['stage']}: {stages[2]['duplicated']} transitions recorded twice")
    if stages[3]["duplicated"]:
        problems.append(f"{stages[3]['stage']}: {stages[3]['duplicated']} duplicate rows after FINAL")
    return problems


def report(args, stages, faults, load, problems, started, elapsed, kills_total):
    cpu = ""
    try:
        cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    except Exception:
        pass
    out = []
    out.append(f"Run {started:%Y-%m-%dT%H:%MZ}, {elapsed / 60:.1f} minutes, on {os.cpu_count()} cores ({cpu}), "
               f"{platform.system()} {platform.release()}; commit {sh('git', '-C', ROOT, 'rev-parse', '--short', 'HEAD')}.")
    out.append(f"Command: `tools/chaos/run --duration {args.duration} --rate {args.rate} --kill-every "
               f"{args.kill_every} --clickhouse-stop {args.clickhouse_stop} --seed {args.seed}"
               + (f" --min-kills {args.min_kills}" if getattr(args, "min_kills", None) is not None else "") + "`")
    out.append("")
    answers = ", ".join(f"{k or 'no answer'}: {v}" for k, v in sorted(load.answers.items()))
    out.append(f"Load: {len(load.sent)} signed pull_request webhooks at {args.rate}/s ({load.retries} retries; "
               f"answers: {answers}).")
    kills = ", ".join(f"{k} {v}" for k, v in sorted(faults.kills.items()))
    out.append(f"Faults: {kills_total} SIGKILLs ({kills}); "
               + "; ".join(f"t+{t:.0f}s {w}" for t, w in faults.events) + ".")
    out.append("")
    out.append("| stage | attempted | acknowledged | lost | duplicated | notes |")
    out.append("|---|---:|---:|---:|---:|---|")
    for s in stages:
        notes = s.get("note", "")
        if "duplicated_marked_repeated" in s:
            notes = (f"{s['duplicated_marked_repeated']} repeated calls, each marked repeated (in flight at a kill); "
                     f"{s['duplicated_unmarked']} unmarked")
        if "retried" in s:
            notes += f"; {s['retried']} callbacks needed retries; answers {s['outcomes']}"
        out.append(f"| {s['stage']} | {s['attempted']} | {s['acknowledged']} | {s['lost']} | {s['duplicated']} | {notes} |")
    out.append("")
    if problems:
        verdict_text = "**FAIL**: " + "; ".join(problems)
    else:
        verdict_text = "**pass**: nothing acknowledged was lost; every duplicate is one the design allows."
    out.append("Verdict: " + verdict_text)
    text = "\n".join(out)
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
