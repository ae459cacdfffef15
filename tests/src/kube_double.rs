//! A **double** of the Kubernetes API server, for the calls confboot
//! makes: creating a bootstrap-token Secret
//! (`POST /api/v1/namespaces/kube-system/secrets`), and reading, creating
//! and replacing the VPN peer registry's ConfigMap in kube-system (`GET`,
//! `POST`, and `PUT` with the API server's optimistic concurrency: a write
//! naming an older `metadata.resourceVersion` gets 409 Conflict). Kubernetes cannot run on
//! these machines; this double follows the real contract and checks every
//! request as the API server would: HTTPS with its own CA, the bearer token,
//! the path, the content type, and the Secret's schema for bootstrap tokens.
//! It answers 201 with the created object, 401 for a wrong token, 403 for
//! what the caller's RBAC Role does not allow (authorized as the API server
//! does, from the request's verb, API group, namespace and resource: see
//! [`JOINSVC_ROLE_RULES`]), 404 for other allowed paths, 409 when the Secret
//! exists, 422 for an invalid Secret, and can
//! fail on demand as the API server fails: 500, 409, 429 (with
//! `Retry-After`) or 504 with their `Status` objects, no answer at all (a black hole: the client's timeout must end
//! the call), or a slow answer (the Secret is stored, the answer comes
//! late, as when etcd is slow). Like the API server, it
//! keeps connections alive between requests (HTTP/1.1), closing them when the
//! client asks, after an idle time, or when the double stops.

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use confboot_net::listener::{self, PeerStream, PoolConfig, ServerHandle};
use confboot_util::stop::Stop;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// The path the double serves.
pub const SECRETS_PATH: &str = "/api/v1/namespaces/kube-system/secrets";
/// The ConfigMaps of kube-system (`/<name>` for one).
pub const CONFIGMAPS_PATH: &str = "/api/v1/namespaces/kube-system/configmaps";
/// The API server's limit for one object's data.
const MAX_CONFIGMAP_DATA_BYTES: usize = 1 << 20;

/// One rule of an RBAC Role (`rbac.authorization.k8s.io/v1` PolicyRule),
/// as the double enforces it: `*` matches anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRule {
    /// API groups (`""` is the core group).
    pub api_groups: &'static [&'static str],
    /// Resources (`resource/subresource` for a subresource).
    pub resources: &'static [&'static str],
    /// Verbs: create, get, list, watch, update, patch, delete, deletecollection.
    pub verbs: &'static [&'static str],
    /// Object names the rule is limited to (empty: any). As in RBAC, a
    /// rule with names never matches requests without a name in the path
    /// (create, list, watch, deletecollection).
    pub resource_names: &'static [&'static str],
}

/// The user joinsvc's pods authenticate as: the ServiceAccount of
/// `deploy/kubernetes/joinsvc.yaml`.
pub const JOINSVC_SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:confboot-joinsvc";

/// The namespace of joinsvc's Role (a Role grants nothing elsewhere).
pub const JOINSVC_ROLE_NAMESPACE: &str = "kube-system";

/// The rules of joinsvc's Role in `deploy/kubernetes/joinsvc.yaml`, which
/// the double enforces by default (`tests/tests/deploy_manifests.rs` holds
/// the manifest to them): creating Secrets (bootstrap tokens) and ConfigMaps
/// (the VPN peer registry, once) in kube-system, and reading and replacing
/// the two ConfigMaps `confboot-vpn-peers` and `confboot-issued-filter`;
/// nothing else.
pub const JOINSVC_ROLE_RULES: &[PolicyRule] = &[
    PolicyRule {
        api_groups: &[""],
        resources: &["secrets"],
        verbs: &["create"],
        resource_names: &[],
    },
    PolicyRule {
        api_groups: &[""],
        resources: &["configmaps"],
        verbs: &["create"],
        resource_names: &[],
    },
    PolicyRule {
        api_groups: &[""],
        resources: &["configmaps"],
        verbs: &["get", "update"],
        resource_names: &["confboot-vpn-peers", "confboot-issued-filter"],
    },
];

/// What the API server's request-info parser makes of a request (the
/// attributes RBAC authorizes).
#[derive(Clone, Debug, PartialEq, Eq)]
enum RequestAttributes {
    /// `/api/...` or `/apis/...`.
    Resource {
        verb: &'static str,
        api_group: String,
        namespace: Option<String>,
        resource: String,
        name: Option<String>,
    },
    /// Any other path (`/version`, `/healthz`, ...).
    NonResource { verb: String, path: String },
}

