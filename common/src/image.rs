//! OCI image references: `[registry[:port]/]repository[:tag][@digest]`, read the way Docker
//! and containerd read them (a first component with a `.` or `:`, or `localhost`, is the
//! registry; otherwise Docker Hub, where a one-part name lives under `library/`).

/// Size of `/dev/shm` accepted at most (1 TiB).
pub const MAX_SHM_BYTES: u64 = 1 << 40;
/// Host paths a workload may mount at most.
pub const MAX_MOUNTS: usize = 64;

/// A user or group as `user` gives it: a number, or a name the image's `/etc/passwd` or
/// `/etc/group` resolves on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Id {
    Number(u32),
    Name(String),
}

/// Longest user or group name accepted (Linux's `useradd` default limit is 32).
pub const MAX_USER_NAME: usize = 32;

fn parse_id(user: &str, part: &str) -> Result<Id, String> {
    if let Ok(n) = part.parse::<u32>() {
        return Ok(Id::Number(n));
    }
    let ok = !part.is_empty()
        && !part.bytes().all(|b| b.is_ascii_digit())
        && part.len() <= MAX_USER_NAME
        && !part.starts_with('-')
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'$'));
    if ok {
        Ok(Id::Name(part.to_string()))
    } else {
        Err(format!(
            "user {user:?}: {part:?} is neither a number below 2^32 nor a user or group name \
             (up to {MAX_USER_NAME} letters, digits, '_', '.', '-'; e.g. 1000:1000 or ray:users)"
        ))
    }
}

/// `user[:group]`, each a number or a name; the group, when not given, is the user's primary
/// group from `/etc/passwd` for a name, and the uid itself for a number. Empty: root.
pub fn parse_user_spec(user: &str) -> Result<(Id, Option<Id>), String> {
    let user = user.trim();
    if user.is_empty() {
        return Ok((Id::Number(0), Some(Id::Number(0))));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    Ok((
        parse_id(user, u)?,
        g.map(|g| parse_id(user, g)).transpose()?,
    ))
}

/// `uid[:gid]` when both are numbers (the gid defaults to the uid); names need the image's
/// files: `None` then.
pub fn parse_user(user: &str) -> Result<Option<(u32, u32)>, String> {
    Ok(match parse_user_spec(user)? {
        (Id::Number(u), None) => Some((u, u)),
        (Id::Number(u), Some(Id::Number(g))) => Some((u, g)),
        _ => None,
    })
}

/// A registry user and password (or token), as a team's pull secret holds it. Its `Debug`
/// hides the password.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <hidden>)", self.username)
    }
}

/// Registries a team may hold credentials for, at most.
pub const MAX_REGISTRIES_PER_TEAM: usize = 32;

