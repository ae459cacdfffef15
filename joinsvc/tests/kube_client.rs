//! joinsvc's Kubernetes client and its bootstrap tokens against a real API
//! server (one control plane for this test binary,
//! `confboot_tests::kube::ControlPlane::shared`), as the ServiceAccount of
//! `deploy/kubernetes/joinsvc.yaml` with the Role shipped there; what a
//! real server cannot be made to do on demand (500, 409, 429, 504, no
//! answer, a slow answer) comes from the fault proxy in front of it
//! (`confboot_tests::kube_proxy`), which also counts connections and
//! requests. Authentication and authorization are always the real server's.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use confboot_tests::kube::ControlPlane;
use confboot_tests::kube_proxy::{Fault, FaultProxy};
use confboot_util::time::rfc3339;
use joinsvc::kube_api::{API_BUFFER_BYTES, KubeApi, KubeApiError};
use joinsvc::token::{KubeApiTokenIssuer, TokenError, TokenIssuer};
use serde_json::Value;
use zeroize::Zeroizing;

/// The shared plane, with joinsvc's account applied in kube-system once;
/// the account's token.
fn plane() -> (&'static ControlPlane, &'static str) {
    static TOKEN: OnceLock<String> = OnceLock::new();
    let plane = ControlPlane::shared();
    let token = TOKEN.get_or_init(|| plane.joinsvc_account("kube-system", &[]));
    (plane, token)
}

/// Tests that make bootstrap-token Secrets in kube-system run one at a
/// time (those that count them share the plane's kube-system).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn api(url: &str, ca_pem: &str, token: &str, timeout: Duration, connections: usize) -> KubeApi {
    KubeApi::new(
        url,
        ca_pem,
        Zeroizing::new(token.into()),
        timeout,
        connections,
    )
    .unwrap()
}

/// An issuer through the fault proxy in front of the plane.
fn issuer(proxy: &FaultProxy, token: &str, timeout: Duration) -> KubeApiTokenIssuer {
    KubeApiTokenIssuer::new(api(&proxy.url(), proxy.ca_pem(), token, timeout, 1)).unwrap()
}

fn proxy(plane: &ControlPlane) -> FaultProxy {
    FaultProxy::start(plane.endpoint(), &plane.ca_pem())
}

fn decoded(secret: &Value, key: &str) -> String {
    let b64 = secret["data"][key].as_str().unwrap_or_default();
    String::from_utf8(confboot_util::base64::decode(b64).unwrap()).unwrap()
}

#[test]
fn creates_a_secret_the_api_server_accepts_and_authenticates() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let token = issuer(&proxy, sa, Duration::from_secs(30))
        .create_bootstrap_token()
        .unwrap();
    let secret = plane.kubectl_json(&[
        "get",
        "secret",
        &format!("bootstrap-token-{}", token.id()),
        "-n",
        "kube-system",
    ]);
    assert_eq!(secret["type"], "bootstrap.kubernetes.io/token");
    assert_eq!(decoded(&secret, "token-id"), token.id());
    assert_eq!(
        format!(
            "{}.{}",
            decoded(&secret, "token-id"),
            decoded(&secret, "token-secret")
        ),
        *token.to_token_string()
    );
    let now = rfc3339(SystemTime::now());
    let expiration = decoded(&secret, "expiration");
    assert!(expiration > now, "expiration {expiration} after {now}");
    // The real bootstrap authenticator takes it, in kubeadm's node group
    // (once its informer has seen the Secret: within moments).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (user, groups) = loop {
        match plane.whoami(&token.to_token_string()) {
            Ok(identity) => break identity,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the API server never authenticated the token: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert_eq!(user, format!("system:bootstrap:{}", token.id()));
    assert!(
        groups
            .iter()
            .any(|g| g == "system:bootstrappers:kubeadm:default-node-token"),
        "{groups:?}"
    );
}

#[test]
fn tokens_reuse_one_kept_alive_connection() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let issuer = issuer(&proxy, sa, Duration::from_secs(30));
    for _ in 0..5 {
        issuer.create_bootstrap_token().unwrap();
    }
    assert_eq!(proxy.secret_requests(), 5);
    assert_eq!(proxy.connections(), 1, "one TLS connection for five tokens");
}