impl RequestAttributes {
    /// Parses a request as the API server does (`RequestInfoFactory`).
    fn of(method: &str, target: &str) -> RequestAttributes {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (api_group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => (String::new(), rest),
            ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
            _ => {
                return RequestAttributes::NonResource {
                    verb: method.to_ascii_lowercase(),
                    path: path.to_string(),
                };
            }
        };
        let (namespace, resource, name, subresource) = match rest {
            ["namespaces", ns] => (None, "namespaces", Some(*ns), None),
            ["namespaces", ns, resource, tail @ ..] => (
                Some(ns.to_string()),
                *resource,
                tail.first().copied(),
                tail.get(1).copied(),
            ),
            [resource, tail @ ..] => (None, *resource, tail.first().copied(), tail.get(1).copied()),
            [] => (None, "", None, None),
        };
        let watch = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let verb = match (method, name.is_some()) {
            ("POST", _) => "create",
            ("GET" | "HEAD", _) if watch => "watch",
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) => "list",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "unknown",
        };
        let resource = match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        RequestAttributes::Resource {
            verb,
            api_group,
            namespace,
            resource,
            name: name.map(str::to_string),
        }
    }

    /// Whether a Role in `role_namespace` with `rules` allows the request;
    /// the refusal is the API server's 403 message.
    fn authorize(&self, role_namespace: &str, rules: &[PolicyRule]) -> Result<(), String> {
        let user = JOINSVC_SERVICE_ACCOUNT;
        let matches = |set: &[&str], value: &str| set.iter().any(|s| *s == "*" || *s == value);
        match self {
            RequestAttributes::NonResource { verb, path } => Err(format!(
                "forbidden: User \"{user}\" cannot {verb} path \"{path}\""
            )),
            RequestAttributes::Resource {
                verb,
                api_group,
                namespace,
                resource,
                name,
            } => {
                let named = |r: &PolicyRule| {
                    r.resource_names.is_empty()
                        || name
                            .as_deref()
                            .is_some_and(|n| r.resource_names.contains(&n))
                };
                let allowed = namespace.as_deref() == Some(role_namespace)
                    && rules.iter().any(|r| {
                        matches(r.api_groups, api_group)
                            && matches(r.resources, resource)
                            && matches(r.verbs, verb)
                            && named(r)
                    });
                if allowed {
                    return Ok(());
                }
                let kind = resource.split('/').next().unwrap_or_default();
                let scope = match namespace {
                    Some(ns) => format!(" in the namespace \"{ns}\""),
                    None => " at the cluster scope".to_string(),
                };
                Err(format!(
                    "{kind} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" \
                     in API group \"{api_group}\"{scope}"
                ))
            }
        }
    }
}

/// A failure the double produces on demand, once per queued entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Answer 500 Internal Server Error.
    InternalError,
    /// Answer 409 Conflict as if the Secret already existed.
    Conflict,
    /// Read the request and never answer (the client must time out).
    NoAnswer,
    /// Answer 429 Too Many Requests with `Retry-After: 1`, as the API
    /// server's priority and fairness does under load.
    TooManyRequests,
    /// Answer 504 with a `Timeout` Status, as the API server does when a
    /// request outlives its own timeout (the Secret is not stored).
    ServerTimeout,
    /// Serve the request (a valid Secret is stored), then wait this long
    /// before answering; a client that gave up by then has left the
    /// Secret behind, as with the API server.
    Slow(Duration),
}

/// A bootstrap-token Secret the double accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedToken {
    /// `token-id`.
    pub id: String,
    /// `token-secret`.
    pub secret: String,
    /// `expiration`, RFC 3339.
    pub expiration: String,
}

#[derive(Default)]
struct State {
    failures: VecDeque<Failure>,
    /// Requests received per path (the query aside).
    by_path: std::collections::BTreeMap<String, usize>,
    created: Vec<CreatedToken>,
    /// The ids in `created`, looked up by key as the API server's store does.
    ids: HashSet<String>,
    requests: usize,
    /// Requests for Secrets (bootstrap tokens) received so far.
    secret_requests: usize,
    /// The Role the caller holds in [`JOINSVC_ROLE_NAMESPACE`].
    rules: &'static [PolicyRule],
    /// The ConfigMaps of kube-system by name, each with its
    /// `metadata.resourceVersion`.
    configmaps: std::collections::BTreeMap<String, Value>,
    /// The last `resourceVersion` given out (etcd's revision).
    revision: u64,
}

