"""The two floods' figures side by side (the room off, then on) from their JSON reports (argv 1,
2), and the room's targets (e2e/lib.sh flood_summary)."""
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
def f(r, k, fmt="{:.0f}"):
    v = r["flood"].get(k)
    return "?" if v is None else fmt.format(v)
def eta(r, k):
    e = r["flood"].get("eta")
    return "-" if e is None else "{:+.1f} %".format(e[k] * 100)
def share(r):
    s = r["flood"]["share"]
    return "{:.1f} % of winners ({} of {})".format(100 * s["script_winners"] / max(s["winners"], 1), s["script_winners"], s["winners"])
rows = [
    ("peak EVALSHA/s (every script)", f(off, "evalsha_peak"), f(on, "evalsha_peak")),
    ("EVALSHA/s before the flood", f(off, "evalsha_before"), f(on, "evalsha_before")),
    ("peak reserve.lua calls/s", f(off, "reserve_calls_peak"), f(on, "reserve_calls_peak")),
    ("peak reservations/s (stock)", f(off, "reservations_peak"), f(on, "reservations_peak")),
    ("p99 of QUEUED answers, ms", f(off, "queued_p99_ms", "{:.1f}"), f(on, "queued_p99_ms", "{:.1f}")),
    ("last token, s after the start", f(off, "last_token_secs", "{:.2f}"), f(on, "last_token_secs", "{:.2f}")),
    ("ETA error p50", eta(off, "p50"), eta(on, "p50")),
    ("ETA error p99", eta(off, "p99"), eta(on, "p99")),
    ("ETA error max", eta(off, "max"), eta(on, "max")),
    ("ETA error beyond ±20 %", eta(off, "beyond_20"), eta(on, "beyond_20")),
    ("scripts at T-0 ({} % of the crowd)".format(on["flood"]["script_percent"]), share(off), share(on)),
    ("token refusals", json.dumps(off["token_refusals"]), json.dumps(on["token_refusals"])),
    ("invariants", "PASS" if all(v["ok"] for v in off["verdicts"]) else "FAIL",
                   "PASS" if all(v["ok"] for v in on["verdicts"]) else "FAIL"),
]
print("== the flood: {} accounts, stock {}, room off beside room on (admit_per_sec {}) ==".format(
    on["flood"]["accounts"], on["checks"]["total_stock"], on["flood"]["admit_per_sec"]))
print("{:<36} {:>26} {:>26}".format("", "room off", "room on"))
for name, a, b in rows:
    print("{:<36} {:>26} {:>26}".format(name, a, b))
print("targets, room on (a miss is reported, not a failed sale):")
for t in on["flood"]["targets"]:
    print("  [{}] {}: {}".format("PASS" if t["met"] else "MISS", t["name"], t["detail"]))
print("invariants, both sales:")
for name, r in (("off", off), ("on", on)):
    for v in r["verdicts"]:
        print("  [{}] room {}: {}".format("PASS" if v["ok"] else "FAIL", name, v["name"]))
