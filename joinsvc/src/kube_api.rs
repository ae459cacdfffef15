//! joinsvc's client of the Kubernetes API: ureq over rustls, trusting the
//! cluster's CA bundle, authenticated with the pod's service-account token
//! (or files given on the command line), one kept-alive connection reused
//! between calls. Callers ([`crate::token`], [`crate::vpn`]) get the status
//! and the bounded body of each answer and decide what it means, except for
//! the two answers no retry can change: 401 (the credentials are not
//! accepted) and 403 (joinsvc's Role does not allow the call) come back at
//! once as [`KubeApiError::Unauthorized`] and [`KubeApiError::Forbidden`].
//! A 409 conflict, a 429, a 5xx and a timeout are the caller's to retry.

use std::sync::Arc;
use std::time::Duration;

use ureq::http::{HeaderValue, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use zeroize::Zeroizing;

/// Where a pod finds its service-account token and CA bundle.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How much of an error Status's `reason` or `message` is kept (for the
/// log and the node's error), control characters dropped.
const MAX_STATUS_MESSAGE_CHARS: usize = 256;

/// Why the API could not be asked at all, or refused joinsvc itself (any
/// other HTTP error status is an [`ApiAnswer`], not this).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeApiError {
    /// The API server did not accept joinsvc's bearer token (401): not
    /// transient, no retry can change it.
    #[error("Kubernetes API answered 401: {message} (the service-account token is not accepted)")]
    Unauthorized {
        /// The API server's message (bounded).
        message: String,
    },
    /// The API server authenticated joinsvc but its RBAC refused the call
    /// (403): not transient, only a changed Role can change it.
    #[error("Kubernetes API answered 403: {message}")]
    Forbidden {
        /// The API server's message (bounded), which names the user and
        /// the verb it may not use.
        message: String,
    },
    /// The API server could not be reached or did not answer in time.
    #[error("Kubernetes API unreachable: {0}")]
    Unreachable(String),
    /// Configuration (service account files, environment, URL) is missing
    /// or bad.
    #[error("Kubernetes API client not configured: {0}")]
    Config(String),
}

/// The namespace joinsvc keeps its ConfigMaps in (the VPN peer registry
/// and the ledger's filter) unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "kube-system";

/// The namespace bootstrap-token Secrets must be in: the API server's
/// bootstrap-token authenticator reads them only there.
pub const TOKEN_NAMESPACE: &str = "kube-system";

/// A Kubernetes namespace name, checked once: an RFC 1123 label (1 to 63
/// characters of `[a-z0-9-]`, starting and ending with a letter or digit),
/// as the API server requires; so it goes into a path unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace(String);

/// Why a namespace name is not one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {0:?} is not a Kubernetes namespace name (1 to 63 characters of a-z, 0-9 and '-', \
     starting and ending with a letter or digit)"
)]
pub struct NamespaceError(String);