/// A running double; ends its thread when dropped.
pub struct KubeApiDouble {
    addr: SocketAddr,
    ca_der: Vec<u8>,
    state: Arc<Mutex<State>>,
    server: Option<ServerHandle>,
}

impl KubeApiDouble {
    /// Starts the double on loopback; requests must carry `Bearer <bearer_token>`,
    /// and the caller holds joinsvc's Role ([`JOINSVC_ROLE_RULES`]).
    pub fn start(bearer_token: &str) -> KubeApiDouble {
        KubeApiDouble::start_with_role(bearer_token, JOINSVC_ROLE_RULES)
    }

    /// Starts the double with the caller holding a Role of these `rules`
    /// in [`JOINSVC_ROLE_NAMESPACE`] (none: every request is forbidden, as
    /// for a ServiceAccount whose RoleBinding is missing).
    pub fn start_with_role(bearer_token: &str, rules: &'static [PolicyRule]) -> KubeApiDouble {
        let rcgen::CertifiedKey { cert, signing_key } = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .expect("self-signed certificate");
        let ca_der = cert.der().to_vec();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let tls = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(ca_der.clone())], key)
            .expect("server certificate"),
        );
        let state = Arc::new(Mutex::new(State {
            rules,
            ..State::default()
        }));
        let server = {
            let (state, token) = (Arc::clone(&state), bearer_token.to_string());
            listener::spawn(
                TcpListener::bind("127.0.0.1:0").expect("bind loopback"),
                PoolConfig {
                    workers: 32,
                    queue: 64,
                    socket_timeout: REQUEST_TIMEOUT,
                    ..PoolConfig::default()
                },
                move |sock, stop| serve(sock, Arc::clone(&tls), &state, &token, stop),
            )
            .expect("start the API double")
        };
        let addr = server.local_addr();
        KubeApiDouble {
            addr,
            ca_der,
            state,
            server: Some(server),
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The DER certificate clients must trust.
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// The CA certificate as PEM (like a service account's `ca.crt`).
    pub fn ca_pem(&self) -> String {
        confboot_util::base64::pem("CERTIFICATE", &self.ca_der)
    }

    /// Makes the next requests for Secrets (bootstrap tokens) fail, in
    /// order; the registry's ConfigMap requests, which joinsvc makes
    /// before each token, are answered.
    pub fn fail_next(&self, failures: &[Failure]) {
        self.state.lock().unwrap().failures.extend(failures);
    }

    /// The tokens created so far.
    pub fn created(&self) -> Vec<CreatedToken> {
        self.state.lock().unwrap().created.clone()
    }

    /// TCP connections accepted so far (clients that keep connections alive
    /// make many requests on one).
    pub fn connections(&self) -> u64 {
        self.server.as_ref().map_or(0, |s| {
            s.stats()
                .accepted
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Requests received so far (whatever their outcome).
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }

    /// Requests for the ConfigMap `name` in kube-system (reads and
    /// replacements) received so far, whatever their outcome.
    pub fn configmap_requests(&self, name: &str) -> usize {
        let path = format!("{CONFIGMAPS_PATH}/{name}");
        let st = self.state.lock().unwrap();
        st.by_path.get(&path).copied().unwrap_or(0)
    }

    /// Requests for Secrets (bootstrap tokens) received so far, whatever
    /// their outcome; the registry's ConfigMap requests are not counted.
    pub fn secret_requests(&self) -> usize {
        self.state.lock().unwrap().secret_requests
    }

    /// The ConfigMap `name` of kube-system as stored, if there is one.
    pub fn configmap(&self, name: &str) -> Option<Value> {
        self.state.lock().unwrap().configmaps.get(name).cloned()
    }

    /// Replaces (or creates) the ConfigMap `name`'s `data` as another
    /// writer of the API would (an admin's `kubectl edit`, a spoilt
    /// object), with a new `resourceVersion`.
    pub fn put_configmap_data(&self, name: &str, data: Value) {
        let mut st = self.state.lock().unwrap();
        st.revision += 1;
        let object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": st.revision.to_string()},
            "data": data,
        });
        st.configmaps.insert(name.to_string(), object);
    }

    /// Deletes the ConfigMap `name` of kube-system, as an etcd restored
    /// from before it existed, or an admin's `kubectl delete`, would.
    pub fn delete_configmap(&self, name: &str) {
        self.state.lock().unwrap().configmaps.remove(name);
    }

    /// Puts `object` (an earlier [`KubeApiDouble::configmap`]) back as the
    /// ConfigMap `name`, its `resourceVersion` as it was: what an etcd
    /// restored from an old snapshot serves.
    pub fn restore_configmap(&self, name: &str, object: Value) {
        self.state
            .lock()
            .unwrap()
            .configmaps
            .insert(name.to_string(), object);
    }
}

