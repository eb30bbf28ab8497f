//! The web dashboard in a real browser (headless Chromium through chromedriver): three
//! coordinator replicas, two nodes of one GPU, two teams; the browser signs in at a follower
//! (its reads go to the leader), and each page's numbers are checked against the known cluster:
//! both GPUs in use, team-a's second job waiting with its reason. A team user signs in too and
//! cannot see the other team's workload. Screenshots are kept in
//! `target/test-artifacts/dashboard/`.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::PathBuf;

use allot_common::api::{Body, Reply};
use support::*;

fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts/dashboard")
}

/// The replica that leads, by index.
fn leader(c: &Cluster) -> usize {
    rt().block_on(async {
        let mut client = c.client("admin-admin");
        wait_leader(&mut client).await;
        let r = client.call(Body::Hello).await;
        client.close().await;
        match r {
            Ok(Ok(Reply::Hello {
                leader: Some(l), ..
            })) => l as usize - 1,
            other => panic!("hello: {other:?}"),
        }
    })
}

/// The login link `allot dashboard` prints when it reaches only replica `i`.
fn login_link(c: &Cluster, stem: &str, i: usize) -> String {
    let home = c.dir.path().join(format!("home-{stem}-{i}"));
    std::fs::create_dir_all(&home).expect("home");
    let o = c
        .cli_command(stem, &["dashboard"])
        .env("ALLOT_COORDINATORS", &c.addrs[i])
        .env("HOME", &home)
        .output()
        .expect("allot dashboard");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "allot dashboard: {out}{o:?}");
    let url = out.lines().next().unwrap_or_default().to_string();
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{}/ui/login?ticket=", c.http[i])),
        "the link names replica {i}'s HTTP port {}: {out}",
        c.http[i]
    );
    url
}

fn submit(c: &Cluster, stem: &str, name: &str, script: &str) {
    c.cli_ok(
        stem,
        &[
            "submit", "--name", name, "--gpus", "1", "--", "sh", "-c", script,
        ],
    );
}

