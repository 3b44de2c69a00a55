"""The named queries' shared expressions (deploy/clickhouse/fragments): a
query writes {{name}} where fragments/<name>.sql's expression goes, so a rule
several queries share (how a job is classed, its end-to-end seconds) is
written once. relay-stats substitutes them when it embeds the queries
(services/stats/EmbedSql.cmake); the Python tools that read the query files
(check-sql, make-dashboards, stats-query-bench) call expand()."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAGMENTS = os.path.join(ROOT, "deploy", "clickhouse", "fragments")


def fragment(name):
    """fragments/<name>.sql without its comment lines, stripped."""
    with open(os.path.join(FRAGMENTS, name + ".sql"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


def expand(sql):
    """`sql` with every {{name}} replaced by its fragment; ValueError naming
    one that has no file."""
    def sub(m):
        path = os.path.join(FRAGMENTS, m.group(1) + ".sql")
        if not os.path.exists(path):
            raise ValueError(f"{{{{{m.group(1)}}}}}: no {os.path.relpath(path, ROOT)}")
        return fragment(m.group(1))
    return re.sub(r"\{\{(\w+)\}\}", sub, sql)
