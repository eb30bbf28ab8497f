//! The CLI's connection options; the client itself is `allot_net::client`.

use std::path::PathBuf;

use allot_common::api::{ApiError, Body, Reply, WorkloadFilter, WorkloadView};
pub use allot_net::client::Client;
use allot_net::client::ClientError;

/// Where the cluster is and who we are.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientOpts {
    /// Coordinator addresses (host:port, comma-separated); any of them will do.
    #[arg(long, env = "ALLOT_COORDINATORS", value_delimiter = ',', global = true)]
    pub coordinators: Vec<String>,
    /// Directory with ca.pem and the certificate to use [default: certs].
    #[arg(long, env = "ALLOT_CERTS", global = true)]
    pub certs: Option<PathBuf>,
    /// Which certificate in --certs to present: its file stem (admin-admin, user-team-a,
    /// node-gpu-1) [default: admin-admin].
    #[arg(long = "as", env = "ALLOT_AS", global = true)]
    pub identity: Option<String>,
}

impl ClientOpts {
    /// Connects to --coordinators with --certs; without them, to the local `allot dev`
    /// cluster when one runs, else 127.0.0.1:7400 with ./certs.
    pub fn connect(&self) -> anyhow::Result<Client> {
        let local = crate::dev::local_cluster();
        let addrs = match (&self.coordinators, &local) {
            (c, _) if !c.is_empty() => c.clone(),
            (_, Some((a, _))) => a.clone(),
            _ => vec!["127.0.0.1:7400".to_string()],
        };
        let dir = match (&self.certs, &local) {
            (Some(d), _) => d.clone(),
            (None, Some((_, d))) if !PathBuf::from("certs").exists() => d.clone(),
            _ => PathBuf::from("certs"),
        };
        let stem = self.identity.as_deref().unwrap_or("admin-admin");
        let mut c = Client::new(addrs.clone(), &dir, stem)?;
        if let Some(l) = last_leader(&addrs) {
            c.prefer(&l);
        }
        Ok(c)
    }

    /// Remembers which coordinator answered, so the next command asks it first.
    pub fn remember(&self, c: &Client) {
        let Some(addr) = c.answered_by() else { return };
        let Some(path) = leader_file() else { return };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Best effort: a command works the same without it, only its first try may miss.
        let _ = std::fs::write(&path, format!("{}\n{addr}\n", c.addrs().join(",")));
    }
}

/// `~/.allot/leader`: the coordinator list it is for, and the address that last answered.
fn leader_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".allot").join("leader"))
}

fn last_leader(addrs: &[String]) -> Option<String> {
    let text = std::fs::read_to_string(leader_file()?).ok()?;
    let mut lines = text.lines();
    let mut for_addrs: Vec<&str> = lines.next()?.split(',').collect();
    let leader = lines.next()?.trim().to_string();
    let mut ours: Vec<&str> = addrs.iter().map(String::as_str).collect();
    for_addrs.sort_unstable();
    ours.sort_unstable();
    (for_addrs == ours && addrs.contains(&leader)).then_some(leader)
}

/// A reply, with the coordinator's refusal turned into an error ("Kind: message").
pub fn api(r: Result<Result<Reply, ApiError>, ClientError>) -> anyhow::Result<Reply> {
    match r? {
        Ok(r) => Ok(r),
        Err(e) => Err(anyhow::anyhow!("{:?}: {}", e.kind, e.message)),
    }
}

/// Whether a refusal says the coordinator is of a release before the request's protocol: it
/// refuses the version, or (before protocol 6) cannot decode the request at all.
pub fn older_release(e: &ApiError) -> bool {
    e.kind == allot_common::api::ErrorKind::Version
        || (e.kind == allot_common::api::ErrorKind::Invalid
            && e.message.starts_with("could not read the request"))
}

/// One request; a refusal is an error.
pub async fn call(c: &mut Client, b: Body) -> anyhow::Result<Reply> {
    api(c.call(b).await)
}

/// One long poll of the workloads `filter` selects: answers when they differ from what
/// `digest` stands for, or after `wait_ms`, with their new digest.
pub async fn watch_once(
    c: &mut Client,
    filter: WorkloadFilter,
    digest: u64,
    wait_ms: u32,
) -> anyhow::Result<(u64, Vec<WorkloadView>)> {
    let body = Body::WatchWorkloads {
        filter,
        known_digest: digest,
        wait_ms,
    };
    match call(c, body).await? {
        Reply::WorkloadsAt { digest, workloads } => Ok((digest, workloads)),
        reply => anyhow::bail!("unexpected answer to a watch: {reply:?}"),
    }
}
