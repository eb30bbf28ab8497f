//! The registry side of a pull (the OCI distribution API, read only): manifests and blobs over
//! HTTPS (or plain HTTP for loopback and listed registries), with Docker's token handshake
//! (`WWW-Authenticate: Bearer realm=...`) and basic credentials. Blocking: it runs on the pod
//! shim's blocking threads. Errors carry the registry's own message.

use std::io::Read;
use std::time::Duration;

use super::reference::Reference;

/// Media types a manifest request accepts: image indexes (several platforms) and manifests.
pub const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Largest manifest or index read (they are small JSON documents).
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

pub use allot_common::image::Credentials;

pub struct Registry {
    http: ureq::Agent,
    base: String,
    host: String,
    repository: String,
    credentials: Option<Credentials>,
    /// `Authorization` header value once known (bearer token or basic).
    authorization: Option<String>,
}

/// A manifest or index as the registry served it.
pub struct Fetched {
    pub bytes: Vec<u8>,
    pub media_type: String,
}

impl Registry {
    pub fn new(r: &Reference, plain_http: bool, credentials: Option<Credentials>) -> Registry {
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .max_redirects(10)
            .user_agent(concat!("allot/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let scheme = if plain_http { "http" } else { "https" };
        Registry {
            http,
            base: format!("{scheme}://{}", r.api_host()),
            host: r.domain.clone(),
            repository: r.repository.clone(),
            credentials,
            authorization: None,
        }
    }

    fn get(
        &mut self,
        path: &str,
        accept: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let url = format!("{}/v2/{}/{path}", self.base, self.repository);
        for attempt in 0..2 {
            let mut req = self.http.get(&url).header("Accept", accept);
            if let Some(a) = &self.authorization {
                req = req.header("Authorization", a);
            }
            let resp = req
                .call()
                .map_err(|e| format!("could not reach the registry {}: {e}", self.host))?;
            if resp.status() == 401 && attempt == 0 {
                let challenge = resp
                    .headers()
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                self.authorization = Some(self.authenticate(&challenge)?);
                continue;
            }
            return Ok(resp);
        }
        Err(format!(
            "the registry {} refused the credentials for {}",
            self.host, self.repository
        ))
    }

    /// Answers a 401's challenge: a bearer token from the realm, or basic credentials.
    fn authenticate(&mut self, challenge: &str) -> Result<String, String> {
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let param = |name: &str| -> Option<String> {
            params.split(',').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k.eq_ignore_ascii_case(name)).then(|| v.trim_matches('"').to_string())
            })
        };
        let basic = self.credentials.as_ref().map(|c| {
            format!(
                "Basic {}",
                base64_encode(format!("{}:{}", c.username, c.password).as_bytes())
            )
        });
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(|| {
                format!(
                    "the registry {} needs credentials to pull {} (give the team a pull secret: \
                     allot create-registry-credentials)",
                    self.host, self.repository
                )
            });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(format!(
                "the registry {} asked for {challenge:?} authentication; allot answers Basic \
                 and Bearer",
                self.host
            ));
        }
        let realm = param("realm").ok_or_else(|| {
            format!(
                "the registry {} sent a Bearer challenge without a realm",
                self.host
            )
        })?;
        let mut req = self.http.get(&realm).query(
            "scope",
            param("scope").unwrap_or_else(|| format!("repository:{}:pull", self.repository)),
        );
        if let Some(service) = param("service") {
            req = req.query("service", service);
        }
        if let Some(b) = &basic {
            req = req.header("Authorization", b);
        }
        let mut resp = req
            .call()
            .map_err(|e| format!("could not reach the token service {realm}: {e}"))?;
        if resp.status() != 200 {
            return Err(format!(
                "the registry {} refused a token to pull {}: {}",
                self.host,
                self.repository,
                registry_message(&mut resp)
            ));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| format!("reading the token from {realm}: {e}"))?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            format!("the token service {realm} answered something else than JSON: {e}")
        })?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| format!("the token service {realm} answered without a token"))?;
        Ok(format!("Bearer {token}"))
    }

    /// Fetches a manifest or index by tag or digest.
    pub fn manifest(&mut self, reference: &str) -> Result<Fetched, String> {
        let mut resp = self.get(
            &format!("manifests/{reference}"),
            &MANIFEST_TYPES.join(", "),
        )?;
        if resp.status() != 200 {
            return Err(format!(
                "the registry {} has no {}:{reference}: {}",
                self.host,
                self.repository,
                registry_message(&mut resp)
            ));
        }
        let media_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_MANIFEST_BYTES)
            .read_to_vec()
            .map_err(|e| {
                format!(
                    "reading the manifest of {}:{reference}: {e}",
                    self.repository
                )
            })?;
        Ok(Fetched { bytes, media_type })
    }

    /// Opens a blob for reading; returns its reader and length when the registry said it.
    pub fn blob(&mut self, digest: &str) -> Result<(Box<dyn Read + Send>, Option<u64>), String> {
        let mut resp = self.get(&format!("blobs/{digest}"), "*/*")?;
        if resp.status() != 200 {
            return Err(format!(
                "the registry {} could not send blob {digest} of {}: {}",
                self.host,
                self.repository,
                registry_message(&mut resp)
            ));
        }
        let len = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        Ok((Box::new(resp.into_body().into_reader()), len))
    }
}

/// The status and the registry's error list (`{"errors":[{"code":..,"message":..}]}`).
fn registry_message(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    let status = resp.status();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_vec()
        .unwrap_or_default();
    let errors: Vec<String> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("errors").and_then(|e| e.as_array()).cloned())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let code = e.get("code").and_then(|c| c.as_str()).unwrap_or("");
            let msg = e.get("message").and_then(|c| c.as_str()).unwrap_or("");
            format!("{code}: {msg}")
        })
        .collect();
    if errors.is_empty() {
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        if text.is_empty() {
            format!("HTTP {status}")
        } else {
            format!(
                "HTTP {status}: {}",
                text.chars().take(300).collect::<String>()
            )
        }
    } else {
        format!("HTTP {status}: {}", errors.join("; "))
    }
}

/// Standard base64 with padding (for a Basic authorization header).
pub fn base64_encode(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"user:pa ss"), "dXNlcjpwYSBzcw==");
    }
}
