-- Rollup windows to recompute: marked at or after their last computation began (migration 0002 explains the protocol).
-- computed: when the last computation began (ms; 0: never), so a busy window can be recomputed at most every stats.rollup_window_interval.
SELECT kind, day, repo, computed
FROM
(
    SELECT kind, day, repo, max(marked_at_ms) AS marked
    FROM rollup_marks
    GROUP BY kind, day, repo
) AS marks
ANY LEFT JOIN
(
    SELECT kind, day, repo, max(computed_from_ms) AS computed
    FROM rollup_state
    GROUP BY kind, day, repo
) AS state USING (kind, day, repo)
WHERE marked >= computed
ORDER BY day, repo, kind
