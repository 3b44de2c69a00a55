#!/usr/bin/python3
"""relay's CI HUD in a real browser, against a running stack's data.

Drives Debian's Chromium (chromium, chromium-driver) through Debian's
python3-selenium, headless; nothing is downloaded. It

  - loads every page (the commit grid, its filters and paging, tier health,
    cluster cost, a repository over 14 and 30 days, a test's history) and
    fails on anything the page logs to the browser console;
  - checks the grid against ClickHouse, cell by cell: the commits and their
    order, the repositories each commit was dispatched to, and every job's
    id, conclusion and failed-test count;
  - checks that every chart was drawn by Chart.js with the number of points
    ClickHouse says it should have;
  - asks for pages with bad parameters (unknown repository, malformed PR
    number, injection attempts) and wants a 400 or an empty page, never a
    500;
  - takes screenshots of the grid and of a repository page (--screenshots).

The expected values come from this file's own SQL on relay's tables, not
from the named queries the pages use.

  /usr/bin/python3 tests/hud/browser_test.py --hud URL --clickhouse URL
      [--database relay] [--screenshots DIR]

Prints one line per check; exits 1 when any failed, 2 on a usage or
environment error.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    sys.exit("browser_test: python3-selenium is missing (tools/install-deps installs it); "
             "run this with Debian's /usr/bin/python3")

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {what}" + (f": {detail}" if detail else ""), flush=True)
        return ok


class ClickHouse:
    def __init__(self, url, database):
        self.url = url.rstrip("/") + "/?" + urllib.parse.urlencode({"database": database})

    def rows(self, sql):
        req = urllib.request.Request(self.url, data=(sql + "\nFORMAT JSON").encode())
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)["data"]


def quote(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1600,1100", "--force-device-scale-factor=1"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)


def load(driver, c, url, what):
    """Loads a page; checks that it is a page of the HUD and not an error
    page, that every chart was drawn, and that the console stayed silent."""
    driver.get(url)
    # hud.js draws charts on DOMContentLoaded; wait until every canvas is drawn.
    drawn = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const t0 = Date.now();"
        "(function wait() {"
        "  const c = [...document.querySelectorAll('canvas')];"
        "  if (document.readyState === 'complete' && c.every(x => x.dataset.drawn === '1')) return done(true);"
        "  if (Date.now() - t0 > 10000) return done(false);"
        "  setTimeout(wait, 50);"
        "})();")
    logs = driver.get_log("browser")
    errors = driver.find_elements(By.CSS_SELECTOR, "p.error")
    c.check("relay HUD" in driver.title and not errors and drawn, f"{what}: loads ({driver.title})",
            (errors[0].text if errors else "charts not drawn in 10 s" if not drawn else driver.page_source[:300]))
    c.check(not logs, f"{what}: nothing in the browser console", "; ".join(m["message"] for m in logs[:5]))


def expected_conclusion(job):
    if int(job["timed_out_by_sweeper"]):
        return "timed_out"
    return job["conclusion"] if job["status"] == "completed" else job["status"]


def check_grid(driver, c, ch, hud, query="", what="grid"):
    load(driver, c, hud + query, what)
    rows = driver.find_elements(By.CSS_SELECTOR, "table.grid tbody tr")
    page = [(r.get_attribute("data-upstream"), r.get_attribute("data-sha")) for r in rows]
    return rows, page


def grid_matches_clickhouse(driver, c, ch, hud):
    rows, page = check_grid(driver, c, ch, hud)
    # A commit's dispatches, and those it superseded (never sent: coalesced).
    want = ch.rows("""
        SELECT upstream_repo, head_sha, min(at) AS first
        FROM (SELECT upstream_repo, head_sha, dispatched_at AS at FROM dispatches FINAL
              WHERE head_sha != '' AND dispatched_at >= now() - 30 * 86400
              UNION ALL
              SELECT upstream_repo, head_sha, superseded_at AS at FROM superseded_dispatches FINAL
              WHERE head_sha != '' AND superseded_at >= now() - 30 * 86400)
        GROUP BY upstream_repo, head_sha
        ORDER BY first DESC, upstream_repo, head_sha LIMIT 20""")
    c.check(page == [(w["upstream_repo"], w["head_sha"]) for w in want] and page,
            f"grid: the {len(want)} newest upstream commits, newest first",
            f"page {page[:3]}..., ClickHouse {[(w['upstream_repo'], w['head_sha']) for w in want[:3]]}...")
    shas = ",".join(quote(s) for _, s in page) or "''"
    targets = {(t["upstream_repo"], t["head_sha"], t["downstream_repo"]) for t in ch.rows(
        f"SELECT DISTINCT upstream_repo, head_sha, downstream_repo FROM dispatches FINAL WHERE head_sha IN ({shas})")}
    superseded = {(t["upstream_repo"], t["head_sha"], t["downstream_repo"]) for t in ch.rows(
        f"SELECT DISTINCT upstream_repo, head_sha, downstream_repo FROM superseded_dispatches FINAL "
        f"WHERE head_sha IN ({shas})")} - targets
    targets |= superseded
    jobs = {}
    for j in ch.rows(f"""
            SELECT upstream_repo, head_sha, downstream_repo, id, status, conclusion, timed_out_by_sweeper,
                   failed_tests
            FROM crcr_workflow_job FINAL WHERE head_sha IN ({shas})"""):
        jobs.setdefault((j["upstream_repo"], j["head_sha"], j["downstream_repo"]), {})[j["id"]] = j
    cells = mismatches = job_count = 0
    seen = set()
    for r, (up, sha) in zip(rows, page):
        for td in r.find_elements(By.CSS_SELECTOR, "td.cell[data-repo]"):
            key = (up, sha, td.get_attribute("data-repo"))
            seen.add(key)
            cells += 1
            shown = {}
            for a in td.find_elements(By.CSS_SELECTOR, "a.job"):
                shown[a.get_attribute("data-job-id")] = (a.get_attribute("data-conclusion"), a.get_attribute("title"))
            expected = jobs.get(key, {})
            job_count += len(shown)
            ok = set(shown) == set(expected)
            for jid, (conclusion, title) in shown.items():
                j = expected.get(jid)
                ok = ok and j is not None and conclusion == expected_conclusion(j) and \
                    f", {j['failed_tests']} failed tests" in title
            # A repository dispatched to without a job yet shows a waiting mark;
            # one the commit was never sent to (superseded), a superseded mark.
            if not expected:
                mark = "span.job.superseded" if key in superseded else "span.job.waiting"
                ok = ok and bool(td.find_elements(By.CSS_SELECTOR, mark))
            if not ok:
                mismatches += 1
                if mismatches <= 3:
                    print(f"     cell {key}: page {shown}, ClickHouse "
                          f"{ {k: expected_conclusion(v) for k, v in expected.items()} }")
    c.check(cells > 0 and mismatches == 0,
            f"grid: {cells} cells ({job_count} jobs) match ClickHouse job by job (id, conclusion, failed tests)",
            f"{mismatches} cells differ")
    c.check(seen == targets, f"grid: every dispatched (commit, repository) has its cell, and only those "
            f"({len(superseded)} superseded)",
            f"missing {sorted(targets - seen)[:3]}, extra {sorted(seen - targets)[:3]}")
    a = driver.find_elements(By.CSS_SELECTOR, "a.job[href]")
    c.check(a and all(x.get_attribute("href").startswith("http") for x in a),
            "grid: job marks link to their downstream runs")
    return page


def filters_and_paging(driver, c, ch, hud):
    pr = ch.rows("SELECT pr_number, count(DISTINCT head_sha) AS n FROM dispatches FINAL "
                 "WHERE pr_number > 0 GROUP BY pr_number ORDER BY n DESC, pr_number LIMIT 1")
    if pr:
        n = pr[0]["pr_number"]
        rows, page = check_grid(driver, c, ch, hud, f"?pr={n}", f"grid filtered by PR #{n}")
        want = ch.rows(f"""
            SELECT upstream_repo, head_sha, min(dispatched_at) AS first FROM dispatches FINAL
            WHERE head_sha != '' AND dispatched_at >= now() - 30 * 86400
            GROUP BY upstream_repo, head_sha HAVING has(groupUniqArray(pr_number), {int(n)})
            ORDER BY first DESC, upstream_repo, head_sha LIMIT 20""")
        c.check(page == [(w["upstream_repo"], w["head_sha"]) for w in want] and page,
                f"grid filtered by PR #{n}: exactly its {len(want)} commits, newest first", f"{page} vs {want}")
    branch = ch.rows("SELECT visitParamExtractString(payload, 'ref') AS ref FROM webhook_deliveries "
                     "WHERE event = 'pull_request' AND ref != '' "
                     "AND repo IN (SELECT DISTINCT upstream_repo FROM dispatches) ORDER BY delivery_id LIMIT 1")
    if branch:
        b = branch[0]["ref"]
        rows, page = check_grid(driver, c, ch, hud, "?branch=" + urllib.parse.quote(b), f"grid filtered by branch {b}")
        ok = bool(page) and all(b in r.find_elements(By.CSS_SELECTOR, "td")[2].text.split() for r in rows)
        c.check(ok, f"grid filtered by branch {b}: every commit shown is on it ({len(page)})")
    total = int(ch.rows("SELECT count() AS n FROM (SELECT DISTINCT upstream_repo, head_sha FROM dispatches FINAL "
                        "WHERE head_sha != '')")[0]["n"])
    # Pages of one commit, so that paging is exercised on any data.
    newest = [w["head_sha"] for w in ch.rows(
        "SELECT upstream_repo, head_sha, min(dispatched_at) AS first FROM dispatches FINAL WHERE head_sha != '' "
        "GROUP BY upstream_repo, head_sha ORDER BY first DESC, upstream_repo, head_sha LIMIT 2")]
    if total >= 2:
        load(driver, c, hud + "?per_page=1", "grid, one commit a page")
        nxt = driver.find_elements(By.CSS_SELECTOR, "nav.pages a[rel=next]")
        c.check(len(nxt) == 1 and not driver.find_elements(By.CSS_SELECTOR, "nav.pages a[rel=prev]"),
                "grid page 1 links to older commits only")
        nxt[0].click()
        load(driver, c, driver.current_url, "grid page 2 (followed the link)")
        shown = [r.get_attribute("data-sha") for r in driver.find_elements(By.CSS_SELECTOR, "table.grid tbody tr")]
        c.check(shown == newest[1:2], f"grid page 2: the second-newest commit of {total}", f"{shown} vs {newest}")
        c.check(bool(driver.find_elements(By.CSS_SELECTOR, "nav.pages a[rel=prev]")), "grid page 2 links back")


def chart_points(driver):
    return driver.execute_script(
        "return [...document.querySelectorAll('canvas')].map(c => {"
        "  const ch = Chart.getChart(c);"
        "  return {id: c.id, labels: ch ? ch.data.labels.length : -1,"
        "          points: ch ? ch.data.datasets.map(d => d.data.length) : [],"
        "          rendered: ch ? ch.getDatasetMeta(0).data.length : -1};"
        "});")


def repo_pages(driver, c, ch, hud, shots):
    repos = ch.rows("SELECT downstream_repo AS repo, count() AS n FROM crcr_workflow_job FINAL "
                    "WHERE status = 'completed' GROUP BY repo ORDER BY n DESC, repo LIMIT 1")
    if not c.check(bool(repos), "there is a downstream repository with completed jobs"):
        return None
    repo = repos[0]["repo"]
    for days in (14, 30):
        load(driver, c, f"{hud}/repo?name={urllib.parse.quote(repo)}&days={days}", f"repo {repo}, {days} days")
        want = int(ch.rows(f"""
            SELECT count(DISTINCT toDate(completed_at)) AS n FROM crcr_workflow_job FINAL
            WHERE downstream_repo = {quote(repo)} AND status = 'completed'
              AND completed_at >= toDateTime(today() - {days})""")[0]["n"])
        charts = chart_points(driver)
        ok = len(charts) == 3 and all(x["labels"] == want and x["rendered"] == want and
                                      all(p == want for p in x["points"]) for x in charts)
        c.check(ok, f"repo {repo}, {days} days: 3 trend charts drawn with {want} points each (days with results)",
                json.dumps(charts))
        verdict = driver.find_elements(By.CSS_SELECTOR, "table.tiers td.verdict")
        c.check(len(verdict) == 1 and verdict[0].text, f"repo {repo}, {days} days: shows its tier verdict",
                driver.page_source[:200])
        if days == 14 and shots:
            driver.save_screenshot(os.path.join(shots, "hud-repo.png"))
    links = driver.find_elements(By.CSS_SELECTOR, "table.slowest a, table.flaky a")
    return links[0].get_attribute("href") if links else None


def test_page(driver, c, ch, hud, href):
    if not c.check(bool(href), "the repository page links to a test's history"):
        return
    load(driver, c, href, "a test's history")
    q = urllib.parse.parse_qs(urllib.parse.urlparse(href).query)
    name, classname, file = q["name"][0], q.get("classname", [""])[0], q.get("file", [""])[0]
    want = ch.rows(f"""
        SELECT repo, countIf(outcome = 'passed') AS passed, countIf(outcome IN ('failed', 'error')) AS failed,
               countIf(outcome NOT IN ('passed', 'failed', 'error')) AS skipped
        FROM (SELECT DISTINCT upload_id, seq, idx, repo, outcome FROM test_results
              WHERE name = {quote(name)} AND classname = {quote(classname)} AND file = {quote(file)}
                AND day >= today() - 30)
        GROUP BY repo ORDER BY repo""")
    shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
             for tr in driver.find_elements(By.CSS_SELECTOR, "table.summary tbody tr")]
    runs = len(driver.find_elements(By.CSS_SELECTOR, "table.runs tbody tr"))
    expect = [[w["repo"], str(w["passed"]), str(w["failed"]), str(w["skipped"])] for w in want]
    total = sum(int(w["passed"]) + int(w["failed"]) + int(w["skipped"]) for w in want)
    if total <= 500:  # the page lists the newest 500 runs
        c.check(shown == expect, f"test {classname}.{name}: outcomes per repository match ClickHouse",
                f"page {shown}, ClickHouse {expect}")
    c.check(runs == min(total, 500), f"test {classname}.{name}: {runs} runs listed", f"ClickHouse has {total}")
    c.check(bool(driver.find_elements(By.CSS_SELECTOR, "table.files tbody tr")),
            f"test {classname}.{name}: its file's durations")
    # By name alone the page finds the test's file and class (one here).
    title = driver.title
    load(driver, c, f"{hud}/test?name={urllib.parse.quote(name)}", "a test's history by name alone")
    c.check(driver.title == title and len(driver.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")) == runs,
            f"test {name} by name alone: the same page", f"{driver.title!r} vs {title!r}")


def cost_page(driver, c, ch, hud):
    load(driver, c, hud + "/cost", "cluster cost")
    want = ch.rows("SELECT DISTINCT team, node_group FROM cluster_events FINAL "
                   "WHERE kind = 'usage' AND at >= now() - 30 * 86400")
    charts = chart_points(driver)
    c.check(len(charts) == 1 and charts[0]["labels"] == len(want),
            f"cluster cost: one chart with a bar per team and node group ({len(want)})", json.dumps(charts))
    rows = driver.find_elements(By.CSS_SELECTOR, "table.cost tbody tr")
    c.check(len(rows) == len(want), f"cluster cost: {len(want)} rows")


def tiers_page(driver, c, ch, hud):
    load(driver, c, hud + "/tiers", "tier health")
    want = {r["repo"] for r in ch.rows("SELECT DISTINCT downstream_repo AS repo FROM dispatches FINAL")}
    shown = {tr.get_attribute("data-repo") for tr in driver.find_elements(By.CSS_SELECTOR, "table.tiers tbody tr")}
    c.check(shown == want, f"tier health: every repository relay dispatched to ({len(want)})",
            f"missing {want - shown}, extra {shown - want}")


def reflected_values_stay_text(driver, c, hud):
    """What a reader typed comes back in the filter form: as text, never as
    markup (the browser parses the page; no script or element is added)."""
    hostile = '"><script>document.title="pwned"</script><img src=x onerror=alert(1)>'
    load(driver, c, hud + "?branch=" + urllib.parse.quote(hostile), "grid with a hostile branch filter")
    value = driver.find_element(By.CSS_SELECTOR, "form.filters input[name=branch]").get_attribute("value")
    scripts = [s.get_attribute("src") for s in driver.find_elements(By.TAG_NAME, "script")]
    c.check(value == hostile and driver.title != "pwned" and not driver.find_elements(By.CSS_SELECTOR, "img") and
            all(s and "/hud/static/" in s for s in scripts),
            "a hostile filter value comes back as the input's text, adding no element or script",
            f"value {value!r}, title {driver.title!r}, scripts {scripts}")


def bad_parameters(c, hud):
    cases = [
        "/repo?name=nobody/nothing-here", "/repo", "/repo?name=a/b/c", "/repo?name=dev-org%2Fx%27%20OR%201%3D1",
        "/repo?name=%3Cscript%3Ealert(1)%3C/script%3E", "/repo?name=dev-org/l4-cuda&days=abc",
        "/repo?name=dev-org/l4-cuda&days=7", "?pr=abc", "?pr=-1", "/?pr=1e9", "?pr=1%20OR%201%3D1",
        "?page=-3", "?page=99999999999", "?per_page=0", "?upstream=x%27)%20UNION%20SELECT%201--",
        "?branch=%27%3B%20DROP%20TABLE%20dispatches%3B%20--", "?branch=%00", "/test", "/test?name=",
        "/test?name=x%27%20OR%20%271%27%3D%271", "/test?name=ok&days=0", "/cost?days=abc",
        "/cost?team=x%27%20OR%201%3D1", "?pr=%E0%A4%A", "/test?name=" + "a" * 2000,
    ]
    for q in cases:
        status, body = http_get(hud + q)
        empty = status == 200 and 'class="empty"' in body
        reason = status == 400 and 'class="error">parameter' in body or status == 400 and "does not parse" in body
        c.check(empty or reason, f"bad parameter {q[:60]}: {status}" + (" (empty page)" if empty else ""),
                body[-300:])
    status, body = http_get(hud.rsplit("/hud", 1)[0] + "/metrics")
    answered = [l for l in body.splitlines() if l.startswith("relay_stats_hud_requests_total")]
    c.check(status == 200 and answered and not any('code="500"' in l for l in answered),
            "no HUD page answered 500 (relay_stats_hud_requests_total)", "\n".join(answered))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hud", required=True, help="the HUD's URL, e.g. http://127.0.0.1:8080/hud")
    ap.add_argument("--clickhouse", required=True, help="ClickHouse's HTTP URL")
    ap.add_argument("--database", default="relay")
    ap.add_argument("--screenshots", help="directory for hud-grid.png and hud-repo.png")
    a = ap.parse_args()
    for f in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(f):
            sys.exit(f"browser_test: {f} is missing (tools/install-deps installs chromium and chromium-driver)")
    hud = a.hud.rstrip("/")
    ch = ClickHouse(a.clickhouse, a.database)
    if a.screenshots:
        os.makedirs(a.screenshots, exist_ok=True)
    c = Checks()
    driver = browser()
    try:
        grid_matches_clickhouse(driver, c, ch, hud)
        if a.screenshots:
            driver.save_screenshot(os.path.join(a.screenshots, "hud-grid.png"))
        filters_and_paging(driver, c, ch, hud)
        href = repo_pages(driver, c, ch, hud, a.screenshots)
        test_page(driver, c, ch, hud, href)
        tiers_page(driver, c, ch, hud)
        cost_page(driver, c, ch, hud)
        reflected_values_stay_text(driver, c, hud)
        bad_parameters(c, hud)
    finally:
        driver.quit()
    print(f"browser test: {c.passed} passed, {c.failed} failed", flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
