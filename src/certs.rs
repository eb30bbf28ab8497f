//! `allot certs`: create the cluster CA and issue certificates for admins, teams, nodes and
//! coordinators. The work is done by `allot_net::tls`; this module maps flags to it.

use std::net::IpAddr;
use std::path::PathBuf;

use allot_net::tls::{self, Identity};
use anyhow::bail;

#[derive(Debug, clap::Subcommand)]
pub enum CertsCmd {
    /// Create the cluster CA (ca.pem and ca-key.pem, valid 10 years) and the dashboard's session
    /// key (web-session.key). Keep both secret: whoever holds ca-key.pem can issue certificates
    /// for any role, and web-session.key signs browser sessions.
    Init {
        /// Directory for the CA files (created if missing).
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
        /// Replace an existing CA; certificates issued by the old one stop being accepted.
        #[arg(long)]
        force: bool,
    },
    /// Make the dashboard's session key (web-session.key, 64 hexadecimal digits) in the
    /// directory unless it has one; every coordinator reads it from its certificate directory.
    WebKey {
        /// Directory of the certificates.
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
    },
    /// Issue a certificate and key signed by the cluster CA, written as <role>-<name>.pem and
    /// <role>-<name>-key.pem next to the CA.
    Issue {
        /// Directory holding ca.pem and ca-key.pem; the new files are written there.
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
        /// Whom the certificate is for.
        #[arg(long, value_enum)]
        role: Role,
        /// Admin name, for --role admin [default: admin].
        #[arg(long)]
        name: Option<String>,
        /// Team the user acts for (required for --role user).
        #[arg(long)]
        team: Option<String>,
        /// Node name (required for --role node).
        #[arg(long)]
        node: Option<String>,
        /// Coordinator id (required for --role coordinator).
        #[arg(long)]
        id: Option<u64>,
        /// Extra DNS name of a coordinator (repeatable); coordinator.allot is always included.
        #[arg(long, value_name = "NAME")]
        dns: Vec<String>,
        /// IP address of a coordinator (repeatable).
        #[arg(long, value_name = "ADDR")]
        ip: Vec<IpAddr>,
        /// Validity in days.
        #[arg(long, default_value_t = tls::DEFAULT_DAYS)]
        days: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Admin,
    User,
    Node,
    Coordinator,
}

pub fn run(cmd: CertsCmd) -> anyhow::Result<()> {
    match cmd {
        CertsCmd::Init { dir, force } => {
            tls::init_ca(&dir, force)?;
            println!(
                "wrote {} and {} (cluster CA, valid {} days); keep {} secret",
                dir.join(tls::CA_CERT_FILE).display(),
                dir.join(tls::CA_KEY_FILE).display(),
                tls::CA_DAYS,
                tls::CA_KEY_FILE,
            );
            if allot_coordinator::web_session::ensure_key(&dir).map_err(anyhow::Error::msg)? {
                println!(
                    "wrote {} (signs dashboard sessions; give it to every coordinator with its \
                     certificate, and keep it secret)",
                    dir.join("web-session.key").display()
                );
            }
        }
        CertsCmd::WebKey { dir } => {
            let made =
                allot_coordinator::web_session::ensure_key(&dir).map_err(anyhow::Error::msg)?;
            let path = dir.join("web-session.key");
            if made {
                println!("wrote {} (keep it secret)", path.display());
            } else {
                println!("{} is there; kept", path.display());
            }
        }
        CertsCmd::Issue {
            dir,
            role,
            name,
            team,
            node,
            id,
            dns,
            ip,
            days,
        } => {
            let identity = identity(role, name, team, node, id)?;
            let (cert, key) = tls::issue(&dir, &identity, &dns, &ip, days)?;
            println!(
                "wrote {} and {} ({identity}, valid {days} days)",
                cert.display(),
                key.display()
            );
        }
    }
    Ok(())
}

/// The identity the flags describe: the flag the role needs must be given, and flags of other
/// roles must not be.
fn identity(
    role: Role,
    name: Option<String>,
    team: Option<String>,
    node: Option<String>,
    id: Option<u64>,
) -> anyhow::Result<Identity> {
    let given = [
        ("--name", Role::Admin, name.is_some()),
        ("--team", Role::User, team.is_some()),
        ("--node", Role::Node, node.is_some()),
        ("--id", Role::Coordinator, id.is_some()),
    ];
    for (flag, owner, present) in given {
        if present && owner != role {
            bail!(
                "{flag} applies only to --role {}, not to --role {}",
                role_name(owner),
                role_name(role)
            );
        }
    }
    let missing = |flag: &str, value: &str| {
        anyhow::anyhow!("--role {} needs {flag} {value}", role_name(role))
    };
    Ok(match role {
        Role::Admin => Identity::Admin {
            name: name.unwrap_or_else(|| "admin".to_string()),
        },
        Role::User => Identity::User {
            team: team.ok_or_else(|| missing("--team", "TEAM"))?,
        },
        Role::Node => Identity::Node {
            node: node.ok_or_else(|| missing("--node", "NODE"))?,
        },
        Role::Coordinator => Identity::Coordinator {
            id: id.ok_or_else(|| missing("--id", "N"))?,
        },
    })
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::User => "user",
        Role::Node => "node",
        Role::Coordinator => "coordinator",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: CertsCmd,
    }

