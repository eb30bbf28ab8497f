//! Certificates and mutual TLS for allot's QUIC connections.
//!
//! One cluster CA (`ca.pem`, `ca-key.pem`) signs every certificate. A certificate's holder is
//! named by exactly one URI SAN of the form `allot://<role>/<value>` (see [`Identity`]), which
//! the other side reads with [`identity_of`] after the handshake. Both sides always present a
//! certificate and verify the other's against the CA.
//!
//! Coordinator certificates also carry the DNS name [`SERVER_NAME`]; clients always connect with
//! that server name, whatever address they dial. Coordinator certificates serve as server
//! certificates and as client certificates when coordinators dial each other, so they carry both
//! the serverAuth and clientAuth extended key usages; all other certificates carry clientAuth only.
//!
//! Only rustls's `ring` provider is used, passed explicitly, so no process-wide default provider
//! has to be installed.

use std::fmt;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use crate::wire::ALPN;

/// The server name every client verifies; it is a DNS SAN of every coordinator certificate.
pub const SERVER_NAME: &str = "coordinator.allot";
/// File name of the CA certificate in a certificate directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key in a certificate directory.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// Validity of the cluster CA, in days (10 years).
pub const CA_DAYS: u32 = 3650;
/// Default validity of an issued certificate, in days.
pub const DEFAULT_DAYS: u32 = 365;
/// QUIC keep-alive interval.
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);
/// QUIC idle timeout: a connection with no traffic (keep-alives included) for this long is
/// closed. Short, so that an agent notices a dead coordinator well within its lease.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Concurrent bidirectional streams a peer may open on one connection (one request each; a
/// client has one or two open at a time).
pub const MAX_BIDI_STREAMS: u32 = 64;
/// Bytes a peer may send on one stream before the receiver has read them (QUIC flow control).
pub const STREAM_WINDOW: u32 = 2 << 20;
/// Bytes a peer may send on one connection, all streams together, before the receiver has
/// read them: what a connection can make the other side buffer. At 1 ms of round trip it
/// still carries 4 GB/s.
pub const CONNECTION_WINDOW: u32 = 4 << 20;

const URI_PREFIX: &str = "allot://";
const NAME_RULE: &str =
    "use 1 to 63 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit";
/// Certificates start this long before they are issued, to tolerate clock skew.
const BACKDATE: time::Duration = time::Duration::minutes(5);

/// Who holds a certificate: the principal the coordinator authorizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Identity {
    /// A cluster administrator.
    Admin { name: String },
    /// A member of a team, acting for the team.
    User { team: String },
    /// The agent of one node.
    Node { node: String },
    /// One coordinator replica.
    Coordinator { id: u64 },
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Admin { name } => write!(f, "admin {name:?}"),
            Identity::User { team } => write!(f, "user of team {team:?}"),
            Identity::Node { node } => write!(f, "node {node:?}"),
            Identity::Coordinator { id } => write!(f, "coordinator {id}"),
        }
    }
}

impl Identity {
    /// The role: `admin`, `user`, `node` or `coordinator`.
    pub fn role(&self) -> &'static str {
        match self {
            Identity::Admin { .. } => "admin",
            Identity::User { .. } => "user",
            Identity::Node { .. } => "node",
            Identity::Coordinator { .. } => "coordinator",
        }
    }

    fn value(&self) -> String {
        match self {
            Identity::Admin { name } => name.clone(),
            Identity::User { team } => team.clone(),
            Identity::Node { node } => node.clone(),
            Identity::Coordinator { id } => id.to_string(),
        }
    }

    /// The URI SAN naming this identity, for example `allot://user/team-a`.
    pub fn uri(&self) -> String {
        format!("{URI_PREFIX}{}/{}", self.role(), self.value())
    }

    /// The file name stem of this identity's certificate, for example `user-team-a`.
    pub fn file_stem(&self) -> String {
        format!("{}-{}", self.role(), self.value())
    }

    /// The subject common name, for example `allot user team-a`.
    pub fn common_name(&self) -> String {
        format!("allot {} {}", self.role(), self.value())
    }

    /// Checks the names in this identity.
    pub fn validate(&self) -> Result<(), TlsError> {
        match self {
            Identity::Admin { name } => validate_name("admin name", name),
            Identity::User { team } => validate_name("team name", team),
            Identity::Node { node } => validate_name("node name", node),
            Identity::Coordinator { .. } => Ok(()),
        }
    }

    /// Parses an `allot://<role>/<value>` URI.
    pub fn from_uri(uri: &str) -> Result<Identity, TlsError> {
        let bad = |reason: String| TlsError::BadIdentityUri {
            uri: uri.to_string(),
            reason,
        };
        let rest = uri
            .strip_prefix(URI_PREFIX)
            .ok_or_else(|| bad(format!("it does not start with {URI_PREFIX}")))?;
        let (role, value) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected allot://<role>/<name>".into()))?;
        let identity = match role {
            "admin" => Identity::Admin {
                name: value.to_string(),
            },
            "user" => Identity::User {
                team: value.to_string(),
            },
            "node" => Identity::Node {
                node: value.to_string(),
            },
            "coordinator" => Identity::Coordinator {
                id: value.parse().map_err(|_| {
                    bad(format!(
                        "coordinator id {value:?} is not a number in 0..={}",
                        u64::MAX
                    ))
                })?,
            },
            other => {
                return Err(bad(format!(
                    "unknown role {other:?}; expected admin, user, node or coordinator"
                )))
            }
        };
        identity.validate().map_err(|e| bad(e.to_string()))?;
        Ok(identity)
    }
}

