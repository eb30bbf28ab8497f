#!/usr/bin/env python3
"""The price and the gain of the stability rules, from one `allot simulate --output json` run.

    churn.py SCENARIO.yaml OUTCOME.json [--json]

Prints, for the run:
- preemptions per workload: the most any one suffered, the mean over every workload and over
  those preempted at least once, and how many were preempted more than 5 and 10 times;
- run time thrown away: the sum over preemptions of the time from the victim's admission to
  its preemption (GPU-hours, and hours of wall time), and the share of all GPU time used;
- fair-share accuracy: per team, GPU time used above its nominal quota per unit of
  fair-share weight, over the teams that borrowed at all; the spread of these (max/min, and
  the mean absolute deviation from their mean, in percent of it) is 0 when borrowed capacity
  was split exactly by weight;
- the mean wait from submit to first admission, and the makespan.

The nominal quota of a team is read from its `compute_quota` shorthand (`InstanceType=...,
Count=N`, as `gen_scenario.py` writes it), with the GPUs per instance type below.
"""
import json
import re
import sys

GPUS = {
    "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8,
    "ml.p5en.48xlarge": 8,
    "ml.p4d.24xlarge": 8,
    "ml.p4de.24xlarge": 8,
    "ml.g5.8xlarge": 1,
    "ml.g5.12xlarge": 4,
    "ml.g5.48xlarge": 8,
}


def teams_of(scenario_path):
    """Team -> (weight, nominal GPUs), from the scenario's `teams:` lines."""
    out = {}
    for line in open(scenario_path):
        m = re.match(r"\s*- \{name: ([\w-]+), fair_share_weight: (\d+), compute_quota: \"(.*)\"\}", line)
        if not m:
            continue
        name, weight, quota = m.group(1), int(m.group(2)), m.group(3)
        gpus = 0
        for it, count in re.findall(r"InstanceType=([\w.]+),Count=(\d+)", quota):
            if it not in GPUS:
                sys.exit(f"{scenario_path}: instance type {it} has no GPU count here; known: {', '.join(GPUS)}")
            gpus += GPUS[it] * int(count)
        out[name] = (weight, gpus)
    if not out:
        sys.exit(f"{scenario_path}: no team lines of gen_scenario.py's form found")
    return out


def gpus_of(event):
    return sum(len(p.get("devices", {}).get("gpu", [])) for p in event.get("placement", []))


def report(scenario_path, outcome_path):
    teams = teams_of(scenario_path)
    o = json.load(open(outcome_path))
    events = o["events"]
    running = {}  # workload -> (team, gpus, admitted at)
    submitted, first_admit = {}, {}
    usage = {t: 0 for t in teams}  # GPUs in use now
    above = {t: 0.0 for t in teams}  # GPU-seconds above nominal
    used_total = 0.0
    lost_gpu_s, lost_s = 0.0, 0.0
    last_t = 0.0

    def advance(t):
        nonlocal last_t, used_total
        dt = t - last_t
        if dt > 0:
            for team, u in usage.items():
                above[team] += max(0, u - teams[team][1]) * dt
                used_total += u * dt
            last_t = t

    for e in events:
        t = float(e["t"])
        advance(t)
        w, kind = e.get("workload"), e["type"]
        if kind == "submitted":
            submitted[w] = t
        elif kind == "admitted":
            g = gpus_of(e)
            running[w] = (e["team"], g, t)
            usage[e["team"]] += g
            first_admit.setdefault(w, t)
        elif kind in ("preempted", "evicted", "finished"):
            if w not in running:
                continue
            team, g, since = running.pop(w)
            usage[team] -= g
            if kind == "preempted":
                lost_gpu_s += g * (t - since)
                lost_s += t - since
    final = o["final"]["workloads"]
    counts = [v.get("preemptions", 0) for v in final.values()]
    preempted = [c for c in counts if c > 0]
    borrowers = {t: above[t] / w for t, (w, _) in teams.items() if above[t] > 0 and w > 0}
    vals = list(borrowers.values())
    mean = sum(vals) / len(vals) if vals else 0.0
    waits = [first_admit[w] - submitted[w] for w in first_admit if w in submitted]
    return {
        "workloads": len(counts),
        "preemptions": sum(counts),
        "max_preemptions": max(counts, default=0),
        "mean_preemptions": sum(counts) / len(counts) if counts else 0.0,
        "mean_preemptions_of_preempted": sum(preempted) / len(preempted) if preempted else 0.0,
        "preempted_over_5": sum(1 for c in counts if c > 5),
        "preempted_over_10": sum(1 for c in counts if c > 10),
        "lost_gpu_hours": lost_gpu_s / 3600,
        "lost_run_hours": lost_s / 3600,
        "lost_share_of_gpu_time": lost_gpu_s / used_total if used_total else 0.0,
        "borrowing_teams": len(vals),
        "share_spread_max_over_min": (max(vals) / min(vals)) if vals and min(vals) > 0 else None,
        "share_mean_abs_dev_pct": (100 * sum(abs(v - mean) for v in vals) / len(vals) / mean) if mean else 0.0,
        "mean_wait_s": sum(waits) / len(waits) if waits else 0.0,
        "makespan_s": float(o["final"]["time"]),
    }


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    r = report(*args)
    if "--json" in sys.argv:
        print(json.dumps(r))
        return
    spread = r["share_spread_max_over_min"]
    print(
        f"preemptions {r['preemptions']} over {r['workloads']} workloads: max {r['max_preemptions']} per workload, "
        f"mean {r['mean_preemptions']:.2f} ({r['mean_preemptions_of_preempted']:.2f} over those preempted), "
        f"{r['preempted_over_5']} over 5, {r['preempted_over_10']} over 10\n"
        f"run time thrown away: {r['lost_gpu_hours']:.1f} GPU-hours ({100 * r['lost_share_of_gpu_time']:.1f} % of GPU time used), "
        f"{r['lost_run_hours']:.1f} h of workload time\n"
        f"fair share (GPU time above nominal per weight, {r['borrowing_teams']} borrowing teams): "
        f"max/min {spread if spread is None else round(spread, 2)}, mean deviation {r['share_mean_abs_dev_pct']:.1f} %\n"
        f"mean wait to first admission {r['mean_wait_s']:.0f} s, makespan {r['makespan_s']:.0f} s"
    )


if __name__ == "__main__":
    main()
