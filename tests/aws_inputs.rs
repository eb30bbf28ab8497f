//! Issue 25: each row of the table of `aws sagemaker` inputs, through the real CLI against a
//! coordinator: accepted as the AWS CLI and API model accept it, or refused with an error that
//! names the rule.

mod support;

use support::*;

const CQ: &str = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50}";

fn one_replica() -> (Cluster, tokio::runtime::Runtime) {
    let c = Cluster::new(1, 10_000);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    (c, rt)
}

/// `create-compute-quota` with a name and team made from `n`: Ok(stdout) or Err(stderr).
fn quota(c: &Cluster, n: &str, config: &str, target: Option<&str>) -> Result<String, String> {
    let target = target.map_or(format!("TeamName=t-{n}"), String::from);
    let o = c.cli(
        "admin-admin",
        &[
            "create-compute-quota",
            "--name",
            &format!("q-{n}"),
            "--compute-quota-config",
            config,
            "--compute-quota-target",
            &target,
        ],
    );
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

#[test]
fn aws_inputs_are_read_as_the_aws_cli_reads_them_and_checked_as_the_model_says() {
    let (c, _rt) = one_replica();
    let dir = c.dir.path();

    // JSON, and file:// of JSON or shorthand, for every structure argument.
    let out = quota(
        &c,
        "json",
        r#"{"ComputeQuotaResources": [{"InstanceType": "ml.g5.8xlarge", "Count": 1}], "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50}}"#,
        Some(r#"{"TeamName": "t-json", "FairShareWeight": 5}"#),
    )
    .expect("JSON is accepted");
    assert!(out.contains("t-json") && out.contains("Count=1"), "{out}");
    std::fs::write(
        dir.join("cq.json"),
        r#"{"ComputeQuotaResources": [{"InstanceType": "ml.g5.8xlarge", "Count": 2}]}"#,
    )
    .unwrap();
    std::fs::write(dir.join("cq.txt"), format!("{CQ}\n")).unwrap();
    std::fs::write(dir.join("target.txt"), "TeamName=t-file3\n").unwrap();
    let url = |f: &str| format!("file://{}", dir.join(f).display());
    let out = quota(&c, "file1", &url("cq.json"), None).expect("file:// JSON");
    assert!(out.contains("Count=2"), "{out}");
    quota(&c, "file2", &url("cq.txt"), None).expect("file:// shorthand");
    let out = quota(
        &c,
        "file3",
        &format!("fileb://{}", dir.join("cq.txt").display()),
        Some(&url("target.txt")),
    )
    .expect("fileb:// and a target from a file");
    assert!(out.contains("t-file3"), "{out}");
    let e = quota(&c, "file4", "file:///no/such/file", None).unwrap_err();
    assert!(e.contains("cannot read /no/such/file"), "{e}");
    // One value from a file: Key@=file://PATH, as the AWS CLI's shorthand reads it.
    std::fs::write(dir.join("count"), "3\n").unwrap();
    let out = quota(
        &c,
        "file5",
        &format!(
            "ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count@={}}}]",
            url("count")
        ),
        None,
    )
    .expect("Count@=file://");
    assert!(out.contains("Count=3"), "{out}");
    std::fs::write(
        dir.join("sc.json"),
        r#"{"PriorityClasses": [{"Name": "training", "Weight": 70}], "FairShare": "Enabled"}"#,
    )
    .unwrap();
    let out = c.cli_ok(
        "admin-admin",
        &[
            "create-cluster-scheduler-config",
            "--name",
            "sc",
            "--scheduler-config",
            &url("sc.json"),
        ],
    );
    assert!(
        out.contains("PriorityClasses=[{Name=training,Weight=70}],FairShare=Enabled"),
        "{out}"
    );

    // Numbers as Python reads them; quotes removed; the model's ranges.
    let out = quota(
        &c,
        "plus",
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=+2}]",
        None,
    )
    .unwrap();
    assert!(out.contains("Count=2"), "{out}");
    let out = quota(
        &c,
        "exp",
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1e1}]",
        None,
    )
    .unwrap();
    assert!(out.contains("VCpu=10"), "{out}");
    let out = quota(
        &c,
        "quoted",
        CQ,
        Some("TeamName=\"tquo\",FairShareWeight=1"),
    )
    .unwrap();
    assert!(out.contains(" tquo "), "{out}");
    for limit in ["501", "10000"] {
        quota(&c, &format!("bl{limit}"), &format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit={limit}}}"), None)
            .expect("BorrowLimit within the model's 0..=10000");
    }
    let e = quota(&c, "bl", "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=10001}", None).unwrap_err();
    assert!(e.contains("out of range 0..=10000"), "{e}");
    let e = quota(&c, "nostrategy", "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={BorrowLimit=50}", None).unwrap_err();
    assert!(
        e.contains("needs Strategy (required by the API model)"),
        "{e}"
    );
    let rows = vec!["{InstanceType=ml.g5.8xlarge,Count=1}"; 16].join(",");
    let e = quota(&c, "rows", &format!("ComputeQuotaResources=[{rows}]"), None).unwrap_err();
    assert!(
        e.contains("at most 15 are allowed (the API model's list length)"),
        "{e}"
    );
    for field in ["Count", "MemoryInGiB"] {
        let e = quota(
            &c,
            "big",
            &format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,{field}=10000001}}]"),
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("out of range 0..=10000000 (the API model's"),
            "{e}"
        );
    }

    // Names: the model's length and pattern.
    for bad in ["x".repeat(64), "team_a!".to_string()] {
        let o = c.cli(
            "admin-admin",
            &[
                "create-compute-quota",
                "--name",
                &bad,
                "--compute-quota-config",
                CQ,
                "--compute-quota-target",
                "TeamName=t-names",
            ],
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("the AWS API's EntityName"));
    }
    let o = c.cli(
        "admin-admin",
        &[
            "create-compute-quota",
            "--name=-quota",
            "--compute-quota-config",
            CQ,
            "--compute-quota-target",
            "TeamName=t-names",
        ],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("the AWS API's EntityName"));
    for bad in ["-train", "train-"] {
        let o = c.cli(
            "admin-admin",
            &[
                "update-cluster-scheduler-config",
                "--cluster-scheduler-config-id",
                "sc",
                "--target-version",
                "1",
                &format!("--scheduler-config=PriorityClasses=[{{Name={bad},Weight=1}}]"),
            ],
        );
        assert!(!o.status.success(), "{bad}");
    }

    // Where the model is silent: accepted unless a rule AWS documents refuses it.
    quota(&c, "never", "PreemptTeamTasks=Never", None).expect("no resources: no quota of its own");
    quota(&c, "lend", "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=Lend,BorrowLimit=50}", None).expect("Lend with a BorrowLimit");
    quota(&c, "dontlend", "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=DontLend,AbsoluteBorrowLimits=[{InstanceType=ml.g5.8xlarge,Count=1}]}", None).expect("DontLend with AbsoluteBorrowLimits");
    let out = quota(
        &c,
        "both",
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2,Accelerators=1}]",
        None,
    )
    .expect("Count with Accelerators");
    assert!(out.contains("Count=2,Accelerators=1"), "{out}");
    let e = quota(
        &c,
        "noamount",
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge}]",
        None,
    )
    .unwrap_err();
    assert!(e.contains("Terraform module requires one"), "{e}");
    let e = quota(&c, "dup", "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1},{InstanceType=ml.g5.8xlarge,Count=1}]", None).unwrap_err();
    assert!(e.contains("one row each"), "{e}");
    let long = "t".repeat(41);
    let e = quota(&c, "long", CQ, Some(&format!("TeamName={long}"))).unwrap_err();
    assert!(
        e.contains("TeamName pattern") && e.contains("hyperpod-ns-"),
        "{e}"
    );
}

