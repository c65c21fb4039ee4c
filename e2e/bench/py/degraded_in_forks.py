"""Where a sale's SERVICE_DEGRADED answers fell against Redis's persistence forks.

Usage: python3 e2e/bench/py/degraded_in_forks.py GATEWAY_LOG REDIS_LOG [SLACK_S]

GATEWAY_LOG is a gateway's log (`.stack/demo/gateway.log`: a line per SERVICE_DEGRADED, with its
cause), REDIS_LOG the stack's Redis log (`.stack/redis/redis.log`). A fork is a background save
(`Background saving started` .. `terminated`) or an append-only file rewrite (`Background append
only file rewriting started` .. `rewrite finished`); an answer is in one when it came from its
start to SLACK_S (default 0.5) seconds past its end. Prints the answers by cause, how many fell
in a fork, and each fork of the gateway log's span with its length and the answers in it (an answer in two, in the first).
Timestamps are the logs' own, both UTC.
"""
import re
import sys
from collections import Counter
from datetime import datetime, timezone


def seconds(day, clock):
    """Seconds since the epoch of a UTC `day` (a datetime format's result) and `HH:MM:SS.ffff`."""
    h, m, s = clock.split(":")
    return day.replace(tzinfo=timezone.utc).timestamp() + int(h) * 3600 + int(m) * 60 + float(s)


def gateway_answers(path):
    """(time, cause) of each SERVICE_DEGRADED line."""
    out = []
    for line in open(path, errors="replace"):
        if "SERVICE_DEGRADED" not in line:
            continue
        m = re.match(r"\S*?(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d\.\d+)", line)
        if not m:
            continue
        cause = re.search(r"error=(.*)$", line)
        cause = re.sub(r"\d+ms", "Nms", cause.group(1).strip()) if cause else "?"
        out.append((seconds(datetime.strptime(m[1], "%Y-%m-%d"), m[2]), cause))
    return out


def redis_forks(path):
    """(start, end, kind) of each fork in the Redis log."""
    forks, open_at = [], {}
    starts = {"Background saving started": "save", "Background append only file rewriting started": "aof"}
    ends = {"Background saving terminated": "save", "Background AOF rewrite finished": "aof"}
    for line in open(path, errors="replace"):
        m = re.search(r"(\d\d \w{3} \d{4}) (\d\d:\d\d:\d\d\.\d+)", line)
        if not m:
            continue
        t = seconds(datetime.strptime(m[1], "%d %b %Y"), m[2])
        for text, kind in starts.items():
            if text in line:
                open_at[kind] = t
        for text, kind in ends.items():
            if text in line and kind in open_at:
                forks.append((open_at.pop(kind), t, kind))
    return forks


def main():
    answers, forks = gateway_answers(sys.argv[1]), redis_forks(sys.argv[2])
    slack = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
    causes = Counter(c for _, c in answers)
    print(f"SERVICE_DEGRADED: {len(answers)}" + "".join(f"; {n} {c}" for c, n in causes.most_common()))
    if not answers:
        return
    lo, hi = min(t for t, _ in answers) - 120, max(t for t, _ in answers) + 120
    inside = sum(1 for t, _ in answers if any(s <= t <= e + slack for s, e, _ in forks))
    near = [(s, e, kind) for s, e, kind in forks if lo <= s <= hi]
    forked = (f"Redis forked {len(near)} times within 2 minutes of them (each answer in its first):"
              if near else "Redis did not fork within 2 minutes of them")
    print(f"in a Redis fork (to {slack} s past its end): {inside} of {len(answers)}; {forked}")
    left = [t for t, _ in answers]
    for s, e, kind in near:
        n = sum(1 for t in left if s <= t <= e + slack)
        left = [t for t in left if not s <= t <= e + slack]
        clock = datetime.fromtimestamp(s, timezone.utc).strftime("%H:%M:%S.%f")[:11]
        print(f"  {clock} {kind:4} fork {e - s:5.2f} s: {n} SERVICE_DEGRADED")


if __name__ == "__main__":
    main()
