//! A **double** of the Kubernetes API server, for the one call confboot
//! makes: creating a bootstrap-token Secret
//! (`POST /api/v1/namespaces/kube-system/secrets`). Kubernetes cannot run on
//! these machines; this double follows the real contract and checks every
//! request as the API server would: HTTPS with its own CA, the bearer token,
//! the path, the content type, and the Secret's schema for bootstrap tokens.
//! It answers 201 with the created object, 401 for a wrong token, 404 for
//! other paths, 409 when the Secret exists, 422 for an invalid Secret, and can
//! fail on demand (500, 409, or no answer at all).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// The path the double serves.
pub const SECRETS_PATH: &str = "/api/v1/namespaces/kube-system/secrets";

/// A failure the double produces on demand, once per queued entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Answer 500 Internal Server Error.
    InternalError,
    /// Answer 409 Conflict as if the Secret already existed.
    Conflict,
    /// Read the request and never answer (the client must time out).
    NoAnswer,
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
    created: Vec<CreatedToken>,
    requests: usize,
}

/// A running double; ends its thread when dropped.
pub struct KubeApiDouble {
    addr: SocketAddr,
    ca_der: Vec<u8>,
    state: Arc<Mutex<State>>,
    stop: confboot::rpc::Stop,
    thread: Option<JoinHandle<()>>,
}

impl KubeApiDouble {
    /// Starts the double on loopback; requests must carry `Bearer <bearer_token>`.
    pub fn start(bearer_token: &str) -> KubeApiDouble {
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
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = confboot::rpc::Stop::new();
        let thread = {
            let (state, stop, token) = (Arc::clone(&state), stop.clone(), bearer_token.to_string());
            std::thread::spawn(move || {
                while !stop.is_raised() {
                    match listener.accept() {
                        Ok((sock, _)) => {
                            let (tls, state, token) =
                                (Arc::clone(&tls), Arc::clone(&state), token.clone());
                            let stop = stop.clone();
                            std::thread::spawn(move || serve(sock, tls, &state, &token, &stop));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        KubeApiDouble {
            addr,
            ca_der,
            state,
            stop,
            thread: Some(thread),
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
        let b64 = confboot::base64::encode(&self.ca_der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        )
    }

    /// Makes the next requests fail, in order.
    pub fn fail_next(&self, failures: &[Failure]) {
        self.state.lock().unwrap().failures.extend(failures);
    }

    /// The tokens created so far.
    pub fn created(&self) -> Vec<CreatedToken> {
        self.state.lock().unwrap().created.clone()
    }

    /// Requests received so far (whatever their outcome).
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }
}

impl Drop for KubeApiDouble {
    fn drop(&mut self) {
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    sock: TcpStream,
    tls: Arc<rustls::ServerConfig>,
    state: &Mutex<State>,
    token: &str,
    stop: &confboot::rpc::Stop,
) {
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
    let conn = match rustls::ServerConnection::new(tls) {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut stream = rustls::StreamOwned::new(conn, sock);
    let Some((method, path, headers, body)) = read_request(&mut stream) else {
        return;
    };
    let failure = {
        let mut st = state.lock().unwrap();
        st.requests += 1;
        st.failures.pop_front()
    };
    let (code, reply) = match failure {
        Some(Failure::NoAnswer) => {
            while !stop.is_raised() {
                std::thread::sleep(Duration::from_millis(10));
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
        None => handle(&method, &path, &headers, &body, state, token),
    };
    let text = reply.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

type Request = (String, String, Vec<(String, String)>, Vec<u8>);

fn read_request<S: Read>(stream: S) -> Option<Request> {
    let mut r = BufReader::new(stream.take(1 << 20));
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > 64 * 1024 {
        return None;
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((method, path, headers, body))
}

fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code})
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

fn handle(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
    state: &Mutex<State>,
    token: &str,
) -> (u16, Value) {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if header("authorization") != Some(&format!("Bearer {token}")) {
        return (401, status_object(401, "Unauthorized", "Unauthorized"));
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
    if st.created.iter().any(|t| t.id == id) {
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