impl Namespace {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    fn default() -> Namespace {
        Namespace(DEFAULT_NAMESPACE.to_string())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Namespace {
    type Err = NamespaceError;

    fn from_str(s: &str) -> Result<Namespace, NamespaceError> {
        let b = s.as_bytes();
        let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
        let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if b.len() <= 63 && edge(b.first()) && edge(b.last()) && b.iter().all(inner) {
            Ok(Namespace(s.to_string()))
        } else {
            // Bounded, so a long option value is not echoed whole.
            Err(NamespaceError(s.chars().take(80).collect()))
        }
    }
}

/// An answer of the API server: its status and its body, read whole up to
/// the caller's bound (zeroized on drop: bodies may echo Secrets).
pub struct ApiAnswer {
    /// HTTP status code.
    pub status: u16,
    /// The body (empty if it was not UTF-8 or over the bound).
    pub body: Zeroizing<String>,
}

impl ApiAnswer {
    /// A string field of the answer's JSON object (a `Status` object's
    /// `reason` or `message`), bounded and without control characters;
    /// empty if there is none.
    pub fn status_field(&self, name: &str) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v[name].as_str().map(str::to_string))
            .map(|s| {
                s.chars()
                    .filter(|c| !c.is_control())
                    .take(MAX_STATUS_MESSAGE_CHARS)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Each kept connection's input and output buffer, and the most response
/// headers an answer may carry.
pub const API_BUFFER_BYTES: usize = 16 * 1024;

/// A client of one API server (clones share its connections).
#[derive(Clone)]
pub struct KubeApi {
    api_url: String,
    /// `Bearer <token>`, made once and marked sensitive (never logged).
    authorization: HeaderValue,
    agent: ureq::Agent,
}

impl KubeApi {
    /// A client for `api_url` (e.g. `https://10.96.0.1:443`) that trusts the
    /// PEM CA bundle `ca_pem` and authenticates with `bearer_token`; each
    /// call ends after `timeout`. Up to `connections` connections stay open
    /// between calls: as many as may call at once (joinsvc's workers), so
    /// no call pays a TLS handshake to the API server once each worker has
    /// its connection.
    pub fn new(
        api_url: &str,
        ca_pem: &str,
        bearer_token: Zeroizing<String>,
        timeout: Duration,
        connections: usize,
    ) -> Result<KubeApi, KubeApiError> {
        let certs = pem_certificates(ca_pem)?;
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(connections.max(1))
            .max_idle_connections_per_host(connections.max(1))
            // A kept connection holds its buffers: a TLS record's worth
            // each, not ureq's 128 KiB (bodies stream through them; the
            // API server's headers are well under this).
            .input_buffer_size(API_BUFFER_BYTES)
            .output_buffer_size(API_BUFFER_BYTES)
            .max_response_header_size(API_BUFFER_BYTES)
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            ureq::unversioned::transport::DefaultConnector::default(),
            IpLiteralResolver::default(),
        );
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", *bearer_token))
            .map_err(|_| {
                KubeApiError::Config("the bearer token is not a valid header value".into())
            })?;
        authorization.set_sensitive(true);
        let api = KubeApi {
            api_url: api_url.trim_end_matches('/').to_string(),
            authorization,
            agent,
        };
        api.uri("/api")?;
        Ok(api)
    }

    /// The in-cluster client: `KUBERNETES_SERVICE_HOST`/`_PORT` and the
    /// service account's token and `ca.crt`.
    pub fn in_cluster(timeout: Duration, connections: usize) -> Result<KubeApi, KubeApiError> {
        let env =
            |k: &str| std::env::var(k).map_err(|_| KubeApiError::Config(format!("{k} is not set")));
        let (host, port) = (
            env("KUBERNETES_SERVICE_HOST")?,
            env("KUBERNETES_SERVICE_PORT")?,
        );
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let read = |name: &str| {
            let path = std::path::PathBuf::from(format!("{SERVICE_ACCOUNT_DIR}/{name}"));
            confboot_util::fs::read_bounded_text(&path, confboot_util::fs::MAX_CONFIG_FILE_BYTES)
                .map_err(|e| KubeApiError::Config(e.to_string()))
        };
        let token = Zeroizing::new(read("token")?.trim().to_string());
        KubeApi::new(
            &format!("https://{host}:{port}"),
            &read("ca.crt")?,
            token,
            timeout,
            connections,
        )
    }

    /// The URI of an API path (e.g. `/api/v1/namespaces/kube-system/secrets`),
    /// parsed once by callers that use it often.
    pub fn uri(&self, path: &str) -> Result<Uri, KubeApiError> {
        format!("{}{path}", self.api_url)
            .parse::<Uri>()
            .map_err(|e| KubeApiError::Config(format!("API URL {}{path}: {e}", self.api_url)))
    }

    /// `GET uri`; the body read up to `max_body` bytes.
    pub fn get(&self, uri: &Uri, max_body: u64) -> Result<ApiAnswer, KubeApiError> {
        let resp = self
            .agent
            .get(uri.clone())
            .header("Authorization", self.authorization.clone())
            .header("Accept", "application/json")
            .call()
            .map_err(|e| KubeApiError::Unreachable(e.to_string()))?;
        refused(read_answer(resp, max_body))
    }

    /// `POST` (create) or `PUT` (replace) a JSON object at `uri`; the
    /// answer's body read up to `max_body` bytes.
    pub fn send_json(
        &self,
        method: SendMethod,
        uri: &Uri,
        json: &[u8],
        max_body: u64,
    ) -> Result<ApiAnswer, KubeApiError> {
        let request = match method {
            SendMethod::Post => self.agent.post(uri.clone()),
            SendMethod::Put => self.agent.put(uri.clone()),
        };
        let resp = request
            .header("Authorization", self.authorization.clone())
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .send(json)
            .map_err(|e| KubeApiError::Unreachable(e.to_string()))?;
        refused(read_answer(resp, max_body))
    }
}

/// How [`KubeApi::send_json`] sends an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMethod {
    /// Create (`POST` to the collection).
    Post,
    /// Replace (`PUT` to the object, with its `resourceVersion`).
    Put,
}

/// Reads the whole (bounded) body: that returns the connection to the
/// agent's pool, so the next call reuses it instead of a new TLS handshake
/// with the API server.
fn read_answer(mut resp: ureq::http::Response<ureq::Body>, max_body: u64) -> ApiAnswer {
    let status = resp.status().as_u16();
    let body = Zeroizing::new(
        resp.body_mut()
            .with_config()
            .limit(max_body)
            .read_to_string()
            .unwrap_or_default(),
    );
    ApiAnswer { status, body }
}

/// A 401 or 403 answer as its error (returned at once: no retry changes
/// it); any other answer as it is.
fn refused(answer: ApiAnswer) -> Result<ApiAnswer, KubeApiError> {
    match answer.status {
        401 => Err(KubeApiError::Unauthorized {
            message: answer.status_field("message"),
        }),
        403 => Err(KubeApiError::Forbidden {
            message: answer.status_field("message"),
        }),
        _ => Ok(answer),
    }
}

/// Resolves an IP-literal host (the in-cluster API server address is one,
/// `KUBERNETES_SERVICE_HOST`) directly. ureq's default resolver starts a
/// thread for every lookup under a timeout, once per request; names still go
/// through it.
#[derive(Debug, Default)]
struct IpLiteralResolver(DefaultResolver);

impl Resolver for IpLiteralResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let literal = uri
            .scheme()
            .zip(uri.authority())
            .and_then(|(scheme, authority)| DefaultResolver::host_and_port(scheme, authority))
            .and_then(|host_port| host_port.parse::<std::net::SocketAddr>().ok());
        match literal {
            Some(addr) => {
                let mut addrs = self.empty();
                addrs.push(addr);
                Ok(addrs)
            }
            None => self.0.resolve(uri, config, timeout),
        }
    }
}