#[test]
fn callers_at_once_each_keep_their_connection() {
    let _one = one_at_a_time();
    // Eight workers issue tokens at the same moments, five rounds: each
    // call finds its connection kept from the round before (a pool
    // smaller than the workers closes the surplus after every round, and
    // the next round pays a TLS handshake for each).
    const WORKERS: usize = 8;
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let api = api(
        &proxy.url(),
        proxy.ca_pem(),
        sa,
        Duration::from_secs(60),
        WORKERS,
    );
    let issuer = Arc::new(KubeApiTokenIssuer::new(api).unwrap());
    let round = Arc::new(std::sync::Barrier::new(WORKERS));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (issuer, round) = (issuer.clone(), round.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    round.wait();
                    issuer.create_bootstrap_token().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(proxy.secret_requests(), (WORKERS * 5) as u64);
    assert!(
        proxy.connections() <= WORKERS as u64,
        "{} connections for {WORKERS} workers",
        proxy.connections()
    );
}

#[test]
fn a_wrong_bearer_token_is_refused_at_once() {
    let _one = one_at_a_time();
    let (plane, _) = plane();
    let proxy = proxy(plane);
    let before = plane.bootstrap_token_ids();
    let err = issuer(&proxy, "stolen", Duration::from_secs(30))
        .create_bootstrap_token()
        .unwrap_err();
    let TokenError::Unauthorized { message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(message, "Unauthorized");
    assert_eq!(proxy.requests(), 1, "a 401 is not retried");
    assert_eq!(plane.bootstrap_token_ids(), before);
}

#[test]
fn a_role_without_create_on_secrets_is_refused_at_once_and_named() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    // A ServiceAccount in kube-system that no RoleBinding names: the API
    // server authenticates it and RBAC refuses it.
    plane.kubectl(&[
        "create",
        "serviceaccount",
        "confboot-joinsvc-unbound",
        "-n",
        "kube-system",
    ]);
    let unbound = plane.service_account_token("kube-system", "confboot-joinsvc-unbound");
    let proxy = proxy(plane);
    let before = plane.bootstrap_token_ids();
    let begin = Instant::now();
    let err = issuer(&proxy, &unbound, Duration::from_secs(30))
        .create_bootstrap_token()
        .unwrap_err();
    eprintln!("403 returned in {:.3} s", begin.elapsed().as_secs_f64());
    let TokenError::Forbidden { message } = &err else {
        panic!("{err:?}");
    };
    assert!(
        message.starts_with(
            "secrets is forbidden: User \
             \"system:serviceaccount:kube-system:confboot-joinsvc-unbound\" cannot create \
             resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        ),
        "{message}"
    );
    assert!(
        err.to_string().contains("deploy/kubernetes/joinsvc.yaml"),
        "{err}"
    );
    assert_eq!(proxy.requests(), 1, "a 403 is not retried");
    assert_eq!(plane.bootstrap_token_ids(), before);
    // With joinsvc's Role, the same request is served.
    issuer(&proxy, sa, Duration::from_secs(30))
        .create_bootstrap_token()
        .unwrap();
}

#[test]
fn an_untrusted_api_server_certificate_is_refused() {
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    // The proxy serves its own certificate; the client trusts only the
    // cluster CA.
    let api = api(
        &proxy.url(),
        &plane.ca_pem(),
        sa,
        Duration::from_secs(30),
        1,
    );
    let issuer = KubeApiTokenIssuer::new(api).unwrap();
    assert!(matches!(
        issuer.create_bootstrap_token(),
        Err(TokenError::Unreachable(_))
    ));
    assert_eq!(
        proxy.requests(),
        0,
        "no request may reach an untrusted server"
    );
}

#[test]
fn server_errors_conflicts_and_timeouts() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let i = issuer(&proxy, sa, Duration::from_secs(30));
    proxy.fail_next(&[Fault::InternalError]);
    assert_eq!(
        i.create_bootstrap_token().unwrap_err(),
        TokenError::Api {
            status: 500,
            reason: "InternalError".into()
        }
    );
    // A conflict is retried with a fresh id.
    let before = plane.bootstrap_token_ids();
    proxy.fail_next(&[Fault::AlreadyExists]);
    let token = i.create_bootstrap_token().unwrap();
    let after = plane.bootstrap_token_ids();
    assert_eq!(after.len(), before.len() + 1);
    assert!(after.iter().any(|id| id == token.id()));
    // Conflicts every time give up after a bounded number of attempts.
    proxy.fail_next(&[Fault::AlreadyExists; 3]);
    assert_eq!(
        i.create_bootstrap_token().unwrap_err(),
        TokenError::Api {
            status: 409,
            reason: "AlreadyExists".into()
        }
    );
    // An API server that never answers runs into the client's timeout.
    proxy.fail_next(&[Fault::NoAnswer]);
    let quick = issuer(&proxy, sa, Duration::from_millis(500));
    assert!(matches!(
        quick.create_bootstrap_token(),
        Err(TokenError::Unreachable(_))
    ));
    assert_eq!(proxy.secret_requests(), 1 + 2 + 3 + 1);
    assert_eq!(plane.bootstrap_token_ids().len(), after.len());
}

#[test]
fn throttling_and_the_servers_own_timeout_are_api_errors() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let i = issuer(&proxy, sa, Duration::from_secs(30));
    let before = plane.bootstrap_token_ids();
    proxy.fail_next(&[Fault::TooManyRequests, Fault::ServerTimeout]);
    for (status, reason) in [(429, "TooManyRequests"), (504, "Timeout")] {
        assert_eq!(
            i.create_bootstrap_token().unwrap_err(),
            TokenError::Api {
                status,
                reason: reason.into()
            }
        );
    }
    assert_eq!(plane.bootstrap_token_ids(), before);
    i.create_bootstrap_token().unwrap();
}

