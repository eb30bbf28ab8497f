//! End-to-end: three real `allot coordinator` processes on loopback, driven through the CLI
//! and the client library. Restart survival, leader loss in the middle of 1,000 submissions,
//! catch-up from a snapshot, and bad input of every kind.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use allot_common::api::{Body, ErrorKind, Reply, WorkloadFilter};
use allot_common::Resources;
use allot_net::tls;
use support::*;

/// One coordinator, with a leader, and a runtime to call it from.
fn one_replica() -> (Cluster, tokio::runtime::Runtime) {
    let c = Cluster::new(1, 10_000);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    (c, rt)
}

#[test]
fn config_and_workloads_survive_a_restart_of_every_replica() {
    let mut c = Cluster::new(3, 10_000);
    create_scheduler_config(
        &c,
        "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled",
    );
    setup_team(&c, "team-a");
    let job = c.dir.path().join("job.yaml");
    std::fs::write(
        &job,
        "name: train-1\nteam: team-a\npriority: training\ncount: 2\nrequests: {gpu: 1}\ncommand: [sleep, '60']\n",
    )
    .expect("job file");
    let out = c.cli_ok(
        "user-team-a",
        &["submit", "-f", job.to_str().expect("utf-8")],
    );
    assert!(out.contains("train-1 submitted"), "{out}");
    // Update with the right version works, a stale version is refused.
    let upd = |v: &str| {
        c.cli(
            "admin-admin",
            &[
                "update-compute-quota",
                "--compute-quota-id",
                "team-a-quota",
                "--target-version",
                v,
                "--compute-quota-config",
                QUOTA,
                "--compute-quota-target",
                "TeamName=team-a,FairShareWeight=20",
            ],
        )
    };
    assert!(upd("1").status.success());
    let stale = upd("1");
    assert!(!stale.status.success());
    let err = String::from_utf8_lossy(&stale.stderr);
    assert!(err.contains("is at version 2"), "{err}");

    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.start(i);
    }
    rt().block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    let q = c.cli_ok(
        "admin-admin",
        &[
            "describe-compute-quota",
            "--compute-quota-id",
            "team-a-quota",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&q).expect("json");
    assert_eq!(v["ComputeQuotaVersion"], 2, "{q}");
    assert_eq!(v["ComputeQuotaTarget"]["FairShareWeight"], 20, "{q}");
    let p = c.cli_ok("admin-admin", &["describe-cluster-scheduler-config"]);
    assert!(p.contains("Name=inference,Weight=90"), "{p}");
    let w = c.cli_ok("user-team-a", &["describe", "workload", "train-1"]);
    assert!(w.contains("Team:         team-a"), "{w}");
    assert!(w.contains("Command:      sleep 60"), "{w}");
    let teams = c.cli_ok("admin-admin", &["get", "teams"]);
    assert!(teams.contains("team-a"), "{teams}");
    // The gauges are brought up to date when /metrics is scraped: right after the restart the
    // leader already counts the one workload and team-a's quota.
    let leader = (0..3)
        .find(|&i| c.metric(i, "allot_raft_is_leader") == Some(1.0))
        .expect("a replica says it leads");
    let page = c.metrics(leader).expect("the leader's /metrics");
    let workloads: f64 = page
        .lines()
        .filter(|l| l.starts_with("allot_workloads{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(workloads, 1.0, "{page}");
    assert!(
        page.lines()
            .any(|l| l.starts_with("allot_team_nominal{") && l.contains("team=\"team-a\"")),
        "{page}"
    );
}

#[test]
fn leader_killed_during_1000_submissions_loses_and_duplicates_nothing() {
    let mut c = Cluster::new(3, 200);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    setup_team(&c, "team-a");
    // Each call is bounded (a client gives up on a cluster after 15 s) and so is the whole
    // stream: once CI waited 83 minutes on it and said nothing. A stuck call or stream fails
    // with what each replica saw (the cluster's Drop prints it).
    let t = Instant::now();
    let (acked, killed, refused) = rt.block_on(async {
        let mut cl = c.client("admin-admin");
        let mut acked = Vec::new();
        let mut killed = None;
        let mut refused: Vec<String> = Vec::new();
        for i in 0..1000 {
            if i == 300 {
                if let Ok(Ok(Ok(Reply::Hello {
                    leader: Some(l), ..
                }))) = tokio::time::timeout(Duration::from_secs(30), cl.call(Body::Hello)).await
                {
                    let idx = (l - 1) as usize;
                    c.kill(idx);
                    killed = Some(idx);
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(240),
                "{i} submissions sent in {:?}, {} acknowledged; the last refusals: {:?}",
                t.elapsed(),
                acked.len(),
                &refused[refused.len().saturating_sub(3)..]
            );
            let name = format!("w-{i:04}");
            let call = cl.call(Body::Submit(job(&name, "team-a")));
            let Ok(answer) = tokio::time::timeout(Duration::from_secs(30), call).await else {
                panic!("submission {i} has no answer after 30 s");
            };
            match answer {
                Ok(Ok(Reply::Submitted { .. })) => acked.push(name),
                Ok(Ok(r)) => panic!("unexpected reply {r:?}"),
                // Not acknowledged: allowed, but then it must not be counted.
                Ok(Err(e)) => {
                    assert!(
                        matches!(e.kind, ErrorKind::Unavailable | ErrorKind::NotLeader),
                        "{e:?}"
                    );
                    refused.push(format!("{i}: {e:?}"));
                }
                Err(e) => refused.push(format!("{i}: {e}")),
            }
        }
        (acked, killed, refused)
    });
    let killed = killed.expect("a leader was killed");
    eprintln!(
        "1,000 submissions in {:?}: {} acknowledged, {} not; leader {} killed at the 300th",
        t.elapsed(),
        acked.len(),
        refused.len(),
        killed + 1
    );
    assert!(
        acked.len() >= 900,
        "only {} of 1000 acknowledged; the last refusals: {:?}",
        acked.len(),
        &refused[refused.len().saturating_sub(3)..]
    );
    c.start(killed);
    rt.block_on(async {
        let mut cl = c.client("admin-admin");
        wait_leader(&mut cl).await;
        let list = cl.call(Body::GetWorkloads(WorkloadFilter {
            team: None,
            all: true,
        }));
        let Ok(Ok(Ok(Reply::Workloads(ws)))) =
            tokio::time::timeout(Duration::from_secs(30), list).await
        else {
            panic!("listing failed");
        };
        let mut names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a workload is listed twice");
        for a in &acked {
            assert!(
                names.binary_search(&a.as_str()).is_ok(),
                "acknowledged {a} is missing"
            );
        }
        assert!(
            names.iter().all(|n| n.starts_with("w-")),
            "unexpected workloads"
        );
        assert!(names.len() <= 1000);
    });
}

#[test]
fn the_cli_finds_the_new_leader_after_a_kill_and_a_repeated_token_returns_the_original() {
    let mut c = Cluster::new(3, 200);
    let rt = rt();
    let leader = rt.block_on(async {
        let mut cl = c.client("admin-admin");
        wait_leader(&mut cl).await;
        let Ok(Ok(Reply::Hello {
            leader: Some(l), ..
        })) = cl.call(Body::Hello).await
        else {
            panic!("no leader named");
        };
        (l - 1) as usize
    });
    setup_team(&c, "team-a");
    // The CLI remembers the leader that answered `setup_team`'s last command; it is killed,
    // so the next command's first address is dead and a follower may name it for a while.
    c.kill(leader);
    let job = c.dir.path().join("job.yaml");
    std::fs::write(
        &job,
        "name: after-kill\nteam: team-a\npriority: 1\ncount: 1\nrequests: {gpu: 1}\ncommand: [sleep, '60']\n",
    )
    .expect("job file");
    let job = job.to_str().expect("utf-8 path");
    let t0 = std::time::Instant::now();
    let out = c.cli_ok(
        "admin-admin",
        &["submit", "-f", job, "--client-token", "retry-me"],
    );
    println!("submit after the leader's kill took {:?}", t0.elapsed());
    assert!(out.contains("workload after-kill submitted"), "{out}");
    // The same submit again (its outcome was unknown, say): the original workload, not a
    // second one and not a conflict.
    let again = c.cli_ok(
        "admin-admin",
        &["submit", "-f", job, "--client-token", "retry-me"],
    );
    assert!(again.contains("already submitted"), "{again}");
    // Without the key it is a different submit of the same name: refused.
    let other = c.cli("admin-admin", &["submit", "-f", job]);
    assert!(!other.status.success());
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("after-kill"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
}

#[test]
fn a_submit_nobody_answered_says_its_outcome_is_unknown_and_how_to_repeat_it() {
    // No coordinator listens at the address: the CLI retries for its whole budget, then says
    // the submit may or may not have been applied and prints the key to repeat it with.
    let c = Cluster::new(1, 200);
    let job = c.dir.path().join("job.yaml");
    std::fs::write(
        &job,
        "name: lost-reply\nteam: team-a\ncount: 1\nrequests: {gpu: 1}\n",
    )
    .expect("job file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["submit", "-f", job.to_str().expect("utf-8")])
        .args(["--client-token", "key-42"])
        .env("ALLOT_COORDINATORS", format!("127.0.0.1:{}", udp_port()))
        .env("ALLOT_CERTS", c.certs())
        .env("HOME", c.dir.path())
        .output()
        .expect("run allot");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for part in [
        "the outcome of submitting lost-reply is unknown",
        "--client-token key-42",
        "allot describe workload lost-reply",
    ] {
        assert!(err.contains(part), "{err:?} lacks {part:?}");
    }
}

#[test]
fn a_follower_that_was_down_catches_up_from_a_snapshot() {
    let mut c = Cluster::new(3, 50);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    setup_team(&c, "team-a");
    // Stop a follower.
    let leader = rt.block_on(async {
        match c.client("admin-admin").call(Body::Hello).await {
            Ok(Ok(Reply::Hello {
                leader: Some(l), ..
            })) => l as usize - 1,
            other => panic!("hello: {other:?}"),
        }
    });
    let follower = (leader + 1) % 3;
    c.kill(follower);
    rt.block_on(async {
        let mut cl = c.client("admin-admin");
        for i in 0..300 {
            let r = cl
                .call(Body::Submit(job(&format!("s-{i}"), "team-a")))
                .await;
            assert!(matches!(r, Ok(Ok(_))), "{r:?}");
        }
    });
    let commit = c
        .metric(leader, "allot_raft_commit_index")
        .expect("leader metrics");
    c.start(follower);
    let t = Instant::now();
    loop {
        let applied = c
            .metric(follower, "allot_raft_applied_index")
            .unwrap_or(0.0);
        let installed = c
            .metric(follower, "allot_raft_snapshots_installed")
            .unwrap_or(0.0);
        if applied >= commit && installed >= 1.0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "follower at {applied} of {commit}, {installed} snapshots installed\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn bad_input_is_refused_clearly_and_the_server_keeps_serving() {
    let (c, rt) = one_replica();
    setup_team(&c, "team-a");
    setup_team(&c, "team-b");
    rt.block_on(async {
        let mut admin = c.client("admin-admin");
        let mut a = c.client("user-team-a");
        let mut node = c.client("node-node-1");
        // A user of team A acting on team B.
        let r = a
            .call(Body::Submit(job("x", "team-b")))
            .await
            .expect("transport");
        let e = r.expect_err("refused");
        assert_eq!(e.kind, ErrorKind::Forbidden);
        assert!(e.message.contains("team \"team-b\""), "{}", e.message);
        admin
            .call(Body::Submit(job("b-job", "team-b")))
            .await
            .expect("transport")
            .expect("admin submits anywhere");
        // Team A cannot see team B's workload names: to it they do not exist, even when it
        // names team B.
        for team in [None, Some("team-b".to_string())] {
            let e = a
                .call(Body::Cancel {
                    name: "b-job".into(),
                    team: team.clone(),
                })
                .await
                .expect("transport")
                .expect_err("refused");
            assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
            assert!(!e.message.contains("team-b"), "{}", e.message);
            let e = a
                .call(Body::DescribeWorkload {
                    name: "b-job".into(),
                    team,
                })
                .await
                .expect("transport")
                .expect_err("refused");
            assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
        }
        // Names are scoped per team: team A may use team B's name, and learns nothing from
        // it (it was refused with Conflict, which told one team what another runs).
        a.call(Body::Submit(job("b-job", "team-a")))
            .await
            .expect("transport")
            .expect("a name another team uses is free in this team");
        let mut again = job("b-job", "team-a");
        again.client_token = Some("another-submit".into());
        let e = a
            .call(Body::Submit(again))
            .await
            .expect("transport")
            .expect_err("twice in one team");
        assert_eq!(e.kind, ErrorKind::Conflict, "{}", e.message);
        // An admin says which team's when both have it.
        let e = admin
            .call(Body::DescribeWorkload {
                name: "b-job".into(),
                team: None,
            })
            .await
            .expect("transport")
            .expect_err("ambiguous");
        assert!(
            e.message
                .contains("2 teams have a workload named \"b-job\" (team-a, team-b)"),
            "{}",
            e.message
        );
        a.call(Body::Cancel {
            name: "b-job".into(),
            team: None,
        })
        .await
        .expect("transport")
        .expect("team A cancels its own");
        let r = admin
            .call(Body::DescribeWorkload {
                name: "b-job".into(),
                team: Some("team-b".into()),
            })
            .await
            .expect("transport");
        assert!(
            matches!(&r, Ok(Reply::Workload(w)) if w.team == "team-b" && w.state == "Pending"),
            "the admin names team B's, and it is untouched: {r:?}"
        );
        let e = a
            .call(Body::GetWorkloads(WorkloadFilter {
                team: Some("team-b".into()),
                all: false,
            }))
            .await
            .expect("transport")
            .expect_err("refused");
        assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.message);
        // A node reporting for another node.
        let e = node
            .call(Body::RegisterNode {
                name: "node-2".into(),
                instance_type: "ml.g5.8xlarge".into(),
                capacity: Resources::new(),
            })
            .await
            .expect("transport")
            .expect_err("refused");
        assert_eq!(e.kind, ErrorKind::Forbidden);
        assert!(
            e.message.contains("only for node \"node-1\""),
            "{}",
            e.message
        );
        let e = node
            .call(Body::WorkloadExited {
                name: "b-job".into(),
                succeeded: true,
            })
            .await
            .expect("transport")
            .expect_err("refused");
        assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.message);
        // Garbage and oversized frames on a raw stream.
        let addr = c.addrs[0].clone();
        for bytes in [
            vec![0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb],
            vec![0xff, 0xff, 0xff, 0xff],
        ] {
            let reply = raw_request(&c.certs(), &addr, &bytes).await;
            let e = reply.expect_err("refused");
            assert_eq!(e.kind, ErrorKind::Invalid, "{}", e.message);
        }
        // Invalid quotas.
        let o = c.cli(
            "admin-admin",
            &[
                "create-compute-quota",
                "--name",
                "bad",
                "--compute-quota-config",
                "ComputeQuotaResources=[{InstanceType=ml.nope,Count=2}]",
                "--compute-quota-target",
                "TeamName=team-c",
            ],
        );
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("ml.nope"), "{err}");
        let o = c.cli(
            "admin-admin",
            &[
                "create-compute-quota",
                "--name",
                "team-a-quota",
                "--compute-quota-config",
                QUOTA,
                "--compute-quota-target",
                "TeamName=team-c",
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("already exists"), "{err}");
        // Still serving, nothing lost.
        let r = admin
            .call(Body::GetWorkloads(WorkloadFilter::default()))
            .await;
        let Ok(Ok(Reply::Workloads(ws))) = r else {
            panic!("{r:?}")
        };
        assert_eq!(ws.len(), 1);
    });
    // An unauthenticated client (no certificate) gets nothing.
    rt.block_on(async {
        let r = unauthenticated(&c.certs(), &c.addrs[0]).await;
        assert!(
            r.is_err(),
            "a client without a certificate was served: {r:?}"
        );
    });
}

/// Sends raw bytes as a request with the admin certificate and reads the reply frame.
async fn raw_request(
    certs: &Path,
    addr: &str,
    bytes: &[u8],
) -> Result<Reply, allot_common::api::ApiError> {
    let cfg = tls::client_config(&tls::TlsFiles::in_dir(certs, "admin-admin")).expect("cfg");
    let ep = quinn::Endpoint::client("0.0.0.0:0".parse().expect("addr")).expect("endpoint");
    let conn = ep
        .connect_with(cfg, addr.parse().expect("addr"), tls::SERVER_NAME)
        .expect("connect")
        .await
        .expect("connected");
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    send.write_all(bytes).await.expect("write");
    send.finish().expect("finish");
    let r: Option<Result<Reply, allot_common::api::ApiError>> =
        allot_net::wire::read_frame(&mut recv)
            .await
            .expect("reply frame");
    r.expect("a reply")
}

async fn unauthenticated(certs: &Path, addr: &str) -> Result<(), String> {
    use std::sync::Arc;
    let ca = std::fs::read(certs.join("ca.pem")).map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![allot_net::wire::ALPN.to_vec()];
    let qc = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    let cfg = quinn::ClientConfig::new(Arc::new(qc));
    let ep =
        quinn::Endpoint::client("0.0.0.0:0".parse().expect("addr")).map_err(|e| e.to_string())?;
    let conn = ep
        .connect_with(cfg, addr.parse().expect("addr"), tls::SERVER_NAME)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let req = allot_common::api::Request {
        version: allot_net::wire::PROTOCOL_VERSION,
        body: Body::GetWorkloads(WorkloadFilter::default()),
    };
    allot_net::wire::write_frame(&mut send, &req)
        .await
        .map_err(|e| e.to_string())?;
    let _ = send.finish();
    let r: Option<Result<Reply, allot_common::api::ApiError>> =
        allot_net::wire::read_frame(&mut recv)
            .await
            .map_err(|e| e.to_string())?;
    match r {
        Some(Ok(_)) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// Issue 23, finding 6: a refused certificate made the CLI retry for 15 s. Now it fails at
/// once and says which certificate was refused, by whom, and why.
#[test]
fn a_refused_certificate_fails_at_once_and_says_why() {
    let (c, _rt) = one_replica();
    let user = tls::Identity::User {
        team: "team-a".into(),
    };
    // A user certificate from another cluster's CA, next to this cluster's ca.pem: the
    // coordinator refuses it.
    let other = tempfile::tempdir().expect("tempdir");
    tls::init_ca(other.path(), false).expect("CA");
    let (cert, key) = tls::issue(other.path(), &user, &[], &[], 2).expect("issue");
    let mixed = tempfile::tempdir().expect("tempdir");
    std::fs::copy(c.certs().join("ca.pem"), mixed.path().join("ca.pem")).expect("copy");
    std::fs::copy(&cert, mixed.path().join("user-team-a.pem")).expect("copy");
    std::fs::copy(&key, mixed.path().join("user-team-a-key.pem")).expect("copy");
    // The other CA's own directory: this client refuses the coordinator's certificate.
    for (dir, says) in [
        (mixed.path(), "refused certificate \"user-team-a\""),
        (other.path(), "its certificate is not trusted by"),
    ] {
        let t = Instant::now();
        let o = c
            .cli_command("user-team-a", &["get", "workloads"])
            .env("ALLOT_CERTS", dir)
            .env("HOME", dir)
            .output()
            .expect("run allot");
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "served with a foreign certificate");
        assert!(err.contains(says), "{err}");
        assert!(err.contains(&c.addrs[0]), "names the coordinator: {err}");
        assert!(err.contains("UnknownIssuer"), "says why: {err}");
        // Not after retrying until the deadline (15 s), which is what that error ends with.
        assert!(!err.contains("no coordinator leader answered"), "{err}");
        eprintln!("refused in {took:?}: {err}");
    }
}

/// Issue 56: a loop of quick CLI commands stalled 1 to 3 s one time in ten to twenty. Each
/// command left its connection open when it exited, the coordinator counted it against the
/// certificate's 32 until the idle timeout, and the 33rd command in a few seconds was refused
/// and retried quietly. Now a command closes its connection before it exits, and a refusal over
/// the limit fails the command at once with the limit's name.
#[test]
fn quick_commands_free_their_connections_and_a_refusal_over_the_limit_says_so() {
    let (c, rt) = one_replica();
    // More commands in a row than the limit allows connections at once.
    for i in 0..48 {
        let o = c.cli("admin-admin", &["get", "workloads"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "command {i} failed: {err}");
        assert!(!err.contains("refused"), "command {i}: {err}");
    }
    // 32 connections really open: the next one is refused, and the CLI says so at once
    // instead of retrying until its deadline.
    let mut held = rt.block_on(async {
        let mut held: Vec<_> = (0..32).map(|_| c.client("admin-admin")).collect();
        for h in &mut held {
            let r = h.call(Body::Hello).await;
            assert!(matches!(r, Ok(Ok(_))), "{r:?}");
        }
        held
    });
    let o = c.cli("admin-admin", &["get", "workloads"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a 33rd connection was served");
    assert!(err.contains("refused the connection"), "{err}");
    assert!(
        err.contains("32 connections, the limit per certificate"),
        "{err}"
    );
    assert!(err.contains(&c.addrs[0]), "names the coordinator: {err}");
    assert!(!err.contains("no coordinator leader answered"), "{err}");
    // Once they close, a command is served again.
    rt.block_on(async {
        for h in &mut held {
            h.close().await;
        }
    });
    wait_for(
        10,
        "a command served after the held connections closed",
        || {
            c.cli("admin-admin", &["get", "workloads"])
                .status
                .success()
                .then_some(())
        },
    );
}

/// The coordinator's resident memory, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb / 1024.0
}

/// Issue 23, finding 2: 24 streams each announcing 16 MiB and sending 15 MiB took a
/// coordinator from 41 to 417 MiB, with no read deadline and no byte budget. Here one
/// certificate holds 4 connections of 48 streams, each announcing a 4 MiB request (the most a
/// client may send) and sending all but its last 64 KiB, while another user's requests go on.
/// What bounds it: per connection, QUIC's 4 MiB receive window; per certificate, 16 MiB of
/// request bytes being read; a request not whole within 10 s is dropped.
/// A request stream that announces `frame` bytes and sends all but the last 64 KiB of them,
/// then waits for ever: a half-sent request the coordinator must hold within its budgets.
fn half_sent(
    conn: quinn::Connection,
    frame: usize,
) -> tokio::task::JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>> {
    tokio::spawn(async move {
        let (mut send, _recv) = conn.open_bi().await?;
        send.write_all(&(frame as u32).to_be_bytes()).await?;
        let chunk = vec![7u8; 64 << 10];
        for _ in 0..(frame / chunk.len() - 1) {
            send.write_all(&chunk).await?;
        }
        std::future::pending::<()>().await;
        Ok(())
    })
}

#[test]
fn half_sent_requests_cannot_grow_the_coordinators_memory() {
    const CONNS: usize = 4;
    const STREAMS: usize = 48;
    const FRAME: usize = 4 << 20;
    let (c, rt) = one_replica();
    let pid = c.procs[0].as_ref().expect("coordinator").id();
    let before = rss_mib(pid);
    let cfg = tls::client_config(&tls::TlsFiles::in_dir(c.certs(), "admin-admin")).expect("cfg");
    let addr: std::net::SocketAddr = c.addrs[0].parse().expect("addr");
    let (conns, writers, mut served, during) = rt.block_on(async {
        let ep = quinn::Endpoint::client("0.0.0.0:0".parse().expect("addr")).expect("endpoint");
        let mut conns = Vec::new();
        let mut writers = Vec::new();
        for _ in 0..CONNS {
            let conn = ep
                .connect_with(cfg.clone(), addr, tls::SERVER_NAME)
                .expect("connect")
                .await
                .expect("connected");
            for _ in 0..STREAMS {
                let conn = conn.clone();
                writers.push(half_sent(conn, FRAME));
            }
            conns.push(conn);
        }
        // Another user is served meanwhile.
        let mut user = c.client("user-team-a");
        let mut served = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let r = user.call(Body::GetNodes).await;
            assert!(matches!(r, Ok(Ok(Reply::Nodes(_)))), "{r:?}");
            served.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let during = rss_mib(pid);
        // The coordinator took the streams in (none was refused or reset: every writer still
        // waits to send its last chunk), so the bound below is tested, not sidestepped.
        let refused = writers.iter().filter(|w| w.is_finished()).count();
        assert_eq!(
            refused, 0,
            "{refused} of the half-sent streams were refused"
        );
        (conns, writers, served, during)
    });
    // A 16 MiB announcement, as in the finding, is refused before anything is read.
    let big = rt.block_on(raw_request(
        &c.certs(),
        &c.addrs[0],
        &(16u32 << 20).to_be_bytes(),
    ));
    let e = big.expect_err("a 16 MiB request was accepted");
    assert!(
        e.message.contains("over the limit of 4194304 bytes"),
        "{}",
        e.message
    );
    for conn in &conns {
        conn.close(0u32.into(), b"done");
    }
    for w in &writers {
        w.abort();
    }
    // The coordinator gives freed memory back within 5 s of connections closing.
    std::thread::sleep(Duration::from_secs(8));
    let after = rss_mib(pid);
    served.sort();
    eprintln!(
        "coordinator RSS: {before:.0} MiB before, {during:.0} MiB with {} half-sent 4 MiB \
         requests on {CONNS} connections, {after:.0} MiB after they closed; another user's \
         GetNodes p50 {:?}, max {:?}",
        CONNS * STREAMS,
        served[served.len() / 2],
        served[served.len() - 1]
    );
    // The windows and the budget allow 4 x 4 MiB + 16 MiB; 64 MiB leaves room for the
    // allocator and QUIC's bookkeeping. Unbounded, these requests would hold 750 MiB.
    assert!(
        during - before < 64.0,
        "RSS grew from {before:.0} to {during:.0} MiB"
    );
    // And it did hold what the budget lets in: at least two requests' worth (here about 34 MiB).
    assert!(
        during - before >= 8.0,
        "RSS grew only from {before:.0} to {during:.0} MiB: were the requests read at all?"
    );
    // At least half of what the requests took goes back (a fraction of a MiB is noise).
    assert!(
        after <= before + (during - before) / 2.0,
        "too little was given back: {before:.0} MiB before, {during:.0} MiB during, then \
         {after:.0} MiB"
    );
}

/// Issue 55, item 7: twenty nodes' certificates each holding half-sent requests up to their
/// own limit (320 MiB in all, more than the server's whole request budget) fill the nodes'
/// share only: an admin and a team user are served meanwhile without waiting for room.
#[test]
fn half_sent_requests_of_many_nodes_leave_admins_and_users_their_share() {
    const NODES: usize = 20;
    const STREAMS: usize = 4;
    const FRAME: usize = 4 << 20;
    let (c, rt) = one_replica();
    let addr: std::net::SocketAddr = c.addrs[0].parse().expect("addr");
    let (conns, writers, served) = rt.block_on(async {
        let ep = quinn::Endpoint::client("0.0.0.0:0".parse().expect("addr")).expect("endpoint");
        let (mut conns, mut writers) = (Vec::new(), Vec::new());
        for i in 0..NODES {
            let node = format!("hs-{i}");
            tls::issue(
                &c.certs(),
                &tls::Identity::Node { node: node.clone() },
                &[],
                &[],
                2,
            )
            .expect("node certificate");
            let files = tls::TlsFiles::in_dir(c.certs(), &format!("node-{node}"));
            let cfg = tls::client_config(&files).expect("cfg");
            let conn = ep
                .connect_with(cfg, addr, tls::SERVER_NAME)
                .expect("connect")
                .await
                .expect("connected");
            for _ in 0..STREAMS {
                let conn = conn.clone();
                writers.push(half_sent(conn, FRAME));
            }
            conns.push(conn);
        }
        // Let the nodes' streams take what they can.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut served = Vec::new();
        for who in ["admin-admin", "user-team-a"] {
            let mut cl = c.client(who);
            for _ in 0..5 {
                let t = Instant::now();
                let r = cl.call(Body::GetNodes).await;
                assert!(matches!(r, Ok(Ok(Reply::Nodes(_)))), "{who}: {r:?}");
                served.push((who, t.elapsed()));
            }
        }
        (conns, writers, served)
    });
    for conn in &conns {
        conn.close(0u32.into(), b"done");
    }
    for w in &writers {
        w.abort();
    }
    eprintln!("with {NODES} nodes' half-sent requests held: {served:?}");
    // Without shares, the first requests waited for the nodes' streams to time out (10 s).
    let slowest = served.iter().map(|(_, d)| *d).max().unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(5),
        "a request waited {slowest:?} for room the nodes held: {served:?}"
    );
}

/// Issue 23, finding 3: 20,000 submissions from one team user were all accepted in 74 s.
/// Admission limits, set with the scheduler config, bound what a team may queue and how fast a
/// user may submit; refusals name the limit.
#[test]
fn admission_limits_bound_a_teams_queue_and_a_users_rate() {
    let (c, rt) = one_replica();
    setup_team(&c, "team-a");
    let out = c.cli_ok(
        "admin-admin",
        &[
            "create-cluster-scheduler-config",
            "--name",
            "default",
            "--scheduler-config",
            "FairShare=Enabled",
            "--max-pending-per-team",
            "3",
            "--submits-per-second",
            "1",
            "--submit-burst",
            "4",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["AdmissionLimits"]["MaxPendingPerTeam"], 3, "{v}");
    assert_eq!(v["AdmissionLimits"]["SubmitsPerSecond"], 1, "{v}");
    let shown = c.cli_ok("admin-admin", &["describe-cluster-scheduler-config"]);
    assert!(
        shown.contains("max-pending-per-team=3,submits-per-second=1,submit-burst=4"),
        "{shown}"
    );
    rt.block_on(async {
        let mut user = c.client("user-team-a");
        // No nodes: everything stays pending.
        for i in 0..3 {
            let r = user
                .call(Body::Submit(job(&format!("w{i}"), "team-a")))
                .await;
            assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");
        }
        let e = user
            .call(Body::Submit(job("w3", "team-a")))
            .await
            .expect("answered")
            .expect_err("a fourth pending workload");
        assert_eq!(e.kind, ErrorKind::LimitExceeded, "{e:?}");
        assert!(
            e.message
                .contains("team \"team-a\" has 3 pending workloads")
                && e.message.contains("max_pending_per_team 3"),
            "{}",
            e.message
        );
        // Four submissions in a burst of four: the fifth is over the rate.
        let e = user
            .call(Body::Submit(job("w4", "team-a")))
            .await
            .expect("answered")
            .expect_err("over the rate");
        assert_eq!(e.kind, ErrorKind::LimitExceeded, "{e:?}");
        assert!(
            e.message.contains("faster than 1 workloads a second"),
            "{}",
            e.message
        );
        // Admins are not rate limited, but the team's queue is still full.
        let mut admin = c.client("admin-admin");
        let e = admin
            .call(Body::Submit(job("w5", "team-a")))
            .await
            .expect("answered")
            .expect_err("the team is full");
        assert!(e.message.contains("3 pending"), "{}", e.message);
    });
    // Raised by the admin, and the team may queue more.
    c.cli_ok(
        "admin-admin",
        &[
            "update-cluster-scheduler-config",
            "--cluster-scheduler-config-id",
            "default",
            "--target-version",
            "1",
            "--scheduler-config",
            "FairShare=Enabled",
            "--max-pending-per-team",
            "10",
        ],
    );
    rt.block_on(async {
        let r = c
            .client("admin-admin")
            .call(Body::Submit(job("w6", "team-a")))
            .await;
        assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");
    });
    let shown = c.cli_ok("admin-admin", &["describe-cluster-scheduler-config"]);
    assert!(
        shown.contains("max-pending-per-team=10,submits-per-second=1"),
        "{shown}"
    );
}

/// Issue 56, item 2: the stability rules are set with the scheduler config, a flag not given
/// keeps its value, `describe-cluster-scheduler-config` shows them, and a value out of range is
/// refused with the value and the range.
#[test]
fn stability_rules_are_set_kept_and_refused_out_of_range() {
    let (c, _rt) = one_replica();
    let out = c.cli_ok(
        "admin-admin",
        &[
            "create-cluster-scheduler-config",
            "--name",
            "default",
            "--scheduler-config",
            "FairShare=Enabled",
            "--minimum-run-time",
            "120",
            "--preemption-budget",
            "3",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["Stability"]["MinimumRunTimeSeconds"], 120, "{v}");
    assert_eq!(v["Stability"]["PreemptionBudget"], 3, "{v}");
    let update = |version: &str, flags: &[&str]| {
        let mut args = vec![
            "update-cluster-scheduler-config",
            "--cluster-scheduler-config-id",
            "default",
            "--target-version",
            version,
        ];
        args.extend_from_slice(flags);
        c.cli("admin-admin", &args)
    };
    // A new policy string and one rule changed: the other rule stays.
    let o = update(
        "1",
        &[
            "--scheduler-config",
            "FairShare=Disabled",
            "--preemption-budget",
            "0",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let shown = c.cli_ok("admin-admin", &["describe-cluster-scheduler-config"]);
    assert!(
        shown.contains("minimum-run-time=120s,preemption-budget=0"),
        "{shown}"
    );
    let o = update("2", &["--minimum-run-time", "100000"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("minimum run time 100000 s is out of range 0..=86400"),
        "{err}"
    );
}

/// Issue 24, item 6: `allot wait NAME --for admitted|running|finished --timeout T`, exiting
/// non-zero on timeout or when the workload ends otherwise; node JSON carries the table's
/// status.
#[test]
fn wait_follows_a_workload_to_the_state_asked_for() {
    let (c, rt) = one_replica();
    setup_team(&c, "team-a");
    rt.block_on(async {
        let r = c
            .client("user-team-a")
            .call(Body::Submit(job("w", "team-a")))
            .await;
        assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");
    });
    // No node yet: it stays pending, and a short wait times out.
    let o = c.cli(
        "user-team-a",
        &["wait", "w", "--for", "admitted", "--timeout", "1s"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("timed out: workload w is Pending, not Admitted"),
        "{err}"
    );
    // A wait that is under way returns once a node comes and the workload is admitted.
    let waiting = c
        .cli_command(
            "user-team-a",
            &["wait", "w", "--for", "admitted", "--timeout", "60s"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("wait");
    std::thread::sleep(Duration::from_millis(500));
    rt.block_on(async {
        let capacity = allot_common::Catalog::builtin()
            .get("ml.g5.8xlarge")
            .expect("catalog")
            .resources();
        let r = c
            .client("admin-admin")
            .call(Body::RegisterNode {
                name: "n1".into(),
                instance_type: "ml.g5.8xlarge".into(),
                capacity,
            })
            .await;
        assert!(matches!(r, Ok(Ok(_))), "{r:?}");
    });
    let o = waiting.wait_with_output().expect("wait ends");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "workload w: Admitted\n");
    // Cancelled, it did not finish well: --for finished exits 1 and says how it ended.
    c.cli_ok("user-team-a", &["cancel", "w"]);
    let o = c.cli("user-team-a", &["wait", "w", "--for", "finished"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("workload w: Cancelled"), "{err}");
    let o = c.cli(
        "user-team-a",
        &["wait", "w", "--for", "running", "--timeout", "soon"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("use a number of seconds, or one with ms, s, m, h or d"),
        "{err}"
    );
    // Node JSON says what the table says.
    let nodes: serde_json::Value =
        serde_json::from_str(&c.cli_ok("admin-admin", &["get", "nodes", "-o", "json"]))
            .expect("json");
    assert_eq!(nodes["Nodes"][0]["status"], "Ready", "{nodes}");
}

/// Issue 24, item 1: `allot submit` without a file (flags and `-- COMMAND`), and `-f -` reading
/// YAML or JSON from standard input.
#[test]
fn submit_takes_flags_and_standard_input() {
    use std::io::Write;
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    let out = c.cli_ok(
        "user-team-a",
        &[
            "submit", "--gpus", "1", "--cpus", "4", "--", "python", "train.py",
        ],
    );
    assert!(
        out.starts_with("workload python-"),
        "the generated name is printed: {out}"
    );
    c.cli_ok(
        "user-team-a",
        &[
            "submit",
            "--name",
            "named",
            "--request",
            "gpu=2,memory=8Gi",
            "--count",
            "2",
            "--",
            "sleep",
            "1",
        ],
    );
    for (name, text) in [
        (
            "from-json",
            r#"{"name": "from-json", "team": "team-a", "requests": {"gpu": 1}}"#,
        ),
        (
            "from-yaml",
            "name: from-yaml\nteam: team-a\nrequests: {gpu: 1}\n",
        ),
    ] {
        let mut child = c
            .cli_command("user-team-a", &["submit", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("submit");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
        let o = child.wait_with_output().expect("submit ends");
        assert!(o.status.success());
        assert!(String::from_utf8_lossy(&o.stdout).contains(name));
    }
    let ws = all_workloads(&c);
    let named = ws.iter().find(|w| w.name == "named").expect("named");
    assert_eq!(
        (named.team.as_str(), named.count),
        ("team-a", 2),
        "{named:?}"
    );
    assert_eq!(ws.len(), 4, "{ws:?}");
}