fn pem_certificates(pem: &str) -> Result<Vec<ureq::tls::Certificate<'static>>, KubeApiError> {
    let mut certs = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let body = &rest[start + 27..];
        let end = body
            .find("-----END CERTIFICATE-----")
            .ok_or_else(|| KubeApiError::Config("unterminated PEM certificate".into()))?;
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        let der = confboot_util::base64::decode(&b64)
            .map_err(|e| KubeApiError::Config(format!("CA bundle: {e}")))?;
        certs.push(ureq::tls::Certificate::from_der(&der).to_owned());
        rest = &body[end..];
    }
    if certs.is_empty() {
        return Err(KubeApiError::Config(
            "CA bundle holds no certificate".into(),
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_whether_the_api_was_unreachable_or_not_configured() {
        assert_eq!(
            KubeApiError::Unreachable("timed out".into()).to_string(),
            "Kubernetes API unreachable: timed out"
        );
        assert_eq!(
            KubeApiError::Config("no token file".into()).to_string(),
            "Kubernetes API client not configured: no token file"
        );
    }

    #[test]
    fn namespaces_are_rfc_1123_labels() {
        for good in ["kube-system", "a", "tenant-7", &"x".repeat(63), "0a"] {
            assert_eq!(good.parse::<Namespace>().unwrap().as_str(), good);
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Kube-System",
            "a/b",
            "a.b",
            "a b",
            "../secrets",
            "é",
            &"x".repeat(64),
        ] {
            assert!(bad.parse::<Namespace>().is_err(), "{bad:?}");
        }
        assert_eq!(Namespace::default().as_str(), "kube-system");
    }

    #[test]
    fn ip_literal_hosts_resolve_without_a_lookup() {
        let resolver = IpLiteralResolver::default();
        let config = ureq::config::Config::default();
        let timeout = ureq::unversioned::transport::NextTimeout::default();
        for (url, want) in [
            ("https://10.96.0.1:443/api", "10.96.0.1:443"),
            ("https://10.96.0.1/api", "10.96.0.1:443"),
            ("https://[fd00::1]:6443/", "[fd00::1]:6443"),
        ] {
            let uri: ureq::http::Uri = url.parse().unwrap();
            let addrs = resolver.resolve(&uri, &config, timeout).unwrap();
            assert_eq!(addrs.len(), 1);
            assert_eq!(addrs[0].to_string(), want);
        }
        let uri: ureq::http::Uri = "https://localhost:6443/".parse().unwrap();
        assert!(!resolver.resolve(&uri, &config, timeout).unwrap().is_empty());
    }
}