/// Checks a registry host (`host[:port]`, as an image reference names it) and credentials.
pub fn check_registry_credentials(registry: &str, c: &Credentials) -> Result<(), String> {
    let host_ok = !registry.is_empty()
        && registry.len() <= 255
        && registry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !host_ok {
        return Err(format!(
            "registry {registry:?}: give the host[:port] as image references name it, e.g. \
             123456789012.dkr.ecr.us-west-2.amazonaws.com or 127.0.0.1:5000"
        ));
    }
    if c.username.is_empty() || c.username.len() > 256 || c.username.contains(['\n', '\r', ':']) {
        return Err(format!(
            "username {:?}: 1 to 256 characters, without ':' or line breaks",
            c.username
        ));
    }
    if c.password.is_empty() || c.password.len() > 8192 || c.password.contains(['\n', '\r']) {
        return Err(format!(
            "the password for {registry} is {} bytes; 1 to 8192 without line breaks are accepted",
            c.password.len()
        ));
    }
    Ok(())
}

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `docker.io`, `public.ecr.aws`, `127.0.0.1:5000`, ...
    pub domain: String,
    /// `library/busybox`, `pytorch/pytorch`, ...
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:...`
    pub digest: Option<String>,
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, String> {
        let bad = |why: &str| {
            format!(
                "image {s:?} is not an image reference ({why}); expected \
                 [registry[:port]/]repository[:tag][@sha256:digest], e.g. \
                 public.ecr.aws/docker/library/busybox:1.36"
            )
        };
        if s.is_empty() || s.len() > 4096 {
            return Err(bad("it is empty or longer than 4096 characters"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("a digest starts with sha256:"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("a sha256 digest is 64 hexadecimal digits"));
                }
                (r, Some(d.to_ascii_lowercase()))
            }
            None => (s, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(rest[i + 1..].to_string())),
            _ => (rest, None),
        };
        if let Some(t) = &tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !ok {
                return Err(bad(&format!(
                    "tag {t:?}: letters, digits, '_', '.', '-', at most 128"
                )));
            }
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, p))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), p.to_string())
            }
            _ => ("docker.io".to_string(), name.to_string()),
        };
        let path = if domain == "docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if domain.is_empty()
            || !domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        {
            return Err(bad(&format!("registry {domain:?}")));
        }
        for c in path.split('/') {
            let ok = !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
                && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && c.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
            if !ok {
                return Err(bad(&format!(
                    "repository part {c:?}: lowercase letters and digits, separated by '.', '_' or '-'"
                )));
            }
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            domain,
            repository: path,
            tag,
            digest,
        })
    }

    /// The full name, as containerd's image store names it.
    pub fn name(&self) -> String {
        let mut s = format!("{}/{}", self.domain, self.repository);
        if let Some(t) = &self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = &self.digest {
            s.push('@');
            s.push_str(d);
        }
        s
    }

    /// What to ask the registry's manifest endpoint for: the digest when given, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The host that serves the registry API (Docker Hub's differs from its name).
    pub fn api_host(&self) -> &str {
        if self.domain == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.domain
        }
    }

    /// Whether a pull re-checks the registry even with the image cached: a `latest` tag moves,
    /// as Kubernetes' default pull policy assumes; other tags and digests are pulled once.
    pub fn always_pull(&self) -> bool {
        self.digest.is_none() && self.tag.as_deref() == Some("latest")
    }

    /// Whether the registry is reached over plain HTTP: loopback registries, and those listed.
    pub fn plain_http(&self, listed: &[String]) -> bool {
        let host = self
            .domain
            .rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map(|(h, _)| h)
            .unwrap_or(&self.domain);
        host == "localhost"
            || host.starts_with("127.")
            || host == "[::1]"
            || listed.iter().any(|l| l == &self.domain || l == host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_print_the_password() {
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn users_are_numbers_or_names() {
        assert_eq!(parse_user("").unwrap(), Some((0, 0)));
        assert_eq!(parse_user("1000").unwrap(), Some((1000, 1000)));
        assert_eq!(parse_user("1000:27").unwrap(), Some((1000, 27)));
        assert_eq!(parse_user("nobody").unwrap(), None);
        assert_eq!(
            parse_user_spec("ray:users").unwrap(),
            (Id::Name("ray".into()), Some(Id::Name("users".into())))
        );
        assert_eq!(
            parse_user_spec("1000:users").unwrap(),
            (Id::Number(1000), Some(Id::Name("users".into())))
        );
        for bad in ["a b", "-x", "x:", "4294967296", &"n".repeat(33)] {
            let e = parse_user_spec(bad).unwrap_err();
            assert!(e.contains("neither a number"), "{bad}: {e}");
        }
    }

    #[test]
    fn references_read_as_docker_reads_them() {
        let r = Reference::parse("busybox").unwrap();
        assert_eq!(r.name(), "docker.io/library/busybox:latest");
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert!(r.always_pull());
        let r = Reference::parse("127.0.0.1:5000/team/busybox:1").unwrap();
        assert_eq!(
            (r.domain.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "team/busybox", Some("1"))
        );
        assert!(r.plain_http(&[]) && !r.always_pull());
        let r = Reference::parse("public.ecr.aws/docker/library/python:3.12-slim").unwrap();
        assert!(!r.plain_http(&[]));
        assert!(r.plain_http(&["public.ecr.aws".into()]));
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("nvcr.io/nvidia/pytorch@{d}")).unwrap();
        assert_eq!(r.manifest_ref(), d);
        assert_eq!(r.tag, None);
        let r = Reference::parse("localhost/x:2").unwrap();
        assert_eq!(r.domain, "localhost");
    }

    #[test]
    fn bad_references_say_what_is_accepted() {
        for (s, what) in [
            ("", "empty"),
            ("Busybox", "repository part"),
            ("busybox:", "tag"),
            ("busybox@md5:aa", "sha256"),
            ("busybox@sha256:abc", "64 hexadecimal"),
            ("reg.io//x", "repository part"),
        ] {
            let e = Reference::parse(s).unwrap_err();
            assert!(e.contains(what) && e.contains("expected"), "{s}: {e}");
        }
    }
}
