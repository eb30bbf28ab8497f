//! The containerd driver against a real containerd, runc and registry (see support/containers.rs).

#[path = "support/containers.rs"]
mod containers;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use allot_agent::containerd::run::{self, ContainerJob, JOB_FILE};
use allot_agent::containerd::{pull, Containerd};
use allot_agent::shim::{self, ExitRecord, ShimArgs};

fn job(env: &containers::Env, image: &str, command: &[&str]) -> ContainerJob {
    ContainerJob {
        socket: env.socket.clone(),
        namespace: env.namespace.clone(),
        snapshotter: "overlayfs".into(),
        dev_dir: "/dev".into(),
        image: image.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::from([("RANK".to_string(), "0".to_string())]),
        hostname: "pod-0".into(),
        ..Default::default()
    }
}

/// Runs one pod through the shim's container mode, in this process; returns its exit record,
/// its log and how long it took.
fn run_pod(j: &ContainerJob) -> (ExitRecord, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("9-1-0");
    std::fs::create_dir_all(&pod).unwrap();
    std::fs::write(pod.join(JOB_FILE), serde_json::to_vec(j).unwrap()).unwrap();
    let lease = dir.path().join("lease");
    std::fs::write(&lease, (shim::now_ms() + 600_000).to_string()).unwrap();
    let args = ShimArgs {
        dir: pod.clone(),
        lease_file: lease,
        lease_ms: 10_000,
        grace_ms: 2000,
        cgroup: None,
        workdir: None,
        container: true,
        adopt: false,
        program: vec![],
    };
    let t = Instant::now();
    run::run(&args);
    let took = t.elapsed();
    let rec: ExitRecord =
        serde_json::from_slice(&std::fs::read(pod.join(shim::EXIT_FILE)).unwrap()).unwrap();
    let log = std::fs::read_to_string(pod.join(shim::LOG_FILE)).unwrap_or_default();
    (rec, log, took)
}

async fn connect(env: &containers::Env) -> Containerd {
    Containerd::connect(&env.socket, &env.namespace)
        .await
        .unwrap()
}

