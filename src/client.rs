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
    pub fn connect(&self) -> anyhow::Result<Client> {
        let addrs = if self.coordinators.is_empty() {
            vec!["127.0.0.1:7400".to_string()]
        } else {
            self.coordinators.clone()
        };
        let dir = self.certs.clone().unwrap_or_else(|| PathBuf::from("certs"));
        let stem = self.identity.as_deref().unwrap_or("admin-admin");
        Ok(Client::new(addrs, &dir, stem)?)
    }
}
