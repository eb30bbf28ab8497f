#!/usr/bin/env python3
"""Writes large contended scenarios for `allot simulate`.

    gen_scenario.py contended OUT NODES TEAMS WORKLOADS [SEED] [--unequal] [--mixed] [--pinned] [--long-gangs] [--racks]
                    [--departments=N]
    gen_scenario.py kueue-baseline OUT

`contended` has the knobs of shared/bench/gen_contended.py and, without options, writes the same
file for the same arguments: 8-GPU p5 nodes, teams with equal LendAndBorrow quotas (borrow limit
100 %), four priority classes, jobs of 1 to 64 GPUs arriving over an hour, each running 1 minute
to 3 hours. The options add what real clusters have and that generator lacks:
  --unequal     team quotas of very different sizes (weights 1:2:4:8 of the nodes)
  --mixed       three instance types (p5 8-GPU, p4d 8-GPU, g5 1-GPU nodes); jobs pin none, so
                every team's quota spans the three flavors, in that order
  --pinned      --mixed, with every job pinned to one type, as jobs that name their instance
                type are: 1-GPU jobs on g5, the others on p5 or p4d by turns (the same jobs)
  --long-gangs  one job in ten is an 8-node gang running 6 to 12 hours (past the horizon)
  --racks       p5 nodes in racks of 8 (topology level `rack`), and every multi-node gang
                requires one rack (the same jobs: no random draw is added)
  --departments=N  the teams in N departments (team i in dept-(i mod N)) under one cohort
                `org`: a tree of cohorts (the same jobs)

`kueue-baseline` is Kueue's scheduler performance baseline (test/performance/scheduler,
configs/baseline): 5 cohorts of 6 queues (here teams), 20 cpu of nominal quota each, borrowing
limit 100, reclaim Any, LowerPriority within the team; 500 one-pod workloads per queue: 350
small (1 cpu, 200 ms, priority 50, one every 100 ms), 100 medium (5 cpu, 500 ms, priority 100,
one every 500 ms), 50 large (20 cpu, 1 s, priority 200, one every 1.2 s). Quota only (no nodes),
as Kueue's test runs without nodes.
"""
import random
import sys

CLASSES = [("inference", 90), ("experimentation", 80), ("training", 70), ("fine-tuning", 50)]


def contended(out, nodes, teams, wls, seed, unequal=False, mixed=False, long_gangs=False,
              pinned=False, racks=False, departments=0):
    rng = random.Random(seed)
    horizon = 3600
    with open(out, "w") as f:
        f.write("version: 1\npolicy:\n  priority_classes:\n")
        for n, w in CLASSES:
            f.write(f"    - {{name: {n}, weight: {w}}}\n")
        f.write("  fair_share: Enabled\n")
        if mixed:
            # Half the nodes p5, a quarter p4d, and eight g5 (1 GPU) per remaining quarter node.
            p5, p4 = nodes // 2, nodes // 4
            g5 = (nodes - p5 - p4) * 8
            types = [("ml.p5.48xlarge", p5), ("ml.p4d.24xlarge", p4), ("ml.g5.8xlarge", g5)]
            f.write("nodes:\n")
            for t, c in types:
                f.write(f"  - {{name_prefix: {t.split('.')[1]}-, count: {c}, instance_type: {t}}}\n")
        else:
            types = [("ml.p5.48xlarge", nodes)]
            topo = ', topology: {rack: "r{i/8}"}' if racks else ""
            f.write(f"nodes:\n  - {{name_prefix: p5-, count: {nodes}, instance_type: ml.p5.48xlarge{topo}}}\n")
        if departments:
            f.write("cohorts:\n  - {name: org, parent: null}\n")
            for d in range(departments):
                f.write(f"  - {{name: dept-{d}, parent: org}}\n")
        f.write("teams:\n")
        if unequal:
            parts = [[1, 2, 4, 8][t % 4] for t in range(teams)]
        else:
            parts = [1] * teams
        total = sum(parts)
        for t in range(teams):
            weight = rng.choice([10, 50, 100])
            rows = []
            for it, count in types:
                share = count * parts[t] // total if (unequal or mixed) else count // teams
                if share > 0:
                    rows.append(f"{{InstanceType={it},Count={share}}}")
            if not rows:
                rows.append(f"{{InstanceType={types[0][0]},Count=1}}")
            dept = f"cohort: dept-{t % departments}, " if departments else ""
            f.write(f"  - {{name: team-{t:03d}, {dept}fair_share_weight: {weight}, compute_quota: "
                    f"\"ComputeQuotaResources=[{','.join(rows)}],"
                    f"ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}},PreemptTeamTasks=LowerPriority\"}}\n")
        f.write("workloads:\n")
        for i in range(wls):
            team = rng.randrange(teams)
            kind = rng.random()
            if kind < 0.55:
                count, gpu = 1, rng.choice([1, 1, 2, 4])
            elif kind < 0.9:
                count, gpu = 1, 8
            else:
                count, gpu = rng.choice([2, 4, 8]), 8
            cls = rng.choice(CLASSES)[0]
            t = rng.randrange(horizon)
            dur = rng.randrange(60, 3 * horizon)
            if long_gangs and i % 10 == 0:
                count, gpu, dur = 8, 8, rng.randrange(6 * 3600, 12 * 3600)
            if mixed and gpu == 1 and count == 1:
                # 1-GPU jobs fit the g5 nodes (32 vCPU, 128 GiB).
                cpu, mem = 8, 32
            else:
                cpu, mem = gpu * 20, gpu * 200
            pin = ""
            if pinned:
                # No random draw here: the jobs are --mixed's, pinned.
                if gpu == 1 and count == 1:
                    pin = "instance_type: ml.g5.8xlarge, "
                else:
                    pin = f"instance_type: {'ml.p5.48xlarge' if i % 2 == 0 else 'ml.p4d.24xlarge'}, "
            ask = "topology: {required: rack}, " if racks and count > 1 else ""
            f.write(f"  - {{name: w{i:06d}, team: team-{team:03d}, priority: {cls}, submit_at: {t}, duration: {dur}, "
                    f"count: {count}, {pin}{ask}requests: {{gpu: {gpu}, cpu: {cpu}, memory: {mem}Gi}}}}\n")
        f.write(f"until: {horizon * 4}\n")