/// Checks a DNS-label-like name: 1 to 63 of `a-z`, `0-9`, `-`, `.`, starting and ending with a
/// letter or digit.
fn validate_name(what: &'static str, value: &str) -> Result<(), TlsError> {
    let invalid = |reason: &str| TlsError::InvalidName {
        what,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    if value.is_empty() {
        return Err(invalid("it is empty"));
    }
    if value.len() > 63 {
        return Err(invalid(&format!("it has {} characters", value.len())));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Err(invalid(&format!("{c:?} is not allowed")));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(value.chars().next()) || !alnum(value.chars().last()) {
        return Err(invalid("it must start and end with a letter or digit"));
    }
    Ok(())
}

/// Errors from creating, loading and using certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("could not read {what} {}: {error}{hint}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        hint: String,
        error: std::io::Error,
    },
    #[error("could not parse {what} {}: {message}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("{} contains no {expected} PEM block; expected the {what}", path.display())]
    NoPemBlock {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("could not create directory {}: {error}", path.display())]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("could not write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} already exists; pass --force to replace the CA (certificates issued by the old CA will no longer be accepted)", path.display())]
    AlreadyExists { path: PathBuf },
    #[error("invalid {what} {value:?}: {reason}; {NAME_RULE}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: String,
    },
    #[error("invalid DNS name {value:?} for --dns: {reason}")]
    InvalidDnsName { value: String, reason: String },
    #[error("--dns and --ip apply only to coordinator certificates, not to {identity}")]
    ExtraNamesNotAllowed { identity: Identity },
    #[error("invalid validity of {days} days: use 1 to {CA_DAYS}")]
    InvalidDays { days: u32 },
    #[error("a certificate valid for {days} days would outlive the CA {}, which expires in {ca_days_left} days; use --days {ca_days_left} or less, or create a new CA", ca.display())]
    OutlivesCa {
        days: u32,
        ca: PathBuf,
        ca_days_left: i64,
    },
    #[error("{} is not a CA certificate", path.display())]
    NotCa { path: PathBuf },
    #[error("CA key {} does not belong to CA certificate {}", key.display(), cert.display())]
    CaKeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("could not generate {what}: {message}")]
    Generate { what: String, message: String },
    #[error("invalid certificate: {reason}")]
    BadCertificate { reason: String },
    #[error("certificate {subject:?} names no allot identity (no allot:// URI SAN); issue one with `allot certs issue`")]
    NoIdentity { subject: String },
    #[error("certificate {subject:?} names {} identities ({}); exactly one allot:// URI SAN is allowed", uris.len(), uris.join(", "))]
    MultipleIdentities { subject: String, uris: Vec<String> },
    #[error("invalid identity URI {uri:?}: {reason}")]
    BadIdentityUri { uri: String, reason: String },
    #[error("certificate {} is for {identity}, which cannot serve: a server needs a coordinator certificate (DNS name {SERVER_NAME}); create one with `allot certs issue --role coordinator --id N`", path.display())]
    NotAServerCertificate { path: PathBuf, identity: String },
    #[error("{context}: {error}")]
    Rustls {
        context: String,
        error: rustls::Error,
    },
    #[error("could not build the client certificate verifier from CA {}: {message}", path.display())]
    Verifier { path: PathBuf, message: String },
    #[error("could not configure QUIC: {0}")]
    Quic(String),
    #[error("the peer presented no certificate")]
    NoPeerCertificate,
}

/// The CA certificate, certificate and key files one endpoint uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// `<dir>/ca.pem`, `<dir>/<file_stem>.pem` and `<dir>/<file_stem>-key.pem`.
    pub fn in_dir(dir: impl AsRef<Path>, file_stem: &str) -> TlsFiles {
        let dir = dir.as_ref();
        TlsFiles {
            ca: dir.join(CA_CERT_FILE),
            cert: dir.join(format!("{file_stem}.pem")),
            key: dir.join(format!("{file_stem}-key.pem")),
        }
    }

    /// The files [`issue`] writes for `identity` in `dir`.
    pub fn for_identity(dir: impl AsRef<Path>, identity: &Identity) -> TlsFiles {
        TlsFiles::in_dir(dir, &identity.file_stem())
    }
}

