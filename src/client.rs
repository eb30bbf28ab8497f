//! The CLI's connection options; the client itself is `allot_common::client`.

use std::path::PathBuf;

pub use allot_common::client::Client;

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
        Ok(Client::new(addrs, &dir, stem)?)
    }
}
