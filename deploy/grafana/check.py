#!/usr/bin/env python3
"""Checks the Grafana dashboard offline (deploy/check runs it): the JSON parses; it has a uid,
a title and a Prometheus data source variable that every panel and query uses; panel ids are
unique and panels sit inside the 24-column grid without overlapping; every query has an
expression with balanced brackets and quotes, and a unique refId in its panel. The names the
expressions query are checked against what allot exports by tests/grafana.rs."""
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "deploy/grafana/allot.json"
errors = []
with open(path) as f:
    dash = json.load(f)
for key in ("uid", "title", "panels", "templating", "schemaVersion"):
    if key not in dash:
        errors.append(f"no {key!r}")
variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    errors.append("no 'datasource' variable of type datasource for prometheus")
ids, cells = set(), {}
for p in dash.get("panels", []):
    title = p.get("title", "?")
    if p.get("id") in ids:
        errors.append(f"panel {title!r}: id {p.get('id')} used twice")
    ids.add(p.get("id"))
    g = p.get("gridPos", {})
    x, y, w, h = (g.get(k) for k in ("x", "y", "w", "h"))
    if None in (x, y, w, h) or x < 0 or w <= 0 or h <= 0 or x + w > 24:
        errors.append(f"panel {title!r}: gridPos {g} is not inside the 24-column grid")
        continue
    for cx in range(x, x + w):
        for cy in range(y, y + h):
            if (cx, cy) in cells:
                errors.append(f"panel {title!r} overlaps {cells[(cx, cy)]!r} at {cx},{cy}")
                break
            cells[(cx, cy)] = title
    if p.get("type") == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${datasource}":
        errors.append(f"panel {title!r}: does not use the datasource variable")
    refs = set()
    targets = p.get("targets", [])
    if not targets:
        errors.append(f"panel {title!r}: no queries")
    for t in targets:
        expr, ref = t.get("expr", ""), t.get("refId")
        if not expr.strip():
            errors.append(f"panel {title!r}: a query without an expression")
        if ref in refs:
            errors.append(f"panel {title!r}: refId {ref} used twice")
        refs.add(ref)
        if t.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel {title!r}: query {ref} does not use the datasource variable")
        depth = {"(": 0, "[": 0, "{": 0}
        close = {")": "(", "]": "[", "}": "{"}
        for c in expr:
            if c in depth:
                depth[c] += 1
            elif c in close:
                depth[close[c]] -= 1
                if depth[close[c]] < 0:
                    break
        if any(depth.values()) or expr.count('"') % 2:
            errors.append(f"panel {title!r}: unbalanced brackets or quotes in {expr!r}")
if errors:
    for e in errors:
        print(f"{path}: {e}", file=sys.stderr)
    sys.exit(1)
print(f"{path}: {len(dash['panels'])} panels, {sum(len(p.get('targets', [])) for p in dash['panels'])} queries, ok")
