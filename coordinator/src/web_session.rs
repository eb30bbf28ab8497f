//! Who a browser is: one-time login tickets (`allot dashboard` asks for one over the API, with
//! the user's certificate) and the session cookies they are exchanged for, both signed with
//! HMAC-SHA256 under `web-session.key`: the cluster's, beside the certificates (`allot certs
//! init` and the Kubernetes certificate Job make it), so that any replica takes what another
//! issued (a Service spreads a browser's requests over them); else the replica's own, made in
//! its data directory on first start. A token says who (an admin or a team user, as the
//! certificate did), what it is (ticket or session) and until when; a ticket is taken once.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use allot_net::tls::Identity;
use ring::hmac;

/// How long a ticket may wait to be used.
pub const TICKET_MS: i64 = 120_000;
/// How long a browser session lasts.
pub const SESSION_MS: i64 = 12 * 3_600_000;
/// The longest token accepted, in bytes (an identity URI is short).
const MAX_TOKEN: usize = 1024;
/// Tickets remembered as used, at most (each is forgotten when it would have expired).
const MAX_USED: usize = 10_000;

const KEY_FILE: &str = "web-session.key";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ticket,
    Session,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Ticket => "ticket",
            Kind::Session => "session",
        }
    }
}

pub struct WebSessions {
    key: hmac::Key,
    /// Used tickets (their signatures, hex) and when they expire.
    used: Mutex<BTreeMap<String, i64>>,
}

impl WebSessions {
    /// The cluster's key from `certs_dir` where there is one, else the replica's own from
    /// `data_dir`, made there (32 random bytes, mode 0600) if there is none.
    pub fn open(certs_dir: &Path, data_dir: &Path) -> Result<WebSessions, String> {
        let shared = certs_dir.join(KEY_FILE);
        let path = if shared.exists() {
            shared
        } else {
            data_dir.join(KEY_FILE)
        };
        let bytes = match std::fs::read_to_string(&path) {
            Ok(text) => unhex(text.trim())
                .filter(|b| b.len() == 32)
                .ok_or_else(|| {
                    format!(
                        "{} is not a web session key: expected 64 hexadecimal digits (32 bytes), \
                         as `allot certs web-key` writes; remove it and make a new one (every \
                         browser is signed out)",
                        path.display()
                    )
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => make_key(&path)?,
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        Ok(WebSessions::with_key(&bytes))
    }

    pub fn with_key(bytes: &[u8]) -> WebSessions {
        WebSessions {
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes),
            used: Mutex::new(BTreeMap::new()),
        }
    }

    /// A token of `kind` for `who`, valid until `now_ms + ttl`.
    pub fn issue(&self, who: &Identity, kind: Kind, now_ms: i64) -> (String, i64) {
        let ttl = match kind {
            Kind::Ticket => TICKET_MS,
            Kind::Session => SESSION_MS,
        };
        let expires = now_ms + ttl;
        let payload = format!("{}|{}|{}", kind.word(), expires, who.uri());
        let tag = hmac::sign(&self.key, payload.as_bytes());
        (
            format!("{}.{}", hex(payload.as_bytes()), hex(tag.as_ref())),
            expires,
        )
    }

    /// Who `token` names, if it is a valid, unexpired token of `kind` (a ticket: not used
    /// before; this use takes it).
    pub fn verify(&self, token: &str, kind: Kind, now_ms: i64) -> Result<Identity, String> {
        if token.len() > MAX_TOKEN {
            return Err(format!(
                "a token of {} bytes; they are at most {MAX_TOKEN}",
                token.len()
            ));
        }
        let (payload_hex, tag_hex) = token
            .split_once('.')
            .ok_or("not a token: expected PAYLOAD.SIGNATURE")?;
        let payload = unhex(payload_hex).ok_or("not a token: the payload is not hex")?;
        let tag = unhex(tag_hex).ok_or("not a token: the signature is not hex")?;
        hmac::verify(&self.key, &payload, &tag)
            .map_err(|_| "the token's signature does not match this coordinator's key")?;
        let payload = String::from_utf8(payload).map_err(|_| "the token is not text")?;
        let mut parts = payload.splitn(3, '|');
        let (Some(word), Some(expires), Some(uri)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("the token lacks its parts".into());
        };
        if word != kind.word() {
            return Err(format!("a {word} where a {} is wanted", kind.word()));
        }
        let expires: i64 = expires
            .parse()
            .map_err(|_| "the token's expiry is no number")?;
        if now_ms >= expires {
            return Err(format!(
                "the {} expired; run `allot dashboard` again",
                kind.word()
            ));
        }
        let who = Identity::from_uri(uri).map_err(|e| e.to_string())?;
        if kind == Kind::Ticket {
            let mut used = self.used.lock().map_err(|_| "ticket list poisoned")?;
            used.retain(|_, until| *until > now_ms);
            if used.len() >= MAX_USED {
                return Err("too many logins at once; retry in a minute".into());
            }
            if used.insert(tag_hex.to_string(), expires).is_some() {
                return Err("this ticket was used already; run `allot dashboard` again".into());
            }
        }
        Ok(who)
    }
}

/// Makes the cluster's session key in `dir` (where the certificates are) unless there is one:
/// `allot certs init` and `allot dev` call it. Returns whether it made one.
pub fn ensure_key(dir: &Path) -> Result<bool, String> {
    let path = dir.join(KEY_FILE);
    if path.exists() {
        return Ok(false);
    }
    make_key(&path)?;
    Ok(true)
}

fn make_key(path: &Path) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| "the system gave no random bytes for the web session key")?;
    write_private(path, format!("{}\n", hex(&b)).as_bytes())?;
    Ok(b)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team_a() -> Identity {
        Identity::User {
            team: "team-a".into(),
        }
    }