/// Issue 25, item 4: describe and list print the AWS API's response shapes, and the updates
/// take the AWS arguments, each part alone.
#[test]
fn describe_and_list_print_the_api_shapes_and_updates_take_each_part_alone() {
    let (c, _rt) = one_replica();
    quota(&c, "a", CQ, Some("TeamName=team-a,FairShareWeight=10")).expect("created");
    let d: serde_json::Value = serde_json::from_str(&c.cli_ok(
        "admin-admin",
        &[
            "describe-compute-quota",
            "--compute-quota-id",
            "q-a",
            "-o",
            "json",
        ],
    ))
    .expect("json");
    let id = d["ComputeQuotaId"].as_str().expect("id").to_string();
    assert!(
        id.len() == 12
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
        "{id}"
    );
    assert_eq!(
        d["ComputeQuotaArn"],
        format!("arn:aws:sagemaker:local:000000000000:compute-quota/{id}")
    );
    assert_eq!(d["Status"], "Created");
    assert_eq!(d["ComputeQuotaVersion"], 1);
    assert_eq!(d["ActivationState"], "Enabled");
    assert_eq!(d["ComputeQuotaTarget"]["TeamName"], "team-a");
    assert_eq!(d["ComputeQuotaTarget"]["FairShareWeight"], 10);
    let cfg = &d["ComputeQuotaConfig"];
    assert_eq!(
        cfg["ComputeQuotaResources"][0]["InstanceType"],
        "ml.g5.8xlarge"
    );
    assert_eq!(cfg["ComputeQuotaResources"][0]["Count"], 1);
    assert_eq!(cfg["ResourceSharingConfig"]["Strategy"], "LendAndBorrow");
    assert_eq!(cfg["ResourceSharingConfig"]["BorrowLimit"], 50);
    assert_eq!(cfg["PreemptTeamTasks"], "LowerPriority");
    let t = d["CreationTime"].as_str().expect("time");
    assert!(t.ends_with("+00:00") && t.contains('T'), "{t}");
    // The JSON config is an input the CLI takes back.
    let l: serde_json::Value =
        serde_json::from_str(&c.cli_ok("admin-admin", &["list-compute-quotas", "-o", "json"]))
            .expect("json");
    assert_eq!(l["ComputeQuotaSummaries"][0]["ComputeQuotaId"], id.as_str());

    // Only the weight changes; by id; the config stays.
    c.cli_ok(
        "admin-admin",
        &[
            "update-compute-quota",
            "--compute-quota-id",
            &id,
            "--target-version",
            "1",
            "--compute-quota-target",
            "TeamName=team-a,FairShareWeight=20",
        ],
    );
    // Then only the config, given as the JSON describe printed, with one change.
    let mut new_cfg = cfg.clone();
    new_cfg["ComputeQuotaResources"][0]["Count"] = serde_json::json!(2);
    c.cli_ok(
        "admin-admin",
        &[
            "update-compute-quota",
            "--compute-quota-id",
            "q-a",
            "--target-version",
            "2",
            "--compute-quota-config",
            &new_cfg.to_string(),
        ],
    );
    let d: serde_json::Value = serde_json::from_str(&c.cli_ok(
        "admin-admin",
        &[
            "describe-compute-quota",
            "--compute-quota-id",
            &id,
            "-o",
            "json",
        ],
    ))
    .expect("json");
    assert_eq!(d["ComputeQuotaVersion"], 3);
    assert_eq!(d["ComputeQuotaTarget"]["FairShareWeight"], 20);
    assert_eq!(
        d["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Count"],
        2
    );

    // The scheduler config: its shape, and an update by id that changes only the limits.
    c.cli_ok(
        "admin-admin",
        &[
            "create-cluster-scheduler-config",
            "--name",
            "policy",
            "--scheduler-config",
            "PriorityClasses=[{Name=training,Weight=70}],FairShare=Enabled",
            "--description",
            "Training first",
        ],
    );
    let s: serde_json::Value = serde_json::from_str(&c.cli_ok(
        "admin-admin",
        &["describe-cluster-scheduler-config", "-o", "json"],
    ))
    .expect("json");
    let sid = s["ClusterSchedulerConfigId"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(sid.len(), 12);
    assert_eq!(
        s["SchedulerConfig"]["PriorityClasses"][0]["Name"],
        "training"
    );
    assert_eq!(s["SchedulerConfig"]["FairShare"], "Enabled");
    assert_eq!(s["Description"], "Training first");
    c.cli_ok(
        "admin-admin",
        &[
            "update-cluster-scheduler-config",
            "--cluster-scheduler-config-id",
            &sid,
            "--target-version",
            "1",
            "--max-pending-per-team",
            "5",
        ],
    );
    let s: serde_json::Value = serde_json::from_str(&c.cli_ok(
        "admin-admin",
        &["describe-cluster-scheduler-config", "-o", "json"],
    ))
    .expect("json");
    assert_eq!(s["ClusterSchedulerConfigVersion"], 2);
    assert_eq!(s["AdmissionLimits"]["MaxPendingPerTeam"], 5);
    assert_eq!(s["SchedulerConfig"]["PriorityClasses"][0]["Weight"], 70);
    // An update without --description keeps it; one with replaces it; the model's pattern
    // (no control characters) holds for it as for a quota's.
    assert_eq!(s["Description"], "Training first");
    let update = |version: &str, description: &str| {
        c.cli(
            "admin-admin",
            &[
                "update-cluster-scheduler-config",
                "--cluster-scheduler-config-id",
                &sid,
                "--target-version",
                version,
                "--description",
                description,
            ],
        )
    };
    let o = update("2", "bad\u{7}bell");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("control character"),
        "{e}"
    );
    assert!(update("2", "Inference first").status.success());
    let s: serde_json::Value = serde_json::from_str(&c.cli_ok(
        "admin-admin",
        &["describe-cluster-scheduler-config", "-o", "json"],
    ))
    .expect("json");
    assert_eq!(s["ClusterSchedulerConfigVersion"], 3);
    assert_eq!(s["Description"], "Inference first");
    let table = c.cli_ok("admin-admin", &["describe-cluster-scheduler-config"]);
    assert!(table.contains("Description: Inference first"), "{table}");
}

