//! Real container parts for tests: a private containerd (its own root, state and socket in a
//! temporary directory) and a Docker registry on a loopback port, started for the test and
//! stopped after it, and a small busybox image built with umoci and pushed with skopeo.
//!
//! Needs root and Debian's `containerd runc docker-registry umoci skopeo busybox-static
//! apache2-utils`
//! (`.ci/run` installs them). Without them `Env::start` returns `None` and the test says it
//! skipped, unless `ALLOT_REQUIRE_CONTAINERD=1` (CI), where that is a failure.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub struct Env {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    /// `127.0.0.1:PORT`
    pub registry: String,
    pub namespace: String,
    children: Vec<Child>,
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// containerd with the test's config (written by `Env::start` in `dir`), logging to
/// `containerd.log` there (appended to across restarts).
fn spawn_containerd(dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .expect("log");
    Command::new("containerd")
        .arg("--config")
        .arg(dir.join("containerd.toml"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("containerd starts")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Env {
    pub fn start(test: &str) -> Option<Env> {
        let required = std::env::var("ALLOT_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1");
        let root = unsafe { libc::geteuid() } == 0;
        let missing: Vec<&str> = [
            "containerd",
            "runc",
            "docker-registry",
            "umoci",
            "skopeo",
            "htpasswd",
        ]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
        if !root || !missing.is_empty() || !Path::new("/bin/busybox").exists() {
            let why = format!(
                "{test}: skipped: needs root and containerd, runc, docker-registry, umoci, skopeo, \
                 busybox-static (missing: {missing:?}, root: {root})"
            );
            assert!(!required, "{why}");
            eprintln!("{why}");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("allot-ctd-")
            .tempdir()
            .expect("temp dir");
        let socket = dir.path().join("containerd.sock");
        // A config that keeps this containerd away from the host's: its own plugin dirs, no CRI.
        let config = dir.path().join("containerd.toml");
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{1}\"\n[ttrpc]\n  address = \"{1}.ttrpc\"\n",
                dir.path().display(),
                socket.display()
            ),
        )
        .expect("config");
        let ctd = spawn_containerd(dir.path());
        let port = free_port();
        let reg_dir = dir.path().join("registry");
        std::fs::create_dir_all(&reg_dir).expect("registry dir");
        let reg_cfg = dir.path().join("registry.yml");
        std::fs::write(
            &reg_cfg,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                reg_dir.display()
            ),
        )
        .expect("registry config");
        let reg_log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let reg = Command::new("docker-registry")
            .arg("serve")
            .arg(&reg_cfg)
            .stdout(reg_log.try_clone().expect("log"))
            .stderr(reg_log)
            .spawn()
            .expect("docker-registry starts");
        let env = Env {
            socket,
            registry: format!("127.0.0.1:{port}"),
            // Per test: runc keeps its state by namespace and id under /run/containerd/runc,
            // shared by every containerd on the machine.
            namespace: format!(
                "allot-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ),
            children: vec![ctd, reg],
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(env.socket.exists() && std::net::TcpStream::connect(&env.registry).is_ok()) {
            assert!(
                Instant::now() < deadline,
                "containerd or the registry did not come up: {}",
                std::fs::read_to_string(env.dir.path().join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(env)
    }

    /// Stops containerd at once (SIGKILL), as a crash would: the containers' runtime shims
    /// and their processes go on.
    pub fn stop_containerd(&mut self) {
        let ctd = &mut self.children[0];
        let _ = ctd.kill();
        let _ = ctd.wait();
    }

    /// Starts containerd again on the same root, state and socket, and waits until it answers.
    pub fn restart_containerd(&mut self) {
        self.children[0] = spawn_containerd(self.dir.path());
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "containerd did not come back: {}",
                std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The flags that point an agent (or `allot dev`) at this containerd and namespace.
    pub fn driver_args(&self) -> Vec<String> {
        vec![
            "--driver".into(),
            "containerd".into(),
            "--containerd-socket".into(),
            self.socket.display().to_string(),
            "--containerd-namespace".into(),
            self.namespace.clone(),
        ]
    }

    /// Starts a second registry that wants a user and password (htpasswd, bcrypt, as
    /// distribution requires; `htpasswd` comes from apache2-utils); returns its address.
    pub fn start_auth_registry(&mut self, user: &str, password: &str) -> String {
        let port = free_port();
        let dir = self.dir.path().join("registry-auth");
        std::fs::create_dir_all(&dir).expect("registry dir");
        let htpasswd = dir.join("htpasswd");
        run(Command::new("htpasswd")
            .args(["-Bbc"])
            .arg(&htpasswd)
            .args([user, password]));
        let cfg = dir.join("registry.yml");
        std::fs::write(
            &cfg,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: allot-test\n    path: {}\n",
                dir.join("data").display(),
                htpasswd.display()
            ),
        )
        .expect("registry config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&cfg)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        self.children.push(child);
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "the authenticated registry did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        addr
    }

    /// Builds a busybox image (static busybox, `sh` as its cmd) and pushes it as
    /// `REGISTRY/name:tag`; returns that reference.
    pub fn push_busybox(&self, name: &str, tag: &str) -> String {
        self.push_busybox_to(&self.registry.clone(), None, name, tag)
    }

    /// `push_busybox` to another registry, with `user:password` when it needs them.
    pub fn push_busybox_to(
        &self,
        registry: &str,
        creds: Option<&str>,
        name: &str,
        tag: &str,
    ) -> String {
        let work = self
            .dir
            .path()
            .join(format!("build-{}-{tag}", name.replace('/', "_")));
        if work.join("img").exists() {
            // Built already: push the same layout again.
            return self.push_layout(&work.join("img"), registry, creds, name, tag);
        }
        std::fs::create_dir_all(&work).expect("build dir");
        let layout = work.join("img");
        let image = format!("{}:{tag}", layout.display());
        run(Command::new("umoci")
            .args(["init", "--layout"])
            .arg(&layout));
        run(Command::new("umoci").args(["new", "--image", &image]));
        let bundle = work.join("bundle");
        run(Command::new("umoci")
            .args(["unpack", "--rootless", "--image", &image])
            .arg(&bundle));
        let bin = bundle.join("rootfs/bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::copy("/bin/busybox", bin.join("busybox")).expect("busybox");
        for applet in [
            "sh", "echo", "cat", "ls", "sleep", "env", "id", "true", "false", "head", "dd", "kill",
            "test", "tail", "wc", "grep", "mkdir", "touch", "rm", "tr",
        ] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet link");
        }
        std::fs::create_dir_all(bundle.join("rootfs/tmp")).expect("tmp");
        run(Command::new("umoci")
            .args(["repack", "--image", &image])
            .arg(&bundle));
        run(Command::new("umoci").args([
            "config",
            "--image",
            &image,
            "--config.cmd",
            "sh",
            "--config.env",
            "PATH=/bin",
        ]));
        self.push_layout(&layout, registry, creds, name, tag)
    }

    /// A busybox image with more layers: one adding `/etc/passwd` (root, and `ray` as uid
    /// 1000 in group `users`, 100) and `/etc/group`, one above it adding another file, and
    /// `USER user` in its config; pushed as `REGISTRY/name:tag`.
    pub fn push_busybox_with_accounts(&self, name: &str, tag: &str, user: &str) -> String {
        let base = format!("{name}-base");
        self.push_busybox(&base, tag);
        let work = self
            .dir
            .path()
            .join(format!("build-{}-{tag}", base.replace('/', "_")));
        let image = format!("{}:{tag}", work.join("img").display());
        let layer = |n: usize, files: &[(&str, &str)]| {
            let bundle = work.join(format!("bundle-{n}"));
            run(Command::new("umoci")
                .args(["unpack", "--rootless", "--image", &image])
                .arg(&bundle));
            for (path, text) in files {
                let p = bundle.join("rootfs").join(path);
                std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
                std::fs::write(&p, text).expect("file");
            }
            run(Command::new("umoci")
                .args(["repack", "--image", &image])
                .arg(&bundle));
        };
        layer(
            1,
            &[
                (
                    "etc/passwd",
                    "root:x:0:0:root:/root:/bin/sh\nray:x:1000:100::/home/ray:/bin/sh\n",
                ),
                ("etc/group", "root:x:0:\nusers:x:100:ray\nvideo:x:44:ray\n"),
            ],
        );
        layer(2, &[("opt/app/version", "2\n")]);
        run(Command::new("umoci").args(["config", "--image", &image, "--config.user", user]));
        self.push_layout(&work.join("img"), &self.registry.clone(), None, name, tag)
    }

    fn push_layout(
        &self,
        layout: &Path,
        registry: &str,
        creds: Option<&str>,
        name: &str,
        tag: &str,
    ) -> String {
        let dest = format!("{registry}/{name}:{tag}");
        let mut cmd = Command::new("skopeo");
        cmd.args(["copy", "--dest-tls-verify=false"]);
        if let Some(c) = creds {
            cmd.args(["--dest-creds", c]);
        }
        cmd.args([
            &format!("oci:{}:{tag}", layout.display()),
            &format!("docker://{dest}"),
        ]);
        run(&mut cmd);
        dest
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Containers a failed test left: their runtime shims would outlive containerd.
        let sock = self.socket.display().to_string();
        let _ = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "for c in $(ctr -a {sock} -n {ns} tasks ls -q 2>/dev/null); do \
                       ctr -a {sock} -n {ns} tasks kill -s SIGKILL $c; done; sleep 0.3; \
                     for c in $(ctr -a {sock} -n {ns} c ls -q 2>/dev/null); do \
                       ctr -a {sock} -n {ns} tasks rm -f $c; ctr -a {sock} -n {ns} c rm $c; done",
                    ns = self.namespace
                ),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Unmount what containerd left mounted under its root before the directory goes.
        let root = self.dir.path().display().to_string();
        let _ = Command::new("sh")
            .args([
                "-c",
                &format!("grep -o ' {root}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l"),
            ])
            .status();
    }
}
