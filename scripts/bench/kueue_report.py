#!/usr/bin/env python3
"""Reads `allot simulate --output json` of the kueue-baseline scenario (gen_scenario.py) on
stdin and prints what Kueue's checker measures: makespan (first to last event), usage of the
queues' nominal cpu over it (Kueue: CPUUsed * 100 / (NominalQuota * elapsed)), and per class
the mean time from creation to admission (first admission), with Kueue's published means."""
import json
import sys
from collections import defaultdict

CPU = {"small": 1, "medium": 5, "large": 20}
KUEUE_MEAN_MS = {"large": 16501, "medium": 76768, "small": 215468}
o = json.load(sys.stdin)
events = o["events"]
first = min(e["t"] for e in events)
last = max(e["t"] for e in events)
submitted, admitted_first, running_since = {}, {}, {}
used = 0.0
for e in events:
    w, t = e.get("workload"), e["t"]
    if w is None:
        continue
    cls = w.split("-")[0]
    if e["type"] == "submitted":
        submitted[w] = t
    elif e["type"] == "admitted":
        admitted_first.setdefault(w, t)
        running_since[w] = t
    elif e["type"] in ("finished", "preempted") and w in running_since:
        used += CPU[cls] * (t - running_since.pop(w))
nominal = 30 * 20
makespan = last - first
print(f"makespan {makespan:.1f} s (Kueue's wall: 351.1 s mean, threshold 425 s)")
print(f"usage {100 * used / (nominal * makespan):.1f} % of nominal (Kueue: 55.9 % mean with equivalence hashing, 58.7 % without; threshold >= 50 %)")
waits = defaultdict(list)
for w, t in admitted_first.items():
    waits[w.split("-")[0]].append(t - submitted[w])
for cls in ("large", "medium", "small"):
    xs = waits[cls]
    print(f"{cls}: {len(xs)} admitted, mean time to admission {1000 * sum(xs) / len(xs):,.0f} ms (Kueue: {KUEUE_MEAN_MS[cls]:,} ms)")
print(f"compute: {o['stats']['wall_ms'] / 1000:.1f} s wall, {o['stats']['cycles']} cycles, {o['stats']['preempted']} preemptions")