/// Issue 25, item 3: every type of the API's enum is catalogued; a figure no source gives
/// (the GPUs of `ml.g7.*`) comes from the first node of the type that registers, quotas for
/// the type then take it, and `get nodes` says where each figure came from.
#[test]
fn a_figure_the_catalog_lacks_is_learned_from_its_node() {
    let (c, _rt) = one_replica();
    // Refused before these types were catalogued; taken at once now.
    let cfg = "ComputeQuotaResources=[{InstanceType=ml.c8a.16xlarge,Count=1},{InstanceType=ml.g4dn.12xlarge,Accelerators=2}]";
    quota(&c, "cpus", cfg, None).expect("catalogued types");
    let cfg = "ComputeQuotaResources=[{InstanceType=ml.g7.12xlarge,Count=1}]";
    let e = quota(&c, "early", cfg, None).unwrap_err();
    assert!(
        e.contains("ml.g7.12xlarge")
            && e.contains("no source gives its gpu count")
            && e.contains("registered by its agent"),
        "{e}"
    );
    // A type outside the API's enum: the error says so, citing which rule is allot's.
    let bogus = "ComputeQuotaResources=[{InstanceType=ml.p9.96xlarge,Count=1}]";
    let e = quota(&c, "bogus", bogus, None).unwrap_err();
    assert!(
        e.contains("not one of the API's ClusterInstanceType values") && e.contains("allot's rule"),
        "{e}"
    );
    let _agent = c.start_agent("g7-1", "ml.g7.12xlarge", 2, 3.0);
    let node = node_line(&c, "g7-1");
    assert!(node.contains("catalog: cpu,memory; fake: gpu"), "{node}");
    let out = quota(&c, "late", cfg, None).expect("the type is complete now");
    assert!(out.contains("ml.g7.12xlarge"), "{out}");
    // Its nominal quota is one instance: the catalog's 48 vCPUs, the node's 2 GPUs.
    let teams = c.cli_ok("admin-admin", &["get", "teams"]);
    let line = teams
        .lines()
        .find(|l| l.starts_with("t-late"))
        .expect("team t-late");
    assert!(
        line.contains("cpu=48,") && line.contains("gpu=2"),
        "{line} / {node}"
    );
    // A catalogued node says its figures are the catalog's.
    let _g5 = c.start_agent("g5-1", "ml.g5.8xlarge", 1, 3.0);
    let node = node_line(&c, "g5-1");
    assert!(
        node.contains("catalog: cpu,efa,memory; fake: gpu"),
        "{node}"
    );
}

/// Node `name`'s line of `get nodes`, once it has registered.
fn node_line(c: &Cluster, name: &str) -> String {
    wait_for(30, "the node registered", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        out.lines()
            .find(|l| l.starts_with(name))
            .map(str::to_string)
    })
}
