//! The README's walkthrough, run for real: `allot dev` in a fresh home directory, then every
//! `$ allot ...` line of the walkthrough's console blocks, each checked against the output the
//! README shows (times and node names masked, spacing collapsed). Commands that read are retried
//! until the cluster reaches the state shown; commands that change something run once. Ends with
//! Ctrl-C to `allot dev`, after which no pod process may be left. The walkthrough with images
//! runs the same way against `allot dev --driver containerd`, a private containerd and a
//! loopback registry holding a busybox image (skipped without them, as the container tests are).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../agent/tests/support/containers.rs"]
mod containers;

const BIN: &str = env!("CARGO_BIN_EXE_allot");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// (command, expected output lines) for every `$` line between the `<!-- NAME:start` and
/// `<!-- NAME:end` markers.
fn walkthrough(name: &str) -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme
        .find(&format!("<!-- {name}:start"))
        .expect("walkthrough start marker");
    let end = readme
        .find(&format!("<!-- {name}:end"))
        .expect("walkthrough end marker");
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_console = false;
    for line in readme[start..end].lines() {
        if line.starts_with("```console") {
            in_console = true;
        } else if line.starts_with("```") {
            in_console = false;
        } else if in_console {
            if let Some(cmd) = line.strip_prefix("$ ") {
                steps.push((cmd.to_string(), Vec::new()));
            } else if let Some(last) = steps.last_mut() {
                last.1.push(line.to_string());
            }
        }
    }
    steps
}