#[test]
fn pulls_runs_and_reports_the_exit_code_and_output() {
    let Some(env) = containers::Env::start("pulls_runs_and_reports") else {
        return;
    };
    let image = env.push_busybox("busybox", "1");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (first, second) = rt.block_on(async {
        let ctd = connect(&env).await;
        let mut seen = Vec::new();
        let first = pull::pull(&ctd, &image, "overlayfs", &[], None, &mut |d, t| {
            seen.push((d, t))
        })
        .await
        .unwrap();
        assert!(
            seen.last().is_some_and(|(d, t)| d == t && *t > 0),
            "{seen:?}"
        );
        let second = pull::pull(&ctd, &image, "overlayfs", &[], None, &mut |_, _| {})
            .await
            .unwrap();
        (first, second)
    });
    assert!(!first.cached && second.cached);
    assert_eq!(first.chain_id, second.chain_id);
    assert_eq!(first.config.cmd, Some(vec!["sh".to_string()]));

    let mut j = job(
        &env,
        &image,
        &[
            "sh",
            "-c",
            "echo hello rank $RANK from $(hostname); echo oops >&2; exit 3",
        ],
    );
    j.memory_limit = 256 << 20;
    j.cpu_millis = 500;
    let (rec, log, _) = run_pod(&j);
    assert_eq!((rec.code, rec.succeeded), (Some(3), false), "{rec:?}");
    assert!(log.contains("hello rank 0 from pod-0"), "{log}");
    assert!(log.contains("oops"), "{log}");
    // stdout ends first and stderr goes on: its lines still reach the log (with containerd's
    // file:// log both streams share one descriptor, which the end of stdout closes).
    let j = job(
        &env,
        &image,
        &[
            "sh",
            "-c",
            "echo first; exec 1>&-; sleep 0.3; echo late >&2",
        ],
    );
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?}");
    assert_eq!(log, "first\nlate\n");
    // The image's cmd runs when the workload gives none.
    let mut j = job(&env, &image, &[]);
    j.args = vec!["-c".into(), "echo from-args".into()];
    j.command = vec!["sh".into()];
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?}");
    assert_eq!(log.trim(), "from-args");
    // Nothing is left behind in containerd.
    let left = rt.block_on(async { connect(&env).await.containers().await.unwrap() });
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_missing_image_fails_promptly_with_the_registry_message() {
    let Some(env) = containers::Env::start("a_missing_image_fails") else {
        return;
    };
    let j = job(&env, &format!("{}/nosuch:1", env.registry), &["true"]);
    let (rec, _, took) = run_pod(&j);
    assert!(!rec.succeeded);
    assert!(rec.detail.starts_with("ImagePullFailed:"), "{}", rec.detail);
    assert!(
        rec.detail.contains("MANIFEST_UNKNOWN") || rec.detail.contains("NAME_UNKNOWN"),
        "{}",
        rec.detail
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    // A registry that is not there.
    let j = job(&env, "127.0.0.1:1/busybox:1", &["true"]);
    let (rec, _, _) = run_pod(&j);
    assert!(
        rec.detail.starts_with("ImagePullFailed:") && rec.detail.contains("could not reach"),
        "{}",
        rec.detail
    );
}

#[test]
fn a_memory_limit_kills_the_pod_and_says_oomkilled() {
    let Some(env) = containers::Env::start("a_memory_limit_kills") else {
        return;
    };
    let image = env.push_busybox("busybox", "1");
    let mut j = job(
        &env,
        &image,
        &[
            "sh",
            "-c",
            "x=$(head -c 300000000 /dev/zero | tr '\\0' x); echo survived",
        ],
    );
    j.memory_limit = 50_000_000;
    let (rec, log, _) = run_pod(&j);
    assert!(!rec.succeeded, "{rec:?}");
    assert!(rec.detail.starts_with("OOMKilled"), "{rec:?} {log}");
    assert!(!log.contains("survived"), "{log}");
}

#[test]
fn only_the_assigned_gpu_device_nodes_are_visible() {
    let Some(env) = containers::Env::start("only_the_assigned_gpu_device_nodes") else {
        return;
    };
    let image = env.push_busybox("busybox", "1");
    // Fake GPU nodes: character devices with /dev/null's numbers, named as NVIDIA's are.
    let dev = env.dir.path().join("fake-dev");
    std::fs::create_dir_all(&dev).unwrap();
    for n in ["nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl"] {
        let p = std::ffi::CString::new(dev.join(n).to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mknod(2) with a valid path; creates a device node in the test's directory.
        let rc = unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(rc, 0, "mknod {n}");
    }
    let mut j = job(
        &env,
        &image,
        &[
            "sh",
            "-c",
            "ls /dev | grep nvidia; echo x > /dev/nvidia2 && echo wrote",
        ],
    );
    j.dev_dir = dev.clone();
    j.devices = BTreeMap::from([("gpu".to_string(), vec![1u8, 2])]);
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?} {log}");
    let seen: Vec<&str> = log.lines().collect();
    assert_eq!(seen, ["nvidia1", "nvidia2", "nvidiactl", "wrote"], "{log}");
    assert!(Path::new(&dev).exists());
}

#[test]
fn gpus_come_from_the_nodes_cdi_spec_with_its_mounts_variables_and_hooks() {
    let Some(env) = containers::Env::start("gpus_come_from_the_nodes_cdi_spec") else {
        return;
    };
    let image = env.push_busybox("busybox", "1");
    let dev = env.dir.path().join("fake-dev");
    std::fs::create_dir_all(&dev).unwrap();
    for n in ["nvidia0", "nvidia1", "nvidiactl"] {
        let p = std::ffi::CString::new(dev.join(n).to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mknod(2) with a valid path; creates a device node in the test's directory.
        let rc = unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(rc, 0, "mknod {n}");
    }
    // A spec as `nvidia-ctk cdi generate` writes one: devices by index, the control node, the
    // driver's files as read-only mounts, a variable and a hook, at the spec's level.
    let driver = env.dir.path().join("driver");
    std::fs::create_dir_all(&driver).unwrap();
    std::fs::write(driver.join("libcuda.txt"), "libcuda from the host\n").unwrap();
    let hook_ran = env.dir.path().join("hook-ran");
    let cdi = env.dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let d = dev.display();
    std::fs::write(
        cdi.join("nvidia.yaml"),
        format!(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n\
             - name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n      hostPath: {d}/nvidia0\n\
             - name: \"1\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n      hostPath: {d}/nvidia1\n\
             containerEdits:\n  env:\n  - ALLOT_CDI=from-spec\n  deviceNodes:\n  - path: /dev/nvidiactl\n    hostPath: {d}/nvidiactl\n\
             \x20 mounts:\n  - hostPath: {}\n    containerPath: /usr/lib/driver\n    options: [ro, nosuid, nodev, bind]\n\
             \x20 hooks:\n  - hookName: createRuntime\n    path: /bin/sh\n    args: [sh, -c, 'echo ran > {}']\n",
            driver.display(),
            hook_ran.display()
        ),
    )
    .unwrap();
    let mut j = job(
        &env,
        &image,
        &[
            "sh",
            "-c",
            "ls /dev | grep nvidia; echo $ALLOT_CDI; cat /usr/lib/driver/libcuda.txt; \
             (echo x > /usr/lib/driver/w) 2>/dev/null || echo read-only",
        ],
    );
    j.dev_dir = dev.clone();
    j.cdi_dirs = vec![env.dir.path().join("no-such-dir"), cdi.clone()];
    j.devices = BTreeMap::from([("gpu".to_string(), vec![1u8])]);
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?} {log}");
    let seen: Vec<&str> = log.lines().collect();
    assert_eq!(
        seen,
        [
            "nvidia1",
            "nvidiactl",
            "from-spec",
            "libcuda from the host",
            "read-only"
        ],
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(&hook_ran)
            .unwrap_or_default()
            .trim(),
        "ran"
    );
    // A GPU the spec does not name fails the pod, saying what the spec has.
    j.devices = BTreeMap::from([("gpu".to_string(), vec![3u8])]);
    let (rec, log, _) = run_pod(&j);
    assert!(!rec.succeeded, "{rec:?} {log}");
    assert!(
        rec.detail.contains("ContainerCannotRun") && rec.detail.contains("nvidia.com/gpu=3"),
        "{rec:?}"
    );
    assert!(rec.detail.contains("it has 0, 1"), "{rec:?}");
}

#[test]
fn user_names_come_from_the_images_own_passwd_and_group() {
    let Some(env) = containers::Env::start("user_names_come_from_the_images") else {
        return;
    };
    let image = env.push_busybox_with_accounts("accounts", "1", "ray");
    let id = ["sh", "-c", "echo $(id -u):$(id -g)"];
    // The image's USER, a name in a middle layer's /etc/passwd.
    let j = job(&env, &image, &id);
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?} {log}");
    assert_eq!(log.trim(), "1000:100");
    // The workload's user wins: a name with a group name, and numbers (no lookup).
    let mut j = job(&env, &image, &id);
    j.user = Some("ray:video".into());
    let (rec, log, _) = run_pod(&j);
    assert_eq!(log.trim(), "1000:44", "{rec:?}");
    j.user = Some("4242:7".into());
    let (_, log, _) = run_pod(&j);
    assert_eq!(log.trim(), "4242:7");
    // A name the image does not have fails the pod, saying so.
    j.user = Some("bob".into());
    let (rec, _, _) = run_pod(&j);
    assert!(!rec.succeeded);
    assert!(
        rec.detail.contains("ContainerCannotRun") && rec.detail.contains("no user \"bob\""),
        "{rec:?}"
    );
}

#[test]
fn a_registry_that_wants_credentials_gets_them() {
    let Some(mut env) = containers::Env::start("a_registry_that_wants_credentials") else {
        return;
    };
    let reg = env.start_auth_registry("puller", "s3cret pass");
    let image = env.push_busybox_to(&reg, Some("puller:s3cret pass"), "private/busybox", "1");
    let mut j = job(&env, &image, &["sh", "-c", "echo private"]);
    let (rec, _, _) = run_pod(&j);
    assert!(rec.detail.starts_with("ImagePullFailed:"), "{}", rec.detail);
    assert!(rec.detail.contains("needs credentials"), "{}", rec.detail);
    j.credentials = Some(allot_common::image::Credentials {
        username: "puller".into(),
        password: "wrong".into(),
    });
    let (rec, _, _) = run_pod(&j);
    assert!(
        rec.detail.contains("refused the credentials") || rec.detail.contains("UNAUTHORIZED"),
        "{}",
        rec.detail
    );
    j.credentials = Some(allot_common::image::Credentials {
        username: "puller".into(),
        password: "s3cret pass".into(),
    });
    let (rec, log, _) = run_pod(&j);
    assert!(rec.succeeded, "{rec:?}");
    assert_eq!(log.trim(), "private");
}