impl Drop for KubeApiDouble {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

/// How long a request may take to arrive once it has begun, and a reply to be written.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle keep-alive connection stays open (Go's net/http, which
/// the API server uses, closes idle connections after a similar time).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often an idle connection looks at the stop signal.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Bounds on what one request may be, as a real server has them.
const MAX_LINE: u64 = 8 * 1024;
const MAX_HEADERS: usize = 100;
/// The largest request body: the API server's limit (3 MiB), which a
/// ConfigMap of up to [`MAX_CONFIGMAP_DATA_BYTES`] needs.
const MAX_BODY: usize = 3 * 1024 * 1024;

type TlsStream = rustls::StreamOwned<rustls::ServerConnection, PeerStream>;

/// Serves one HTTP/1.1 connection: requests one after another (keep-alive,
/// as the API server does) until the client closes, asks to close, stays
/// idle for [`IDLE_TIMEOUT`], or the double stops.
fn serve(
    sock: PeerStream,
    tls: Arc<rustls::ServerConfig>,
    state: &Mutex<State>,
    token: &str,
    stop: &Stop,
) {
    let Ok(conn) = rustls::ServerConnection::new(tls) else {
        return;
    };
    let mut reader = BufReader::new(rustls::StreamOwned::new(conn, sock));
    while wait_for_request(&mut reader, stop) {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        let failure = {
            let mut st = state.lock().unwrap();
            st.requests += 1;
            let path = request
                .path
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string();
            *st.by_path.entry(path).or_default() += 1;
            if request.path.contains("/secrets") {
                st.secret_requests += 1;
                st.failures.pop_front()
            } else {
                None
            }
        };
        let (code, reply) = match failure {
            Some(Failure::NoAnswer) => {
                while !stop.is_raised() {
                    std::thread::sleep(STOP_POLL);
                }
                return;
            }
            Some(Failure::InternalError) => {
                (500, status_object(500, "InternalError", "injected failure"))
            }
            Some(Failure::Conflict) => (
                409,
                status_object(409, "AlreadyExists", "secrets already exists"),
            ),
            Some(Failure::TooManyRequests) => (
                429,
                status_object(
                    429,
                    "TooManyRequests",
                    "too many requests, please try again later",
                ),
            ),
            Some(Failure::ServerTimeout) => (
                504,
                status_object(
                    504,
                    "Timeout",
                    "the server was unable to return a response in the time allotted, but may \
                     still be processing the request",
                ),
            ),
            Some(Failure::Slow(delay)) => {
                let reply = handle(&request, state, token);
                let until = std::time::Instant::now() + delay;
                while std::time::Instant::now() < until {
                    if stop.is_raised() {
                        return;
                    }
                    std::thread::sleep(STOP_POLL.min(delay));
                }
                reply
            }
            None => handle(&request, state, token),
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let text = reply.to_string();
        let stream = reader.get_mut();
        let retry_after = if code == 429 {
            "Retry-After: 1\r\n"
        } else {
            ""
        };
        let written = write!(
            stream,
            "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n{retry_after}Content-Length: {}\r\n{}\r\n{text}",
            reason_phrase(code),
            text.len(),
            if close { "Connection: close\r\n" } else { "" },
        )
        .and_then(|_| stream.flush());
        if written.is_err() || close {
            break;
        }
    }
    let stream = reader.get_mut();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

/// Waits until the next request begins (true), or the client closed, the
/// connection stayed idle too long or the double stops (false).
fn wait_for_request(reader: &mut BufReader<TlsStream>, stop: &Stop) -> bool {
    let idle_since = std::time::Instant::now();
    let _ = reader.get_ref().sock.set_read_timeout(Some(STOP_POLL));
    let ready = loop {
        if stop.is_raised() || idle_since.elapsed() > IDLE_TIMEOUT {
            break false;
        }
        // fill_buf consumes nothing, so a timeout here loses no bytes.
        match reader.fill_buf() {
            Ok(buf) => break !buf.is_empty(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break false,
        }
    };
    let _ = reader
        .get_ref()
        .sock
        .set_read_timeout(Some(REQUEST_TIMEOUT));
    ready
}

/// One HTTP request: method, path, headers (names in lower case), body.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request; `None` if it is malformed, too large or cut short.
fn read_request<R: BufRead>(r: &mut R) -> Option<Request> {
    let read_line = |r: &mut R| -> Option<String> {
        let mut line = String::new();
        let n = r.by_ref().take(MAX_LINE).read_line(&mut line).ok()?;
        (n > 0 && line.ends_with('\n')).then_some(line)
    };
    let line = read_line(r)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let h = read_line(r)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return None;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut request = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let len: usize = match request.header("content-length") {
        Some(v) => v.parse().ok()?,
        None => 0,
    };
    if len > MAX_BODY {
        return None;
    }
    request.body = vec![0; len];
    r.read_exact(&mut request.body).ok()?;
    Some(request)
}

/// The status line's reason phrase, as Go's net/http writes it.
fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

/// A `Status` object, the body of every API error (`metav1.Status`).
fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn is_token_part(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn handle(request: &Request, state: &Mutex<State>, token: &str) -> (u16, Value) {
    let Request {
        method, path, body, ..
    } = request;
    let header = |name: &str| request.header(name);
    if header("authorization") != Some(&format!("Bearer {token}")) {
        return (401, status_object(401, "Unauthorized", "Unauthorized"));
    }
    let rules = state.lock().unwrap().rules;
    if let Err(message) =
        RequestAttributes::of(method, path).authorize(JOINSVC_ROLE_NAMESPACE, rules)
    {
        return (403, status_object(403, "Forbidden", &message));
    }
    if let Some(rest) = path.strip_prefix(CONFIGMAPS_PATH) {
        return handle_configmap(request, rest, state);
    }
    if path != SECRETS_PATH {
        return (
            404,
            status_object(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        );
    }
    if method != "POST" {
        return (
            405,
            status_object(405, "MethodNotAllowed", "method not allowed"),
        );
    }
    if !header("content-type").is_some_and(|c| c.starts_with("application/json")) {
        return (
            415,
            status_object(415, "UnsupportedMediaType", "want application/json"),
        );
    }
    let invalid = |why: &str| (422, status_object(422, "Invalid", why));
    let Ok(secret) = serde_json::from_slice::<Value>(body) else {
        return invalid("body is not JSON");
    };
    if secret["apiVersion"] != "v1" || secret["kind"] != "Secret" {
        return invalid("apiVersion must be v1 and kind Secret");
    }
    if secret["type"] != "bootstrap.kubernetes.io/token" {
        return invalid("type must be bootstrap.kubernetes.io/token");
    }
    if secret["metadata"]["namespace"] != "kube-system" {
        return invalid("metadata.namespace must be kube-system");
    }
    let data = &secret["stringData"];
    let field = |k: &str| data[k].as_str().unwrap_or("");
    let (id, token_secret) = (field("token-id"), field("token-secret"));
    if !is_token_part(id, 6) || !is_token_part(token_secret, 16) {
        return invalid("token-id must be [a-z0-9]{6} and token-secret [a-z0-9]{16}");
    }
    if secret["metadata"]["name"] != format!("bootstrap-token-{id}").as_str() {
        return invalid("metadata.name must be bootstrap-token-<token-id>");
    }
    if !is_rfc3339(field("expiration")) {
        return invalid("expiration must be an RFC 3339 UTC time");
    }
    if field("usage-bootstrap-authentication") != "true"
        || field("usage-bootstrap-signing") != "true"
    {
        return invalid(
            "usage-bootstrap-authentication and usage-bootstrap-signing must be \"true\"",
        );
    }
    if field("auth-extra-groups") != "system:bootstrappers:kubeadm:default-node-token" {
        return invalid("auth-extra-groups must be kubeadm's default node group");
    }
    let mut st = state.lock().unwrap();
    if !st.ids.insert(id.to_string()) {
        return (
            409,
            status_object(409, "AlreadyExists", "secrets already exists"),
        );
    }
    st.created.push(CreatedToken {
        id: id.to_string(),
        secret: token_secret.to_string(),
        expiration: field("expiration").to_string(),
    });
    let mut created = secret.clone();
    created["metadata"]["uid"] = json!(format!("uid-{id}"));
    (201, created)
}

/// ConfigMaps of kube-system: `GET /<name>`, `POST` to the collection,
/// `PUT /<name>` with the API server's optimistic concurrency.
fn handle_configmap(request: &Request, rest: &str, state: &Mutex<State>) -> (u16, Value) {
    let not_found = |name: &str| {
        (
            404,
            status_object(404, "NotFound", &format!("configmaps \"{name}\" not found")),
        )
    };
    let name = rest.strip_prefix('/');
    if name.is_some_and(|n| n.is_empty() || n.contains(['/', '?'])) {
        return not_found(rest);
    }
    if request.method == "GET" {
        let Some(name) = name else {
            return (
                405,
                status_object(405, "MethodNotAllowed", "list is not served"),
            );
        };
        return match state.lock().unwrap().configmaps.get(name) {
            Some(object) => (200, object.clone()),
            None => not_found(name),
        };
    }
    if !request
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return (
            415,
            status_object(415, "UnsupportedMediaType", "want application/json"),
        );
    }
    let invalid = |why: &str| (422, status_object(422, "Invalid", why));
    let Ok(mut object) = serde_json::from_slice::<Value>(&request.body) else {
        return invalid("body is not JSON");
    };
    if object["apiVersion"] != "v1" || object["kind"] != "ConfigMap" {
        return invalid("apiVersion must be v1 and kind ConfigMap");
    }
    if object["metadata"]["namespace"] != "kube-system" {
        return invalid("metadata.namespace must be kube-system");
    }
    let Some(object_name) = object["metadata"]["name"].as_str().map(str::to_string) else {
        return invalid("metadata.name is required");
    };
    let Some(data) = object["data"].as_object() else {
        return invalid("data must be an object");
    };
    if !data.values().all(Value::is_string) {
        return invalid("data values must be strings");
    }
    let size: usize = data
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_CONFIGMAP_DATA_BYTES {
        return invalid("ConfigMap \"data\" must have at most 1048576 bytes");
    }
    let mut st = state.lock().unwrap();
    match (request.method.as_str(), name) {
        ("POST", None) => {
            if st.configmaps.contains_key(&object_name) {
                return (
                    409,
                    status_object(
                        409,
                        "AlreadyExists",
                        &format!("configmaps \"{object_name}\" already exists"),
                    ),
                );
            }
            st.revision += 1;
            object["metadata"]["resourceVersion"] = json!(st.revision.to_string());
            st.configmaps.insert(object_name, object.clone());
            (201, object)
        }
        ("PUT", Some(name)) => {
            if name != object_name {
                return invalid("metadata.name must match the path");
            }
            let Some(current) = st.configmaps.get(name) else {
                return not_found(name);
            };
            // No resourceVersion: an unconditional update, as the API
            // server allows; a stale one: 409.
            let wanted = &object["metadata"]["resourceVersion"];
            if !wanted.is_null() && *wanted != current["metadata"]["resourceVersion"] {
                return (
                    409,
                    status_object(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on configmaps \"{name}\": the object \
                             has been modified; please apply your changes to the latest version \
                             and try again"
                        ),
                    ),
                );
            }
            st.revision += 1;
            object["metadata"]["resourceVersion"] = json!(st.revision.to_string());
            st.configmaps.insert(name.to_string(), object.clone());
            (200, object)
        }
        _ => (
            405,
            status_object(405, "MethodNotAllowed", "method not allowed"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorize(method: &str, target: &str) -> Result<(), String> {
        RequestAttributes::of(method, target).authorize(JOINSVC_ROLE_NAMESPACE, JOINSVC_ROLE_RULES)
    }

    #[test]
    fn joinsvc_role_allows_creating_secrets_and_the_peer_registry_only() {
        assert_eq!(authorize("POST", SECRETS_PATH), Ok(()));
        let registry = format!("{CONFIGMAPS_PATH}/confboot-vpn-peers");
        let filter = format!("{CONFIGMAPS_PATH}/confboot-issued-filter");
        assert_eq!(authorize("POST", CONFIGMAPS_PATH), Ok(()));
        for object in [&registry, &filter] {
            assert_eq!(authorize("GET", object), Ok(()));
            assert_eq!(authorize("PUT", object), Ok(()));
        }
        // Other ConfigMaps, and other verbs on the registry, are refused:
        // the names limit only get and update.
        for (method, target, verb) in [
            ("GET", format!("{CONFIGMAPS_PATH}/kubeadm-config"), "get"),
            ("PUT", format!("{CONFIGMAPS_PATH}/kubeadm-config"), "update"),
            ("DELETE", registry.clone(), "delete"),
            ("PATCH", registry.clone(), "patch"),
            ("GET", CONFIGMAPS_PATH.to_string(), "list"),
            ("GET", format!("{CONFIGMAPS_PATH}?watch=true"), "watch"),
        ] {
            let err = authorize(method, &target).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "configmaps is forbidden: User \"{JOINSVC_SERVICE_ACCOUNT}\" cannot {verb} resource \"configmaps\""
                )),
                "{method} {target}: {err}"
            );
        }
        for (method, target, verb) in [
            ("GET", SECRETS_PATH, "list"),
            (
                "GET",
                "/api/v1/namespaces/kube-system/secrets?watch=true",
                "watch",
            ),
            (
                "GET",
                "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
                "get",
            ),
            (
                "PUT",
                "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
                "update",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
                "patch",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
                "delete",
            ),
            ("DELETE", SECRETS_PATH, "deletecollection"),
        ] {
            let err = authorize(method, target).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "secrets is forbidden: User \"{JOINSVC_SERVICE_ACCOUNT}\" cannot {verb} resource \"secrets\""
                )) && err.ends_with("in the namespace \"kube-system\""),
                "{method} {target}: {err}"
            );
        }
        // Another namespace, another resource, a cluster-scoped one, a
        // subresource, another API group, a path outside the API.
        for (method, target) in [
            ("POST", "/api/v1/namespaces/default/secrets"),
            ("POST", "/api/v1/namespaces/default/configmaps"),
            (
                "GET",
                "/api/v1/namespaces/default/configmaps/confboot-vpn-peers",
            ),
            ("GET", "/api/v1/secrets"),
            ("GET", "/api/v1/namespaces/kube-system"),
            (
                "POST",
                "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
            ),
            (
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles",
            ),
            ("GET", "/version"),
        ] {
            assert!(authorize(method, target).is_err(), "{method} {target}");
        }
        assert_eq!(
            authorize("GET", "/version"),
            Err(format!(
                "forbidden: User \"{JOINSVC_SERVICE_ACCOUNT}\" cannot get path \"/version\""
            ))
        );
    }

    #[test]
    fn request_attributes_follow_the_api_servers_parser() {
        assert_eq!(
            RequestAttributes::of(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/r/status?x=1"
            ),
            RequestAttributes::Resource {
                verb: "create",
                api_group: "rbac.authorization.k8s.io".into(),
                namespace: Some("ns".into()),
                resource: "roles/status".into(),
                name: Some("r".into()),
            }
        );
        assert_eq!(
            RequestAttributes::of("GET", "/api/v1/namespaces/kube-system"),
            RequestAttributes::Resource {
                verb: "get",
                api_group: String::new(),
                namespace: None,
                resource: "namespaces".into(),
                name: Some("kube-system".into()),
            }
        );
        assert_eq!(
            RequestAttributes::of("GET", "/healthz"),
            RequestAttributes::NonResource {
                verb: "get".into(),
                path: "/healthz".into(),
            }
        );
    }

    #[test]
    fn a_wildcard_rule_matches_anything_in_its_namespace() {
        const ALL: &[PolicyRule] = &[PolicyRule {
            api_groups: &["*"],
            resources: &["*"],
            verbs: &["*"],
            resource_names: &[],
        }];
        let attrs = RequestAttributes::of("DELETE", "/api/v1/namespaces/kube-system/secrets/x");
        assert_eq!(attrs.authorize("kube-system", ALL), Ok(()));
        assert!(attrs.authorize("default", ALL).is_err());
        assert!(attrs.authorize("kube-system", &[]).is_err());
    }
}