#[test]
fn the_dashboard_shows_the_cluster_as_it_is_and_keeps_teams_apart() {
    let Some(browser) = webdriver::Browser::start("the_dashboard") else {
        return;
    };
    let c = Cluster::new(3, 10_000);
    create_scheduler_config(
        &c,
        "PriorityClasses=[{Name=training,Weight=70}],FairShare=Enabled",
    );
    setup_team(&c, "team-a");
    setup_team(&c, "team-b");
    // Two nodes of one GPU in one rack.
    let rack = ["--topology".to_string(), "rack=r1".to_string()];
    let (_g1, _g2) = two_gpu_nodes_with(&c, &rack);
    submit(
        &c,
        "user-team-a",
        "a-run",
        "echo hello from a-run; sleep 600",
    );
    submit(
        &c,
        "user-team-b",
        "b-run",
        "echo hello from b-run; sleep 600",
    );
    for (stem, name) in [("user-team-a", "a-run"), ("user-team-b", "b-run")] {
        c.cli_ok(
            stem,
            &["wait", name, "--for", "running", "--timeout", "60s"],
        );
    }
    submit(&c, "user-team-a", "a-wait", "echo never; sleep 600");

    // The admin signs in at a follower.
    let follower = (leader(&c) + 1) % 3;
    browser.open(&login_link(&c, "admin-admin", follower));
    let shots = artifacts();
    let who = browser.text_of("who", 20);
    assert!(who.contains("admin"), "{who}");

    // Cluster: both GPUs in use, none idle; one instance type with two ready nodes.
    assert_eq!(browser.text_of("cluster-gpu-capacity", 20), "2");
    wait_for(20, "the page shows both GPUs in use", || {
        (browser.text_of("cluster-gpu-used", 5) == "2").then_some(())
    });
    assert_eq!(browser.text_of("cluster-gpu-idle", 5), "0");
    assert_eq!(browser.text_of("cluster-admitted", 5), "2");
    assert_eq!(browser.text_of("cluster-pending", 5), "1");
    let row = browser.text_of("type-row-ml.g5.8xlarge", 5);
    assert!(row.contains("2 / 2"), "{row}");
    // The live chart draws once the page has sampled twice (it refreshes every 3 s).
    wait_for(20, "the live chart", || {
        browser
            .run(
                "return !!document.querySelector('#live-chart polyline');",
                serde_json::json!([]),
            )
            .as_bool()
            .filter(|b| *b)
    });
    browser.screenshot(&shots.join("cluster.png"));

    // Teams: each team admitted one; team-a has one pending, a-wait waits longest.
    browser.open(&format!("http://127.0.0.1:{}/ui/#/teams", c.http[follower]));
    let a = browser.text_of("team-row-team-a", 20);
    let cells: Vec<&str> = a.split('\t').collect();
    assert!(
        a.contains("a-wait"),
        "team-a waits longest with a-wait: {a}"
    );
    assert_eq!(
        cells.last().map(|s| s.starts_with("a-wait")),
        Some(true),
        "{a}"
    );
    let b = browser.text_of("team-row-team-b", 5);
    assert!(!b.contains("a-wait"), "{b}");
    // The cohorts under the teams: team-b moved into a department of an organisation.
    c.cli_ok(
        "admin-admin",
        &[
            "create-cohort",
            "dept-b",
            "--parent",
            "org",
            "--fair-share-weight",
            "2.5",
        ],
    );
    c.cli_ok("admin-admin", &["set-team-cohort", "team-b", "dept-b"]);
    browser.open(&format!("http://127.0.0.1:{}/ui/#/teams", c.http[follower]));
    let dept = browser.text_of("cohort-row-dept-b", 20);
    assert!(
        dept.contains("org")
            && dept.contains("2.5")
            && dept.contains("team-b")
            && dept.contains("gpu"),
        "{dept}"
    );
    browser.screenshot(&shots.join("teams.png"));

    // team-a's queue: a-wait first in admission order, with its reason and explanation.
    browser.open(&format!(
        "http://127.0.0.1:{}/ui/#/queue/team-a",
        c.http[follower]
    ));
    let q = browser.text_of("queue-row-a-wait", 20);
    assert!(q.starts_with('1'), "first in the queue: {q}");
    let explained = c.cli_ok("user-team-a", &["explain", "a-wait"]);
    let first = explained.lines().next().unwrap_or_default().trim();
    assert!(
        !first.is_empty() && q.contains(first),
        "the explain text {first:?} in {q:?}"
    );
    let active = browser.text_of("active-row-a-run", 5);
    assert!(active.contains("Running"), "{active}");
    browser.screenshot(&shots.join("queue.png"));

    // A workload: running, its pod's node, its log.
    browser.open(&format!(
        "http://127.0.0.1:{}/ui/#/workload/team-a/a-run",
        c.http[follower]
    ));
    assert_eq!(browser.text_of("workload-state", 20), "Running");
    let pod = browser.text_of("pod-row-0", 5);
    assert!(pod.contains("g5-"), "{pod}");
    wait_for(20, "the pod's log", || {
        browser
            .text_of("log", 5)
            .contains("hello from a-run")
            .then_some(())
    });
    browser.screenshot(&shots.join("workload.png"));

    // Nodes: both ready with their GPU.
    browser.open(&format!("http://127.0.0.1:{}/ui/#/nodes", c.http[follower]));
    for n in ["g5-1", "g5-2"] {
        let row = browser.text_of(&format!("node-row-{n}"), 20);
        assert!(row.contains("Ready") && row.contains("1 / 1"), "{row}");
    }
    // Their rack, both ready, its GPUs in use.
    let rack = browser.text_of("domain-row-rack-r1", 20);
    assert!(
        rack.contains("g5-1, g5-2") && rack.contains("2 / 2") && rack.contains("0 free of 2"),
        "{rack}"
    );
    browser.screenshot(&shots.join("nodes.png"));

    // Usage: a row per team that ran.
    browser.open(&format!("http://127.0.0.1:{}/ui/#/usage", c.http[follower]));
    for t in ["team-a", "team-b"] {
        let row = browser.text_of(&format!("usage-row-{t}"), 20);
        let used: f64 = row
            .split('\t')
            .nth(1)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("GPU-hours used in {row:?}"));
        assert!(used > 0.0, "{t} ran a GPU job: {row}");
    }
    browser.screenshot(&shots.join("usage.png"));

    // A team-b user, at the leader this time: its own queue, never team-a's workload.
    let l = leader(&c);
    browser.open(&format!("http://127.0.0.1:{}/ui/logout", c.http[follower]));
    browser.open(&login_link(&c, "user-team-b", l));
    browser.open(&format!("http://127.0.0.1:{}/ui/#/queue", c.http[l]));
    let b = browser.text_of("active-row-b-run", 20);
    assert!(b.contains("Running"), "{b}");
    let page = browser.page_text();
    assert!(
        !page.contains("a-run") && !page.contains("a-wait"),
        "{page}"
    );
    browser.open(&format!(
        "http://127.0.0.1:{}/ui/#/workload/team-a/a-run",
        c.http[l]
    ));
    let e = browser.text_of("error", 20);
    assert!(!e.contains("hello from a-run"), "{e}");
    let asked = browser.run(
        "return fetch('/ui/api/workload?name=a-run&team=team-a').then(r => r.status);",
        serde_json::json!([]),
    );
    assert!(
        asked == 403 || asked == 404,
        "team-b reading team-a's workload: {asked}"
    );
    // The cluster's totals are everyone's to see.
    browser.open(&format!("http://127.0.0.1:{}/ui/#/cluster", c.http[l]));
    assert_eq!(browser.text_of("cluster-gpu-capacity", 20), "2");

    // Without a session nothing is served; a ticket works once.
    let link = login_link(&c, "admin-admin", l);
    let path = link.trim_start_matches(&format!("http://127.0.0.1:{}", c.http[l]));
    let addr = format!("127.0.0.1:{}", c.http[l]);
    let first = http_get(&addr, path).unwrap_or_default();
    assert!(first.starts_with("HTTP/1.1 303"), "{first}");
    let again = http_get(&addr, path).unwrap_or_default();
    assert!(
        again.starts_with("HTTP/1.1 401") && again.contains("used already"),
        "{again}"
    );
    let bare = http_get(&addr, "/ui/api/teams").unwrap_or_default();
    assert!(bare.starts_with("HTTP/1.1 401"), "{bare}");

    // The replicas share the cluster's session key: a session from the leader is good at a
    // follower (a Service spreads a browser's requests over them).
    let link = login_link(&c, "user-team-b", l);
    let path = link.trim_start_matches(&format!("http://127.0.0.1:{}", c.http[l]));
    let login = http_get(&addr, path).unwrap_or_default();
    let cookie = (login.lines())
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {login}"))
        .to_string();
    let other = format!("127.0.0.1:{}", c.http[(l + 1) % 3]);
    let me = http_get_with(&other, "/ui/api/whoami", &cookie);
    assert!(
        me.starts_with("HTTP/1.1 200") && me.contains("team-b"),
        "{me}"
    );
}

/// GET `path` with a cookie.
fn http_get_with(addr: &str, path: &str, cookie: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