#[test]
fn slow_answers_within_and_beyond_the_timeout() {
    let _one = one_at_a_time();
    let (plane, sa) = plane();
    let proxy = proxy(plane);
    let i = issuer(&proxy, sa, Duration::from_secs(5));
    // Slow but within the timeout: the token is the one stored.
    proxy.fail_next(&[Fault::Slow(Duration::from_millis(300))]);
    let token = i.create_bootstrap_token().unwrap();
    let before = plane.bootstrap_token_ids();
    assert!(before.iter().any(|id| id == token.id()));
    // Slower than the timeout: the call ends at the timeout, and the
    // Secret the API stored is left behind (it expires with its TTL).
    proxy.fail_next(&[Fault::Slow(Duration::from_secs(10))]);
    assert!(matches!(
        i.create_bootstrap_token(),
        Err(TokenError::Unreachable(_))
    ));
    assert_eq!(plane.bootstrap_token_ids().len(), before.len() + 1);
    // The next call is served (a fresh connection).
    i.create_bootstrap_token().unwrap();
    assert_eq!(plane.bootstrap_token_ids().len(), before.len() + 2);
}

#[test]
fn an_answer_larger_than_the_buffers_is_read_whole_and_bounded() {
    let (plane, _) = plane();
    let ns = plane.namespace("kube-client");
    let sa = plane.joinsvc_account(&ns, &[]);
    let dir = confboot_tests::TempDir::new("large-configmap");
    let filler = "a".repeat(8 * API_BUFFER_BYTES);
    std::fs::write(dir.path().join("x"), &filler).unwrap();
    plane.kubectl(&[
        "create",
        "configmap",
        "confboot-vpn-peers",
        "-n",
        &ns,
        &format!("--from-file=x={}", dir.path().join("x").display()),
    ]);
    let api = api(
        &plane.url(),
        &plane.ca_pem(),
        &sa,
        Duration::from_secs(30),
        1,
    );
    let uri = api
        .uri(&format!(
            "/api/v1/namespaces/{ns}/configmaps/confboot-vpn-peers"
        ))
        .unwrap();
    let whole = api.get(&uri, 1 << 20).unwrap();
    assert_eq!(whole.status, 200);
    let object: Value = serde_json::from_str(&whole.body).unwrap();
    assert_eq!(object["data"]["x"].as_str(), Some(filler.as_str()));
    // The caller's bound still holds: over it, no body at all.
    let cut = api.get(&uri, 4 * API_BUFFER_BYTES as u64).unwrap();
    assert_eq!(cut.status, 200);
    assert!(cut.body.is_empty());
    // What the Role does not allow (another ConfigMap's name) is the
    // client's own error, at once.
    let other = api
        .uri(&format!("/api/v1/namespaces/{ns}/configmaps/other"))
        .unwrap();
    assert!(matches!(
        api.get(&other, 1 << 20),
        Err(KubeApiError::Forbidden { .. })
    ));
}