// ---------------------------------------------------------------------------------------------
// Files

/// The command that creates a missing certificate file, when it can be told from the name.
fn create_hint(path: &Path) -> String {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.display().to_string(),
        _ => ".".to_string(),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == CA_CERT_FILE || name == CA_KEY_FILE {
        return format!("; create one with `allot certs init --dir {dir}`");
    }
    let stem = name
        .strip_suffix("-key.pem")
        .or_else(|| name.strip_suffix(".pem"))
        .unwrap_or(&name);
    let args = match stem.split_once('-') {
        Some(("admin", v)) => format!("--role admin --name {v}"),
        Some(("user", v)) => format!("--role user --team {v}"),
        Some(("node", v)) => format!("--role node --node {v}"),
        Some(("coordinator", v)) => format!("--role coordinator --id {v}"),
        _ => "--role ROLE ...".to_string(),
    };
    format!("; create one with `allot certs issue --dir {dir} {args}`")
}

fn read_file(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        hint: if error.kind() == std::io::ErrorKind::NotFound {
            create_hint(path)
        } else {
            String::new()
        },
        error,
    })
}

fn load_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoPemBlock {
            what,
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

fn load_key(path: &Path, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_file(path, what)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPemBlock {
            what,
            path: path.to_path_buf(),
            expected: "PRIVATE KEY",
        },
        e => TlsError::Pem {
            what,
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    })
}

