"""The sold-out answer beside the floor, round by round (bench/gateway.sh): reads lines of
"gateway-answers/s gateway-us-per-answer floor-answers/s floor-us-per-answer" and prints the
medians of each figure and of the two ratios by round, each round's ratios, and the verdicts
against the targets (answers/s >= 0.9 of the floor's, CPU per answer <= 1.5x the floor's)."""
import statistics
import sys

rows = [[float(x) for x in line.split()] for line in open(sys.argv[1]) if line.strip()]
if not rows:
    sys.exit("no rounds")
med = lambda i: statistics.median(r[i] for r in rows)
answers = [r[0] / r[2] for r in rows]
cpu = [r[1] / r[3] for r in rows]
by_round = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
verdict = lambda ok: "ok" if ok else "MISSED"
print(f"(b) beside (e), alternating, {len(rows)} rounds (medians): gateway {med(0):.0f} answers/s at"
      f" {med(1):.1f} us each, floor {med(2):.0f} answers/s at {med(3):.1f} us each")
a, c = statistics.median(answers), statistics.median(cpu)
print(f"  answers/s (b)/(e) = {a:.2f} (by round: {by_round(answers)})   target >= 0.9: {verdict(a >= 0.9)}")
print(f"  CPU per answer (b)/(e) = {c:.2f} (by round: {by_round(cpu)})   target <= 1.5: {verdict(c <= 1.5)}")