/// Masks what differs between runs: times, which nodes were picked, column padding.
fn normalize(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let mut l = String::new();
        let mut rest = line;
        while !rest.is_empty() {
            // A timestamp 2026-11-21T06:29:54Z or ...54.361Z.
            if rest.len() >= 20
                && rest.as_bytes()[4] == b'-'
                && rest.as_bytes()[10] == b'T'
                && rest[..4].bytes().all(|b| b.is_ascii_digit())
            {
                if let Some(z) = rest.find('Z') {
                    l.push_str("<time>");
                    rest = &rest[z + 1..];
                    continue;
                }
            }
            if let Some(r) = rest.strip_prefix("node-") {
                let digits = r.bytes().take_while(|b| b.is_ascii_digit()).count();
                if digits > 0 {
                    l.push_str("node-N");
                    rest = &r[digits..];
                    continue;
                }
            }
            let ch = rest.chars().next().expect("non-empty");
            l.push(ch);
            rest = &rest[ch.len_utf8()..];
        }
        // Durations (0.1s) differ between runs too.
        let words: Vec<&str> = l
            .split_whitespace()
            .map(
                |w| match w.strip_suffix('s').and_then(|n| n.split_once('.')) {
                    Some((a, b))
                        if !a.is_empty()
                            && a.bytes().all(|c| c.is_ascii_digit())
                            && b.bytes().all(|c| c.is_ascii_digit()) =>
                    {
                        "<duration>"
                    }
                    _ => w,
                },
            )
            .collect();
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// Whether `got` is what the README shows: line by line, where a `...` line stands for any
/// number of lines.
fn matches(want: &str, got: &str) -> bool {
    fn m(w: &[&str], g: &[&str]) -> bool {
        match w.split_first() {
            None => g.is_empty(),
            Some((&"...", rest)) => (0..=g.len()).any(|i| m(rest, &g[i..])),
            Some((l, rest)) => g.first() == Some(l) && m(rest, &g[1..]),
        }
    }
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    m(&w, &g)
}

fn run_in(home: &Path, cwd: &Path, cmd: &str) -> String {
    let args = shell_words(cmd);
    assert_eq!(
        args[0], "allot",
        "walkthrough commands start with allot: {cmd}"
    );
    let o = Command::new(BIN)
        .args(&args[1..])
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("ALLOT_COORDINATORS")
        .env_remove("ALLOT_CERTS")
        .env_remove("ALLOT_AS")
        .output()
        .expect("run allot");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Splits a command line the way the shell would for these commands (double and single
/// quotes, no expansion: the walkthrough expands nothing itself).
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted: Option<char> = None;
    let mut any = false;
    for ch in s.chars() {
        match ch {
            '"' | '\'' if quoted.is_none_or(|q| q == ch) => {
                quoted = if quoted.is_some() { None } else { Some(ch) };
                any = true;
            }
            c if c.is_whitespace() && quoted.is_none() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

fn reads(cmd: &str) -> bool {
    [
        "allot get",
        "allot describe",
        "allot explain",
        "allot logs",
        "allot history",
    ]
    .iter()
    .any(|p| cmd.starts_with(p))
}

fn pods_of(home: &Path) -> Vec<u32> {
    let want = format!("HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let env = String::from_utf8_lossy(&env);
        if env.split('\0').any(|v| v == want) && env.contains("ALLOT_WORKLOAD=") {
            out.push(pid);
        }
    }
    out
}

/// Starts `allot dev` with `HOME` at `home` and waits until the CLI can find it. Its ports
/// (a base and offsets above it for HTTP) are drawn below the ephemeral range, where other
/// tests' outgoing connections take theirs; one that `allot dev` finds taken (it exits) is
/// drawn again.
fn start_dev(home: &Path, extra: &[String]) -> std::process::Child {
    for _ in 0..3 {
        let drawn = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .expect("port");
        if let Some(dev) = try_start_dev(home, extra, 20_000 + drawn % 10_000) {
            return dev;
        }
    }
    panic!("allot dev did not start on three ports");
}

/// `start_dev` on one base port; `None` when `allot dev` exited before it was running.
fn try_start_dev(home: &Path, extra: &[String], port: u16) -> Option<std::process::Child> {
    let mut dev = Command::new(BIN)
        .args(["dev", "--port", &port.to_string()])
        .args(extra)
        .current_dir(repo())
        .env("HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("allot dev");
    // `allot dev` says it is running once every node is ready (and has written where it
    // listens, where the CLI reads it).
    use std::io::BufRead;
    let out = dev.stdout.take().expect("dev stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("allot dev is running") {
                let _ = tx.send(());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => {}
        // Its output closed: it exited (a port taken); the caller draws another.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = dev.wait();
            return None;
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = dev.kill();
            let _ = dev.wait();
            panic!("allot dev did not start within 60 s");
        }
    }
    assert!(home.join(".allot/dev/coordinators").exists());
    Some(dev)
}

/// Runs each step in `cwd` and compares its output with the README's (commands that read are
/// retried until they match); the first mismatch, if any.
fn play(home: &Path, cwd: &Path, steps: &[(String, Vec<String>)]) -> Option<String> {
    for (cmd, expected) in steps {
        let want = normalize(&expected.join("\n"));
        let t = Instant::now();
        let mut got;
        loop {
            got = normalize(&run_in(home, cwd, cmd));
            if matches(&want, &got) || !reads(cmd) || t.elapsed() > Duration::from_secs(40) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        if !matches(&want, &got) {
            return Some(format!(
                "$ {cmd}\n--- README shows ---\n{want}\n--- got ---\n{got}\n"
            ));
        }
    }
    None
}

/// Ctrl-C to `allot dev`; how it exited, or `None` when it had not within a minute.
fn stop_dev(dev: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    // SAFETY: kill(2) on our child.
    unsafe {
        libc::kill(dev.id() as i32, libc::SIGINT);
    }
    let t = Instant::now();
    loop {
        if let Ok(Some(s)) = dev.try_wait() {
            return Some(s);
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = dev.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn readme_walkthrough_matches_the_product() {
    let steps = walkthrough("walkthrough");
    assert!(
        steps.len() >= 10,
        "the walkthrough has {} commands",
        steps.len()
    );
    let home = tempfile::tempdir().expect("home");
    let mut dev = start_dev(home.path(), &[]);
    let failure = play(home.path(), &repo(), &steps);
    // A watch prints the same table, then keeps streaming.
    let mut w = Command::new(BIN)
        .args(["get", "workloads", "-w"])
        .current_dir(repo())
        .env("HOME", home.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("watch");
    std::thread::sleep(Duration::from_secs(2));
    let _ = w.kill();
    let watched = w.wait_with_output().expect("watch output");
    let watched = String::from_utf8_lossy(&watched.stdout).to_string();
    // Ctrl-C stops everything.
    let status = stop_dev(&mut dev);
    assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    assert!(watched.contains("imagenet-gpu-team-b-2"), "{watched}");
    assert!(
        status.is_some_and(|s| s.success()),
        "allot dev did not stop cleanly: {status:?}"
    );
    assert!(
        pods_of(home.path()).is_empty(),
        "pods left running after Ctrl-C"
    );
}

#[test]
fn readme_walkthrough_with_images_matches_the_product() {
    let Some(env) = containers::Env::start("readme_walkthrough_with_images") else {
        return;
    };
    // The README's registry is 127.0.0.1:5000; the test's has a free port, put in its place in
    // the commands, the outputs and the example files they read.
    let image = env.push_busybox("busybox", "1");
    assert_eq!(image, format!("{}/busybox:1", env.registry));
    let local = |s: &str| s.replace("127.0.0.1:5000", &env.registry);
    let mut steps = walkthrough("images-walkthrough");
    let (first, _) = steps.remove(0);
    assert!(
        first.starts_with("allot dev --driver containerd"),
        "the images walkthrough starts allot dev: {first}"
    );
    assert!(steps.len() >= 8, "{} commands", steps.len());
    let steps: Vec<(String, Vec<String>)> = steps
        .into_iter()
        .map(|(c, out)| (local(&c), out.iter().map(|l| local(l)).collect()))
        .collect();
    let cwd = tempfile::tempdir().expect("cwd");
    let k8s = cwd.path().join("examples/k8s");
    std::fs::create_dir_all(&k8s).expect("examples dir");
    for e in std::fs::read_dir(repo().join("examples/k8s"))
        .expect("examples/k8s")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).expect("example");
        std::fs::write(k8s.join(e.file_name()), local(&text)).expect("example copy");
    }
    let home = tempfile::tempdir().expect("home");
    let extra = env.driver_args();
    let mut dev = start_dev(home.path(), &extra);
    let failure = play(home.path(), cwd.path(), &steps);
    let status = stop_dev(&mut dev);
    assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    assert!(
        status.is_some_and(|s| s.success()),
        "allot dev did not stop cleanly: {status:?}"
    );
    // Its containers went with it.
    let tasks = Command::new("ctr")
        .arg("-a")
        .arg(&env.socket)
        .args(["-n", &env.namespace, "tasks", "ls", "-q"])
        .output()
        .expect("ctr");
    assert!(
        String::from_utf8_lossy(&tasks.stdout).trim().is_empty(),
        "containers left after Ctrl-C: {}",
        String::from_utf8_lossy(&tasks.stdout)
    );
}

/// Plays walkthrough `name`, whose first command starts `allot dev` with `flag`.
fn play_walkthrough(name: &str, flag: &str, min_steps: usize) {
    let mut steps = walkthrough(name);
    let (first, _) = steps.remove(0);
    let extra: Vec<String> = shell_words(&first).into_iter().skip(2).collect();
    assert!(
        first.starts_with("allot dev ") && extra.contains(&flag.to_string()),
        "the {name} starts allot dev with {flag}: {first}"
    );
    assert!(steps.len() >= min_steps, "{} commands", steps.len());
    let home = tempfile::tempdir().expect("home");
    let mut dev = start_dev(home.path(), &extra);
    let failure = play(home.path(), &repo(), &steps);
    let status = stop_dev(&mut dev);
    assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    assert!(
        status.is_some_and(|s| s.success()),
        "allot dev did not stop cleanly: {status:?}"
    );
}

#[test]
fn readme_walkthrough_with_gpu_partitions_matches_the_product() {
    play_walkthrough("mig-walkthrough", "--mig", 5);
}

#[test]
fn readme_walkthrough_with_topology_matches_the_product() {
    play_walkthrough("topology-walkthrough", "--rack-size", 6);
}