/// Writes a file atomically (temporary file, then rename). Private files get mode 0600.
fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), TlsError> {
    let err = |error| TlsError::Write {
        path: path.to_path_buf(),
        error,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let result = options.open(&tmp).and_then(|mut f| {
        f.write_all(contents)?;
        f.sync_all()
    });
    let result = result.and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

fn generate_error(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> TlsError {
    let what = what.into();
    move |e| TlsError::Generate {
        what,
        message: e.to_string(),
    }
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "allot");
    dn.push(DnType::CommonName, common_name);
    dn
}

// ---------------------------------------------------------------------------------------------
// CA and issuing

/// Creates the cluster CA in `dir`: `ca.pem` and `ca-key.pem` (mode 0600), valid [`CA_DAYS`]
/// days. Existing files are an error unless `force`.
pub fn init_ca(dir: &Path, force: bool) -> Result<(), TlsError> {
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    if !force {
        for path in [&cert_path, &key_path] {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(TlsError::AlreadyExists { path: path.clone() });
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(|error| TlsError::CreateDir {
        path: dir.to_path_buf(),
        error,
    })?;

    let key = KeyPair::generate().map_err(generate_error("the CA key"))?;
    let mut params = CertificateParams::default();
    // A distinct name per CA, so that a certificate from another allot CA is reported as from an
    // unknown issuer rather than as a bad signature.
    let key_tag: String = key
        .public_key_raw()
        .iter()
        .skip(1)
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    params.distinguished_name = distinguished_name(&format!("allot cluster CA {key_tag}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + time::Duration::days(i64::from(CA_DAYS));
    let cert = params
        .self_signed(&key)
        .map_err(generate_error("the CA certificate"))?;

    write_file(&key_path, key.serialize_pem().as_bytes(), true)?;
    write_file(&cert_path, cert.pem().as_bytes(), false)?;
    Ok(())
}

struct LoadedCa {
    issuer: Issuer<'static, KeyPair>,
    cert_path: PathBuf,
    not_after: OffsetDateTime,
}

fn load_ca(dir: &Path) -> Result<LoadedCa, TlsError> {
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    let certs = load_certs(&cert_path, "CA certificate")?;
    let ca_der = &certs[0];
    let key_der = load_key(&key_path, "CA key")?;
    let key = KeyPair::try_from(&key_der).map_err(|e| TlsError::Pem {
        what: "CA key",
        path: key_path.clone(),
        message: e.to_string(),
    })?;

    let (_, x509) = x509_parser::parse_x509_certificate(ca_der).map_err(|e| TlsError::Pem {
        what: "CA certificate",
        path: cert_path.clone(),
        message: e.to_string(),
    })?;
    if !x509.is_ca() {
        return Err(TlsError::NotCa { path: cert_path });
    }
    if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err(TlsError::CaKeyMismatch {
            cert: cert_path,
            key: key_path,
        });
    }
    let not_after = OffsetDateTime::from_unix_timestamp(x509.validity().not_after.timestamp())
        .map_err(|e| TlsError::Pem {
            what: "CA certificate",
            path: cert_path.clone(),
            message: format!("expiry time out of range: {e}"),
        })?;
    let issuer = Issuer::from_ca_cert_der(ca_der, key).map_err(|e| TlsError::Pem {
        what: "CA certificate",
        path: cert_path.clone(),
        message: e.to_string(),
    })?;
    Ok(LoadedCa {
        issuer,
        cert_path,
        not_after,
    })
}

/// Issues a certificate for `identity`, signed by the CA in `dir`, valid `days` days, and writes
/// `<dir>/<file_stem>.pem` and `<dir>/<file_stem>-key.pem` (mode 0600), replacing existing
/// files. Returns (certificate path, key path).
///
/// Coordinator certificates also name [`SERVER_NAME`], `extra_dns` and `extra_ips`; other roles
/// take no extra names.
pub fn issue(
    dir: &Path,
    identity: &Identity,
    extra_dns: &[String],
    extra_ips: &[IpAddr],
    days: u32,
) -> Result<(PathBuf, PathBuf), TlsError> {
    identity.validate()?;
    if days == 0 || days > CA_DAYS {
        return Err(TlsError::InvalidDays { days });
    }
    let is_coordinator = matches!(identity, Identity::Coordinator { .. });
    if !is_coordinator && (!extra_dns.is_empty() || !extra_ips.is_empty()) {
        return Err(TlsError::ExtraNamesNotAllowed {
            identity: identity.clone(),
        });
    }

    let mut sans = vec![SanType::URI(Ia5String::try_from(identity.uri()).map_err(
        |e| TlsError::BadIdentityUri {
            uri: identity.uri(),
            reason: e.to_string(),
        },
    )?)];
    if is_coordinator {
        let mut dns_names = vec![SERVER_NAME.to_string()];
        for name in extra_dns {
            let invalid = |reason: &str| TlsError::InvalidDnsName {
                value: name.clone(),
                reason: reason.to_string(),
            };
            if name.parse::<IpAddr>().is_ok() {
                return Err(invalid("it is an IP address; pass it with --ip"));
            }
            rustls::pki_types::DnsName::try_from(name.as_str())
                .map_err(|_| invalid("not a valid DNS name"))?;
            let name = name.to_ascii_lowercase();
            if !dns_names.contains(&name) {
                dns_names.push(name);
            }
        }
        for name in dns_names {
            let ia5 = Ia5String::try_from(name.clone()).map_err(|e| TlsError::InvalidDnsName {
                value: name,
                reason: e.to_string(),
            })?;
            sans.push(SanType::DnsName(ia5));
        }
        let mut ips: Vec<IpAddr> = Vec::new();
        for ip in extra_ips {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        sans.extend(ips.into_iter().map(SanType::IpAddress));
    }

    let ca = load_ca(dir)?;
    let now = OffsetDateTime::now_utc();
    let not_after = now + time::Duration::days(i64::from(days));
    if not_after > ca.not_after {
        return Err(TlsError::OutlivesCa {
            days,
            ca: ca.cert_path,
            ca_days_left: (ca.not_after - now).whole_days().max(0),
        });
    }

    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&identity.common_name());
    params.subject_alt_names = sans;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = if is_coordinator {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = not_after;

    let key = KeyPair::generate().map_err(generate_error(format!("a key for {identity}")))?;
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(generate_error(format!("a certificate for {identity}")))?;

    let files = TlsFiles::for_identity(dir, identity);
    write_file(&files.key, key.serialize_pem().as_bytes(), true)?;
    write_file(&files.cert, cert.pem().as_bytes(), false)?;
    Ok((files.cert, files.key))
}

// ---------------------------------------------------------------------------------------------
// Identities

/// The identity a certificate names: its single `allot://` URI SAN.
pub fn identity_from_der(cert_der: &[u8]) -> Result<Identity, TlsError> {
    let (rest, cert) =
        x509_parser::parse_x509_certificate(cert_der).map_err(|e| TlsError::BadCertificate {
            reason: e.to_string(),
        })?;
    if !rest.is_empty() {
        return Err(TlsError::BadCertificate {
            reason: format!("{} trailing bytes after the certificate", rest.len()),
        });
    }
    let subject = cert.subject().to_string();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| TlsError::BadCertificate {
            reason: format!("subject alternative names of {subject:?}: {e}"),
        })?;
    let uris: Vec<String> = san
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::URI(uri) if uri.starts_with(URI_PREFIX) => Some(uri.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    match uris.as_slice() {
        [] => Err(TlsError::NoIdentity { subject }),
        [uri] => Identity::from_uri(uri),
        _ => Err(TlsError::MultipleIdentities { subject, uris }),
    }
}

/// The identity of the peer of an established connection, from its first certificate.
pub fn identity_of(conn: &quinn::Connection) -> Result<Identity, TlsError> {
    let any = conn.peer_identity().ok_or(TlsError::NoPeerCertificate)?;
    let certs = any
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| TlsError::NoPeerCertificate)?;
    let first = certs.first().ok_or(TlsError::NoPeerCertificate)?;
    identity_from_der(first)
}

// ---------------------------------------------------------------------------------------------
// QUIC configuration

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_roots(files: &TlsFiles) -> Result<Arc<rustls::RootCertStore>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(&files.ca, "CA certificate")? {
        roots.add(cert).map_err(|error| TlsError::Rustls {
            context: format!("could not use CA certificate {}", files.ca.display()),
            error,
        })?;
    }
    Ok(Arc::new(roots))
}

fn load_own(
    files: &TlsFiles,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    Ok((
        load_certs(&files.cert, "certificate")?,
        load_key(&files.key, "key")?,
    ))
}

fn cert_key_error(files: &TlsFiles) -> impl FnOnce(rustls::Error) -> TlsError + '_ {
    move |error| TlsError::Rustls {
        context: format!(
            "could not use certificate {} with key {}",
            files.cert.display(),
            files.key.display()
        ),
        error,
    }
}

fn tls13_error(error: rustls::Error) -> TlsError {
    TlsError::Rustls {
        context: "could not enable TLS 1.3".into(),
        error,
    }
}

/// Keep-alive 1 s, idle timeout 4 s, 64 concurrent bidirectional streams, receive windows of
/// 2 MiB per stream and 4 MiB per connection (quinn's default connection window is unbounded).
pub fn transport_config() -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    transport.stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW));
    transport.receive_window(quinn::VarInt::from_u32(CONNECTION_WINDOW));
    // What a sender buffers until acknowledged, per connection (quinn's default is 10 MiB):
    // a coordinator relaying logs to slow readers holds at most this for each.
    transport.send_window(u64::from(CONNECTION_WINDOW));
    transport.keep_alive_interval(Some(KEEP_ALIVE));
    transport.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        IDLE_TIMEOUT.as_millis() as u32,
    ))));
    transport.max_concurrent_bidi_streams(quinn::VarInt::from_u32(MAX_BIDI_STREAMS));
    Arc::new(transport)
}