    fn parse(args: &[&str]) -> CertsCmd {
        Cli::try_parse_from(std::iter::once("certs").chain(args.iter().copied()))
            .unwrap()
            .cmd
    }

    #[test]
    fn init_then_issue_every_role() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("certs");
        let dir_arg = dir.to_str().unwrap();
        run(parse(&["init", "--dir", dir_arg])).unwrap();
        let err = run(parse(&["init", "--dir", dir_arg])).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
        run(parse(&["init", "--dir", dir_arg, "--force"])).unwrap();

        for (args, stem) in [
            (vec!["--role", "admin"], "admin-admin"),
            (vec!["--role", "admin", "--name", "alice"], "admin-alice"),
            (vec!["--role", "user", "--team", "team-a"], "user-team-a"),
            (vec!["--role", "node", "--node", "gpu-1"], "node-gpu-1"),
            (
                vec![
                    "--role",
                    "coordinator",
                    "--id",
                    "2",
                    "--dns",
                    "c2.example",
                    "--ip",
                    "10.0.0.2",
                ],
                "coordinator-2",
            ),
        ] {
            let mut full = vec!["issue", "--dir", dir_arg, "--days", "30"];
            full.extend(args);
            run(parse(&full)).unwrap();
            assert!(dir.join(format!("{stem}.pem")).is_file(), "{stem}");
            assert!(dir.join(format!("{stem}-key.pem")).is_file(), "{stem}");
        }
    }

    #[test]
    fn flags_must_match_the_role() {
        let cases: [(&[&str], &str); 5] = [
            (&["--role", "user"], "--role user needs --team TEAM"),
            (&["--role", "node"], "--role node needs --node NODE"),
            (
                &["--role", "coordinator"],
                "--role coordinator needs --id N",
            ),
            (
                &["--role", "user", "--team", "a", "--name", "x"],
                "--name applies only to --role admin, not to --role user",
            ),
            (
                &["--role", "admin", "--id", "1"],
                "--id applies only to --role coordinator, not to --role admin",
            ),
        ];
        for (args, message) in cases {
            let mut full = vec!["issue"];
            full.extend(args);
            let err = run(parse(&full)).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        let err = run(parse(&["issue", "--role", "user", "--team", "Bad_Team"])).unwrap_err();
        assert!(err.to_string().contains("\"Bad_Team\""), "{err}");
    }

    #[test]
    fn a_missing_ca_says_how_to_create_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let err = run(parse(&[
            "issue", "--dir", dir, "--role", "user", "--team", "a",
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("allot certs init --dir"), "{err}");
    }
}