def kueue_baseline(out):
    classes = [  # name, per queue, every (s), runtime (s), priority, cpu
        ("small", 350, 0.1, 0.2, 50, 1),
        ("medium", 100, 0.5, 0.5, 100, 5),
        ("large", 50, 1.2, 1.0, 200, 20),
    ]
    with open(out, "w") as f:
        f.write("version: 1\npolicy:\n  fair_share: Disabled\nteams:\n")
        for c in range(5):
            for q in range(6):
                f.write(f"  - name: cq-{c}-{q}\n    cohort: cohort-{c}\n    quota:\n"
                        f"      default: {{cpu: {{nominal: 20, borrowing_limit: 100}}}}\n"
                        f"    preemption: {{within_team: LowerPriority, reclaim_within_cohort: Any,"
                        f" borrow_within_cohort: {{policy: Never}}}}\n")
        f.write("workloads:\n")
        for c in range(5):
            for q in range(6):
                for name, n, every, runtime, prio, cpu in classes:
                    for i in range(n):
                        f.write(f"  - {{name: {name}-{c}-{q}-{i}, team: cq-{c}-{q}, priority: {prio}, "
                                f"submit_at: {round(i * every, 3)}, duration: {runtime}, "
                                f"requests: {{cpu: {cpu}}}}}\n")


def main(argv):
    if len(argv) >= 2 and argv[0] == "kueue-baseline":
        kueue_baseline(argv[1])
    elif len(argv) >= 5 and argv[0] == "contended":
        flags = {a for a in argv[1:] if a.startswith("--")}
        pos = [a for a in argv[1:] if not a.startswith("--")]
        departments = 0
        for a in [a for a in flags if a.startswith("--departments=")]:
            flags.discard(a)
            value = a.split("=", 1)[1]
            if not value.isdigit() or int(value) < 1:
                sys.exit(f"{a}: expected a number of departments of at least 1 (--departments=2)")
            departments = int(value)
        unknown = flags - {"--unequal", "--mixed", "--pinned", "--long-gangs", "--racks"}
        if unknown:
            sys.exit(f"unknown option(s) {sorted(unknown)}; use --unequal, --mixed, --pinned, "
                     "--long-gangs, --racks, --departments=N")
        if "--racks" in flags and ("--mixed" in flags or "--pinned" in flags):
            sys.exit("--racks puts p5 nodes in racks; it does not go with --mixed or --pinned")
        out, nodes, teams, wls = pos[0], int(pos[1]), int(pos[2]), int(pos[3])
        seed = int(pos[4]) if len(pos) > 4 else 7
        pinned = "--pinned" in flags
        contended(out, nodes, teams, wls, seed, "--unequal" in flags,
                  "--mixed" in flags or pinned, "--long-gangs" in flags, pinned, "--racks" in flags,
                  departments)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