/// Server side: TLS 1.3, presents `files.cert` (a coordinator certificate), requires a client
/// certificate signed by `files.ca`, ALPN [`ALPN`].
pub fn server_config(files: &TlsFiles) -> Result<quinn::ServerConfig, TlsError> {
    let roots = load_roots(files)?;
    let (chain, key) = load_own(files)?;
    let names_server = match x509_parser::parse_x509_certificate(&chain[0]) {
        Ok((_, cert)) => match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .any(|n| matches!(n, GeneralName::DNSName(d) if *d == SERVER_NAME)),
            _ => false,
        },
        Err(_) => false,
    };
    if !names_server {
        return Err(TlsError::NotAServerCertificate {
            path: files.cert.clone(),
            identity: identity_from_der(&chain[0])
                .map(|i| i.to_string())
                .unwrap_or_else(|e| format!("an unknown holder ({e})")),
        });
    }

    let provider = provider();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Verifier {
                path: files.ca.clone(),
                message: e.to_string(),
            })?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls13_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(cert_key_error(files))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport_config());
    Ok(config)
}

/// Client side: TLS 1.3, verifies the server (as [`SERVER_NAME`]) against `files.ca`, presents
/// `files.cert`, ALPN [`ALPN`].
pub fn client_config(files: &TlsFiles) -> Result<quinn::ClientConfig, TlsError> {
    let roots = load_roots(files)?;
    let (chain, key) = load_own(files)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls13_error)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(cert_key_error(files))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(transport_config());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    fn roles() -> Vec<Identity> {
        vec![
            Identity::Admin {
                name: "alice".into(),
            },
            Identity::User {
                team: "team-a".into(),
            },
            Identity::Node {
                node: "gpu-1".into(),
            },
            Identity::Coordinator { id: 2 },
        ]
    }

    fn cert_der(path: &Path) -> CertificateDer<'static> {
        load_certs(path, "certificate").unwrap().remove(0)
    }

    #[test]
    fn display_uri_and_file_stem() {
        let shown: Vec<String> = roles().iter().map(|i| i.to_string()).collect();
        assert_eq!(
            shown,
            [
                r#"admin "alice""#,
                r#"user of team "team-a""#,
                r#"node "gpu-1""#,
                "coordinator 2"
            ]
        );
        let uris: Vec<String> = roles().iter().map(|i| i.uri()).collect();
        assert_eq!(
            uris,
            [
                "allot://admin/alice",
                "allot://user/team-a",
                "allot://node/gpu-1",
                "allot://coordinator/2"
            ]
        );
        let stems: Vec<String> = roles().iter().map(|i| i.file_stem()).collect();
        assert_eq!(
            stems,
            ["admin-alice", "user-team-a", "node-gpu-1", "coordinator-2"]
        );
        for identity in roles() {
            assert_eq!(Identity::from_uri(&identity.uri()).unwrap(), identity);
        }
    }

    #[test]
    fn bad_names_and_uris_are_refused_with_the_value() {
        for bad in [
            "",
            "Team-A",
            "team_a",
            "-a",
            "a-",
            ".a",
            &"a".repeat(64),
            "a/b",
            "é",
        ] {
            let err = Identity::User { team: bad.into() }.validate().unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("invalid team name {bad:?}: ")),
                "{text}"
            );
        }
        Identity::Node {
            node: "gpu-1.rack-2".into(),
        }
        .validate()
        .unwrap();
        for (uri, needle) in [
            ("https://admin/a", "does not start with allot://"),
            ("allot://admin", "expected allot://<role>/<name>"),
            ("allot://root/a", "unknown role \"root\""),
            ("allot://coordinator/x", "coordinator id \"x\""),
            ("allot://coordinator/-1", "coordinator id \"-1\""),
            ("allot://user/Team", "invalid team name \"Team\""),
            ("allot://user/a/b", "invalid team name \"a/b\""),
        ] {
            let err = Identity::from_uri(uri).unwrap_err().to_string();
            assert!(err.contains(needle), "{uri}: {err}");
            assert!(err.contains(&format!("{uri:?}")), "{uri}: {err}");
        }
    }

    #[test]
    fn init_and_issue_every_role() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("certs");
        init_ca(&dir, false).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(CA_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let ca = cert_der(&dir.join(CA_CERT_FILE));
        assert!(matches!(
            identity_from_der(&ca),
            Err(TlsError::NoIdentity { .. })
        ));

        for identity in roles() {
            let (cert, key) = issue(&dir, &identity, &[], &[], DEFAULT_DAYS).unwrap();
            let files = TlsFiles::for_identity(&dir, &identity);
            assert_eq!((&cert, &key), (&files.cert, &files.key));
            assert_eq!(
                cert.file_name().unwrap().to_str().unwrap(),
                format!("{}.pem", identity.file_stem())
            );
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&key).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600);
            }
            let der = cert_der(&cert);
            assert_eq!(identity_from_der(&der).unwrap(), identity);

            let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
            let eku = x509.extended_key_usage().unwrap().unwrap().value;
            assert!(eku.client_auth);
            let is_coordinator = matches!(identity, Identity::Coordinator { .. });
            assert_eq!(eku.server_auth, is_coordinator);
            assert!(!x509.is_ca());
            let cn = x509.subject().iter_common_name().next().unwrap();
            assert_eq!(cn.as_str().unwrap(), identity.common_name());
            let days = (x509.validity().not_after.timestamp()
                - x509.validity().not_before.timestamp())
                / 86_400;
            assert_eq!(days, i64::from(DEFAULT_DAYS));
        }
        // No temporary files left behind.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        assert_eq!(names.len(), 2 + 2 * roles().len());
    }

    #[test]
    fn coordinator_names() {
        let tmp = tempfile::tempdir().unwrap();
        init_ca(tmp.path(), false).unwrap();
        let id = Identity::Coordinator { id: 1 };
        let ip: IpAddr = Ipv4Addr::new(10, 0, 0, 5).into();
        let (cert, _) = issue(
            tmp.path(),
            &id,
            &["coord-1.example.com".into(), "coordinator.allot".into()],
            &[ip, ip],
            30,
        )
        .unwrap();
        let der = cert_der(&cert);
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        let names: Vec<String> = x509
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::URI(u) => format!("URI:{u}"),
                GeneralName::DNSName(d) => format!("DNSName:{d}"),
                GeneralName::IPAddress(ip) => format!("IPAddress:{ip:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "URI:allot://coordinator/1",
                "DNSName:coordinator.allot",
                "DNSName:coord-1.example.com",
                "IPAddress:[10, 0, 0, 5]"
            ]
        );

        let err = issue(tmp.path(), &id, &["bad name".into()], &[], 30).unwrap_err();
        assert!(err.to_string().contains("\"bad name\""), "{err}");
        let err = issue(tmp.path(), &id, &["10.0.0.1".into()], &[], 30).unwrap_err();
        assert!(err.to_string().contains("--ip"), "{err}");
        let user = Identity::User { team: "a".into() };
        let err = issue(tmp.path(), &user, &["x.example".into()], &[], 30).unwrap_err();
        assert!(
            matches!(err, TlsError::ExtraNamesNotAllowed { .. }),
            "{err}"
        );
        let err = issue(tmp.path(), &user, &[], &[ip], 30).unwrap_err();
        assert!(
            matches!(err, TlsError::ExtraNamesNotAllowed { .. }),
            "{err}"
        );
    }

    #[test]
    fn refuses_to_overwrite_the_ca() {
        let tmp = tempfile::tempdir().unwrap();
        init_ca(tmp.path(), false).unwrap();
        let before = std::fs::read(tmp.path().join(CA_CERT_FILE)).unwrap();
        let err = init_ca(tmp.path(), false).unwrap_err();
        assert!(matches!(err, TlsError::AlreadyExists { .. }));
        let text = err.to_string();
        assert!(text.contains(&tmp.path().join(CA_CERT_FILE).display().to_string()));
        assert!(text.contains("--force"));
        assert_eq!(
            std::fs::read(tmp.path().join(CA_CERT_FILE)).unwrap(),
            before
        );

        // Only the key left over is still refused, and names the key.
        std::fs::remove_file(tmp.path().join(CA_CERT_FILE)).unwrap();
        let err = init_ca(tmp.path(), false).unwrap_err();
        assert!(err.to_string().contains(CA_KEY_FILE), "{err}");

        init_ca(tmp.path(), true).unwrap();
        assert_ne!(
            std::fs::read(tmp.path().join(CA_CERT_FILE)).unwrap(),
            before
        );
    }

    #[test]
    fn issue_errors_name_the_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let user = Identity::User {
            team: "team-a".into(),
        };
        let err = issue(tmp.path(), &user, &[], &[], 30)
            .unwrap_err()
            .to_string();
        assert!(err.contains("could not read CA certificate"), "{err}");
        assert!(err.contains(CA_CERT_FILE), "{err}");
        assert!(err.contains("allot certs init --dir"), "{err}");

        init_ca(tmp.path(), false).unwrap();
        for days in [0, CA_DAYS + 1] {
            let err = issue(tmp.path(), &user, &[], &[], days).unwrap_err();
            assert!(err.to_string().contains(&format!("{days} days")), "{err}");
        }
        let err = issue(tmp.path(), &user, &[], &[], CA_DAYS).unwrap_err();
        assert!(matches!(err, TlsError::OutlivesCa { .. }), "{err}");

        let bad = Identity::User {
            team: "Team A".into(),
        };
        let err = issue(tmp.path(), &bad, &[], &[], 30)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"Team A\""), "{err}");

        // A CA key that does not match the certificate.
        let other = tempfile::tempdir().unwrap();
        init_ca(other.path(), false).unwrap();
        std::fs::copy(other.path().join(CA_KEY_FILE), tmp.path().join(CA_KEY_FILE)).unwrap();
        let err = issue(tmp.path(), &user, &[], &[], 30).unwrap_err();
        assert!(matches!(err, TlsError::CaKeyMismatch { .. }), "{err}");

        // A missing leaf certificate says how to create it.
        let files = TlsFiles::in_dir(tmp.path(), "user-team-b");
        let err = client_config(&files).unwrap_err().to_string();
        assert!(err.contains("could not read certificate"), "{err}");
        assert!(err.contains("--role user --team team-b"), "{err}");

        // Garbage where a certificate should be.
        std::fs::write(&files.cert, "not a certificate").unwrap();
        let err = client_config(&files).unwrap_err().to_string();
        assert!(err.contains("no CERTIFICATE PEM block"), "{err}");
    }

    // -----------------------------------------------------------------------------------------
    // Loopback QUIC

    struct Pki {
        _tmp: tempfile::TempDir,
        dir: PathBuf,
    }

    fn pki(identities: &[Identity]) -> Pki {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        init_ca(&dir, false).unwrap();
        for identity in identities {
            issue(&dir, identity, &[], &[], 30).unwrap();
        }
        Pki { _tmp: tmp, dir }
    }

    fn loopback() -> SocketAddr {
        (Ipv4Addr::LOCALHOST, 0).into()
    }

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn server(dir: &Path, id: u64) -> quinn::Endpoint {
        let files = TlsFiles::for_identity(dir, &Identity::Coordinator { id });
        quinn::Endpoint::server(server_config(&files).unwrap(), loopback()).unwrap()
    }

    /// Accepts one connection and returns the client's identity (or why it failed).
    fn accept_one(endpoint: &quinn::Endpoint) -> tokio::task::JoinHandle<Result<Identity, String>> {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let incoming = endpoint.accept().await.ok_or("endpoint closed")?;
            let conn = incoming.await.map_err(|e| e.to_string())?;
            let identity = identity_of(&conn).map_err(|e| e.to_string())?;
            // Echo one frame back, then wait for the client to close.
            let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
            let msg: Option<String> = crate::wire::read_frame(&mut recv)
                .await
                .map_err(|e| e.to_string())?;
            crate::wire::write_frame(&mut send, &msg)
                .await
                .map_err(|e| e.to_string())?;
            let _ = send.finish();
            conn.closed().await;
            Ok(identity)
        })
    }

    /// Connects and round-trips a frame; returns the server's identity or why it failed.
    async fn connect(config: quinn::ClientConfig, addr: SocketAddr) -> Result<Identity, String> {
        let endpoint = quinn::Endpoint::client(loopback()).map_err(|e| e.to_string())?;
        let conn = endpoint
            .connect_with(config, addr, SERVER_NAME)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let server = identity_of(&conn).map_err(|e| e.to_string())?;
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        crate::wire::write_frame(&mut send, "hello")
            .await
            .map_err(|e| e.to_string())?;
        let echo: Option<Option<String>> = crate::wire::read_frame(&mut recv)
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(echo, Some(Some("hello".to_string())));
        conn.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        Ok(server)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mutual_tls_identifies_both_sides() {
        let mut ids = roles();
        ids.push(Identity::Coordinator { id: 1 });
        let pki = pki(&ids);
        let endpoint = server(&pki.dir, 1);
        let addr = endpoint.local_addr().unwrap();
        for identity in roles() {
            let accepted = accept_one(&endpoint);
            let files = TlsFiles::for_identity(&pki.dir, &identity);
            let client = client_config(&files).unwrap();
            let result = tokio::time::timeout(TIMEOUT, connect(client, addr))
                .await
                .unwrap();
            if let Err(e) = &result {
                panic!("{identity}: client: {e}; server: {:?}", accepted.await);
            }
            assert_eq!(result, Ok(Identity::Coordinator { id: 1 }));
            let seen = tokio::time::timeout(TIMEOUT, accepted)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(seen, Ok(identity));
        }
        endpoint.close(0u32.into(), b"");
    }

    /// Runs a handshake expected to fail; returns (server error, client error).
    async fn refused(endpoint: &quinn::Endpoint, client: quinn::ClientConfig) -> (String, String) {
        let addr = endpoint.local_addr().unwrap();
        let accepted = accept_one(endpoint);
        let client_result = tokio::time::timeout(TIMEOUT, connect(client, addr))
            .await
            .expect("client gave up in time");
        let server_result = tokio::time::timeout(TIMEOUT, accepted)
            .await
            .expect("server gave up in time")
            .unwrap();
        let server_err = server_result.expect_err("server accepted the connection");
        let client_err = client_result.expect_err("client completed a round trip");
        (server_err, client_err)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_certificate_from_another_ca_is_refused() {
        let coordinator = Identity::Coordinator { id: 1 };
        let user = Identity::User {
            team: "team-a".into(),
        };
        let good = pki(std::slice::from_ref(&coordinator));
        let other = pki(std::slice::from_ref(&user));
        // The client trusts the right CA but presents a certificate from another one.
        let mut files = TlsFiles::for_identity(&other.dir, &user);
        files.ca = good.dir.join(CA_CERT_FILE);
        let endpoint = server(&good.dir, 1);
        let (server_err, client_err) = refused(&endpoint, client_config(&files).unwrap()).await;
        assert!(server_err.contains("UnknownIssuer"), "{server_err}");
        // TLS 1.3: the client finishes its handshake before the server has checked its
        // certificate, so it learns why only when it next uses the connection.
        assert!(client_err.contains("UnknownIssuer"), "{client_err}");
        endpoint.close(0u32.into(), b"");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_without_certificate_is_refused() {
        let coordinator = Identity::Coordinator { id: 1 };
        let good = pki(std::slice::from_ref(&coordinator));
        let files = TlsFiles::for_identity(&good.dir, &coordinator);
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(load_roots(&files).unwrap())
            .with_no_client_auth();
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let client = quinn::ClientConfig::new(Arc::new(quic));
        let endpoint = server(&good.dir, 1);
        let (server_err, client_err) = refused(&endpoint, client).await;
        assert!(
            server_err.contains("peer sent no certificates"),
            "{server_err}"
        );
        assert!(
            client_err.contains("peer sent no certificates"),
            "{client_err}"
        );
        endpoint.close(0u32.into(), b"");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_from_another_ca_is_refused() {
        let coordinator = Identity::Coordinator { id: 1 };
        let user = Identity::User {
            team: "team-a".into(),
        };
        let good = pki(std::slice::from_ref(&user));
        let rogue = pki(std::slice::from_ref(&coordinator));
        let endpoint = server(&rogue.dir, 1);
        let client = client_config(&TlsFiles::for_identity(&good.dir, &user)).unwrap();
        let (_, client_err) = refused(&endpoint, client).await;
        assert!(client_err.contains("UnknownIssuer"), "{client_err}");
        endpoint.close(0u32.into(), b"");
    }

    #[test]
    fn only_coordinator_certificates_can_serve() {
        let user = Identity::User {
            team: "team-a".into(),
        };
        let pki = pki(std::slice::from_ref(&user));
        let err = server_config(&TlsFiles::for_identity(&pki.dir, &user)).unwrap_err();
        assert!(
            matches!(err, TlsError::NotAServerCertificate { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("user of team \"team-a\""), "{err}");
    }
}