    #[test]
    fn a_ticket_is_taken_once_and_only_as_a_ticket() {
        let s = WebSessions::with_key(&[7; 32]);
        let (t, expires) = s.issue(&team_a(), Kind::Ticket, 1_000);
        assert_eq!(expires, 1_000 + TICKET_MS);
        let e = s.verify(&t, Kind::Session, 2_000).unwrap_err();
        assert!(e.contains("a ticket where a session is wanted"), "{e}");
        assert_eq!(s.verify(&t, Kind::Ticket, 2_000), Ok(team_a()));
        let e = s.verify(&t, Kind::Ticket, 2_000).unwrap_err();
        assert!(e.contains("used already"), "{e}");
    }

    #[test]
    fn expired_forged_and_foreign_tokens_are_refused() {
        let s = WebSessions::with_key(&[7; 32]);
        let (t, expires) = s.issue(&team_a(), Kind::Session, 0);
        assert_eq!(s.verify(&t, Kind::Session, expires - 1), Ok(team_a()));
        assert!(s
            .verify(&t, Kind::Session, expires)
            .unwrap_err()
            .contains("expired"));
        // Another replica's key.
        let other = WebSessions::with_key(&[8; 32]);
        assert!(other
            .verify(&t, Kind::Session, 0)
            .unwrap_err()
            .contains("signature"));
        // A payload changed to another team keeps the old signature.
        let (payload, tag) = t.split_once('.').unwrap();
        let forged = hex(String::from_utf8(unhex(payload).unwrap())
            .unwrap()
            .replace("team-a", "team-b")
            .as_bytes());
        assert!(s
            .verify(&format!("{forged}.{tag}"), Kind::Session, 0)
            .unwrap_err()
            .contains("signature"));
        for junk in ["", ".", "zz.zz", "abc", &"a".repeat(2000)] {
            assert!(s.verify(junk, Kind::Session, 0).is_err(), "{junk}");
        }
    }

    #[test]
    fn the_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let certs = tempfile::tempdir().unwrap();
        let a = WebSessions::open(certs.path(), dir.path()).unwrap();
        let (t, _) = a.issue(&team_a(), Kind::Session, 0);
        let b = WebSessions::open(certs.path(), dir.path()).unwrap();
        assert_eq!(b.verify(&t, Kind::Session, 0), Ok(team_a()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.path().join(KEY_FILE), b"short").unwrap();
        let e = WebSessions::open(certs.path(), dir.path()).err().unwrap();
        assert!(e.contains("expected 64 hexadecimal digits"), "{e}");
    }

    /// Replicas sharing the certificates' key take each other's sessions; their own keys
    /// would not.
    #[test]
    fn a_shared_key_beside_the_certificates_serves_every_replica() {
        let certs = tempfile::tempdir().unwrap();
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(ensure_key(certs.path()), Ok(true));
        assert_eq!(ensure_key(certs.path()), Ok(false), "made once");
        let r1 = WebSessions::open(certs.path(), d1.path()).unwrap();
        let r2 = WebSessions::open(certs.path(), d2.path()).unwrap();
        let (t, _) = r1.issue(&team_a(), Kind::Session, 0);
        assert_eq!(r2.verify(&t, Kind::Session, 0), Ok(team_a()));
        assert!(!d1.path().join(KEY_FILE).exists(), "no replica key made");
    }
}
