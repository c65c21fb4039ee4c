"""CPU ticks of each thread name of process argv[1], threads of one name summed, as
"name=ticks" words on one line (e2e/bench/lib.sh thread_ticks)."""
import os, sys, collections
pid, ticks = sys.argv[1], collections.Counter()
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
    except OSError:
        continue
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    ticks[name.replace(" ", "_")] += int(rest[11]) + int(rest[12])
print(" ".join(f"{k}={v}" for k, v in sorted(ticks.items())))
