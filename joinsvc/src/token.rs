//! Kubernetes bootstrap tokens: a joining node authenticates to the API
//! server with one, as `kubeadm join --token` does.
//!
//! [`KubeApiTokenIssuer`] creates the token's Secret through the Kubernetes
//! API (ureq over rustls), with the pod's service-account token and CA
//! bundle: type `bootstrap.kubernetes.io/token` in kube-system, valid 15
//! minutes, for authentication and signing, in kubeadm's default node group.

use std::fmt;
use std::time::{Duration, SystemTime};

use confboot_util::time::rfc3339;
use ring::rand::SecureRandom;
use zeroize::Zeroizing;

use crate::kube_api::{KubeApi, KubeApiError, SendMethod};

/// How long a bootstrap token is valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// kubeadm's default group for joining nodes.
pub const DEFAULT_NODE_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// Attempts with a fresh token id when the API answers 409 Conflict.
const CONFLICT_RETRIES: usize = 3;
/// Largest API response read.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;

/// A bootstrap token, `<id>.<secret>`. The secret half is zeroized on drop
/// and never printed.
pub struct BootstrapToken {
    id: String,
    secret: Zeroizing<String>,
}

impl BootstrapToken {
    /// The public token id (6 characters of `[a-z0-9]`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The token as kubeadm wants it: `<id>.<secret>`. A secret.
    pub fn to_token_string(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{}.{}", self.id, *self.secret))
    }

    fn generate() -> Result<BootstrapToken, TokenError> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let rng = ring::rand::SystemRandom::new();
        // Random bytes are drawn a block at a time (one getrandom call gives
        // the 22 characters with a probability above 1 - 10^-9; a block is
        // drawn again if rejections used it up) and zeroized on drop.
        let mut block = Zeroizing::new([0u8; 32]);
        let mut used = block.len();
        let mut pick = |n: usize| -> Result<Zeroizing<String>, TokenError> {
            let mut out = Zeroizing::new(String::with_capacity(n));
            while out.len() < n {
                if used == block.len() {
                    rng.fill(&mut block[..]).map_err(|_| TokenError::Random)?;
                    used = 0;
                }
                let b = block[used];
                used += 1;
                // Rejection sampling keeps the choice uniform: 252 = 7 × 36.
                if b < 252 {
                    out.push(ALPHABET[(b % 36) as usize] as char);
                }
            }
            Ok(out)
        };
        Ok(BootstrapToken {
            id: pick(6)?.to_string(),
            secret: pick(16)?,
        })
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<redacted>)", self.id)
    }
}

/// Why a token could not be created.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The API server answered with an error status.
    #[error("Kubernetes API answered {status}: {reason}")]
    Api {
        /// HTTP status code.
        status: u16,
        /// The API's reason, if it sent one.
        reason: String,
    },
    /// The API server refused joinsvc's ServiceAccount (403): its Role or
    /// RoleBinding does not allow creating Secrets in kube-system.
    #[error(
        "Kubernetes API answered 403: {message} (joinsvc's Role must allow \
         `create` on secrets in kube-system: deploy/kubernetes/joinsvc.yaml)"
    )]
    Forbidden {
        /// The API server's message (bounded), which names the user and
        /// the verb it may not use.
        message: String,
    },
    /// The API server could not be reached or did not answer in time.
    #[error("Kubernetes API unreachable: {0}")]
    Unreachable(String),
    /// Configuration (service account files, environment) is missing or bad.
    #[error("Kubernetes API client not configured: {0}")]
    Config(String),
    /// Randomness was not available.
    #[error("no randomness available")]
    Random,
}

/// Creates bootstrap tokens (a trait so the ticket logic is testable without
/// a cluster).
pub trait TokenIssuer: Send + Sync {
    /// Creates a token valid for [`TOKEN_TTL`].
    fn create_bootstrap_token(&self) -> Result<BootstrapToken, TokenError>;
}

/// Creates bootstrap-token Secrets through the Kubernetes API.
pub struct KubeApiTokenIssuer {
    api: KubeApi,
    /// `<api_url>/api/v1/namespaces/kube-system/secrets`, parsed once.
    secrets_uri: ureq::http::Uri,
}

impl KubeApiTokenIssuer {
    /// Creates tokens through `api`.
    pub fn new(api: KubeApi) -> Result<KubeApiTokenIssuer, TokenError> {
        let secrets_uri = api.uri("/api/v1/namespaces/kube-system/secrets")?;
        Ok(KubeApiTokenIssuer { api, secrets_uri })
    }
}

impl From<KubeApiError> for TokenError {
    fn from(e: KubeApiError) -> TokenError {
        match e {
            KubeApiError::Unreachable(m) => TokenError::Unreachable(m),
            KubeApiError::Config(m) => TokenError::Config(m),
        }
    }
}

impl TokenIssuer for KubeApiTokenIssuer {
    fn create_bootstrap_token(&self) -> Result<BootstrapToken, TokenError> {
        let mut last = None;
        for _ in 0..CONFLICT_RETRIES {
            let token = BootstrapToken::generate()?;
            let body = Zeroizing::new(
                serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": format!("bootstrap-token-{}", token.id), "namespace": "kube-system"},
                    "type": "bootstrap.kubernetes.io/token",
                    "stringData": {
                        "description": "Bootstrap token created by confboot joinsvc",
                        "token-id": token.id,
                        "token-secret": *token.secret,
                        "expiration": rfc3339(SystemTime::now() + TOKEN_TTL),
                        "usage-bootstrap-authentication": "true",
                        "usage-bootstrap-signing": "true",
                        "auth-extra-groups": DEFAULT_NODE_GROUP,
                    },
                })
                .to_string(),
            );
            // The body echoes the Secret: the answer is zeroized.
            let answer = self.api.send_json(
                SendMethod::Post,
                &self.secrets_uri,
                body.as_bytes(),
                MAX_RESPONSE_BYTES,
            )?;
            let status = answer.status;
            if status == 201 || status == 200 {
                return Ok(token);
            }
            let field = |name: &str| answer.status_field(name);
            if status == 403 {
                return Err(TokenError::Forbidden {
                    message: field("message"),
                });
            }
            let err = TokenError::Api {
                status,
                reason: field("reason"),
            };
            if status != 409 {
                return Err(err);
            }
            log::debug!("bootstrap token id {} taken; trying another", token.id);
            last = Some(err);
        }
        Err(last.expect("at least one attempt"))
    }
}

/// Token generation for other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    /// A fresh random token.
    pub fn generate() -> super::BootstrapToken {
        super::BootstrapToken::generate().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_tests::kube_double::{Failure, KubeApiDouble};
    use std::sync::Arc;

    #[test]
    fn each_error_prints_its_message() {
        let cases = [
            (
                TokenError::Api {
                    status: 500,
                    reason: "InternalError".into(),
                },
                "Kubernetes API answered 500: InternalError".to_string(),
            ),
            (
                TokenError::Forbidden {
                    message: "cannot create secrets".into(),
                },
                "Kubernetes API answered 403: cannot create secrets (joinsvc's Role must allow \
                 `create` on secrets in kube-system: deploy/kubernetes/joinsvc.yaml)"
                    .to_string(),
            ),
            (
                TokenError::Unreachable("refused".into()),
                "Kubernetes API unreachable: refused".to_string(),
            ),
            (
                TokenError::Config("no CA".into()),
                "Kubernetes API client not configured: no CA".to_string(),
            ),
            (TokenError::Random, "no randomness available".to_string()),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }

    const SA_TOKEN: &str = "service-account-token";

    fn issuer(double: &KubeApiDouble, token: &str, timeout: Duration) -> KubeApiTokenIssuer {
        let api = KubeApi::new(
            &double.url(),
            &double.ca_pem(),
            Zeroizing::new(token.into()),
            timeout,
            1,
        )
        .unwrap();
        KubeApiTokenIssuer::new(api).unwrap()
    }

    #[test]
    fn tokens_are_well_formed_and_redacted() {
        let t = BootstrapToken::generate().unwrap();
        let s = t.to_token_string();
        let (id, secret) = s.split_once('.').unwrap();
        assert_eq!(id.len(), 6);
        assert_eq!(secret.len(), 16);
        assert!(
            s.bytes()
                .all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit())
        );
        assert!(!format!("{t:?}").contains(secret));
        assert_ne!(BootstrapToken::generate().unwrap().id, t.id);
    }

    #[test]
    fn creates_a_secret_the_api_server_accepts() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let token = issuer(&double, SA_TOKEN, Duration::from_secs(10))
            .create_bootstrap_token()
            .unwrap();
        let created = double.created();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].id, token.id());
        assert_eq!(
            format!("{}.{}", created[0].id, created[0].secret),
            *token.to_token_string()
        );
        let now = rfc3339(SystemTime::now());
        assert!(
            created[0].expiration > now,
            "expiration {} after {now}",
            created[0].expiration
        );
    }

    #[test]
    fn tokens_reuse_one_kept_alive_connection() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let issuer = issuer(&double, SA_TOKEN, Duration::from_secs(10));
        for _ in 0..5 {
            issuer.create_bootstrap_token().unwrap();
        }
        assert_eq!(double.created().len(), 5);
        assert_eq!(
            double.connections(),
            1,
            "one TLS connection for five tokens"
        );
    }

    #[test]
    fn callers_at_once_each_keep_their_connection() {
        // Eight workers issue tokens at the same moments, ten rounds: each
        // call finds its connection kept from the round before (a pool
        // smaller than the workers closes the surplus after every round,
        // and the next round pays a TLS handshake for each).
        const WORKERS: usize = 8;
        let double = KubeApiDouble::start(SA_TOKEN);
        let api = KubeApi::new(
            &double.url(),
            &double.ca_pem(),
            Zeroizing::new(SA_TOKEN.into()),
            Duration::from_secs(10),
            WORKERS,
        )
        .unwrap();
        let issuer = Arc::new(KubeApiTokenIssuer::new(api).unwrap());
        let round = Arc::new(std::sync::Barrier::new(WORKERS));
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (issuer, round) = (issuer.clone(), round.clone());
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        round.wait();
                        issuer.create_bootstrap_token().unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(double.created().len(), WORKERS * 10);
        assert!(
            double.connections() <= WORKERS as u64,
            "{} connections for {WORKERS} workers",
            double.connections()
        );
    }

    #[test]
    fn wrong_bearer_token_is_refused() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let err = issuer(&double, "stolen", Duration::from_secs(10))
            .create_bootstrap_token()
            .unwrap_err();
        assert_eq!(
            err,
            TokenError::Api {
                status: 401,
                reason: "Unauthorized".into()
            }
        );
        assert!(double.created().is_empty());
    }

    #[test]
    fn a_role_without_create_on_secrets_is_named_in_the_error() {
        // The ServiceAccount authenticates, but its RoleBinding is missing.
        let double = KubeApiDouble::start_with_role(SA_TOKEN, &[]);
        let err = issuer(&double, SA_TOKEN, Duration::from_secs(10))
            .create_bootstrap_token()
            .unwrap_err();
        let TokenError::Forbidden { message } = &err else {
            panic!("{err:?}");
        };
        assert!(
            message.starts_with("secrets is forbidden: User \"system:serviceaccount:kube-system:confboot-joinsvc\" cannot create resource \"secrets\""),
            "{message}"
        );
        assert!(
            err.to_string().contains("deploy/kubernetes/joinsvc.yaml"),
            "{err}"
        );
        assert!(double.created().is_empty());
        // With joinsvc's Role, the same request is served.
        let double = KubeApiDouble::start(SA_TOKEN);
        issuer(&double, SA_TOKEN, Duration::from_secs(10))
            .create_bootstrap_token()
            .unwrap();
        assert_eq!(double.created().len(), 1);
    }

    #[test]
    fn untrusted_api_server_certificate_is_refused() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let other = KubeApiDouble::start(SA_TOKEN);
        let api = KubeApi::new(
            &double.url(),
            &other.ca_pem(),
            Zeroizing::new(SA_TOKEN.into()),
            Duration::from_secs(10),
            1,
        )
        .unwrap();
        let issuer = KubeApiTokenIssuer::new(api).unwrap();
        assert!(matches!(
            issuer.create_bootstrap_token(),
            Err(TokenError::Unreachable(_))
        ));
        assert_eq!(
            double.requests(),
            0,
            "no request may reach an untrusted server"
        );
    }

    #[test]
    fn server_errors_conflicts_and_timeouts() {
        let double = KubeApiDouble::start(SA_TOKEN);
        double.fail_next(&[Failure::InternalError]);
        let i = issuer(&double, SA_TOKEN, Duration::from_secs(10));
        assert_eq!(
            i.create_bootstrap_token().unwrap_err(),
            TokenError::Api {
                status: 500,
                reason: "InternalError".into()
            }
        );
        // A conflict is retried with a fresh id.
        double.fail_next(&[Failure::Conflict]);
        i.create_bootstrap_token().unwrap();
        assert_eq!(double.created().len(), 1);
        // Conflicts every time give up after a bounded number of attempts.
        double.fail_next(&[Failure::Conflict; 3]);
        assert_eq!(
            i.create_bootstrap_token().unwrap_err(),
            TokenError::Api {
                status: 409,
                reason: "AlreadyExists".into()
            }
        );
        // An API server that never answers runs into the client's timeout.
        double.fail_next(&[Failure::NoAnswer]);
        let quick = issuer(&double, SA_TOKEN, Duration::from_millis(300));
        assert!(matches!(
            quick.create_bootstrap_token(),
            Err(TokenError::Unreachable(_))
        ));
        assert_eq!(double.requests(), 1 + 2 + 3 + 1);
    }

    #[test]
    fn throttling_and_the_servers_own_timeout_are_api_errors() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let i = issuer(&double, SA_TOKEN, Duration::from_secs(10));
        double.fail_next(&[Failure::TooManyRequests, Failure::ServerTimeout]);
        for (status, reason) in [(429, "TooManyRequests"), (504, "Timeout")] {
            assert_eq!(
                i.create_bootstrap_token().unwrap_err(),
                TokenError::Api {
                    status,
                    reason: reason.into()
                }
            );
        }
        assert!(double.created().is_empty());
        i.create_bootstrap_token().unwrap();
    }

    #[test]
    fn slow_answers_within_and_beyond_the_timeout() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let i = issuer(&double, SA_TOKEN, Duration::from_millis(1500));
        // Slow but within the timeout: the token is the one stored.
        double.fail_next(&[Failure::Slow(Duration::from_millis(300))]);
        let token = i.create_bootstrap_token().unwrap();
        assert_eq!(double.created()[0].id, token.id());
        // Slower than the timeout: the call ends at the timeout, and the
        // Secret the API stored is left behind (it expires with its TTL).
        // (Had it waited for the answer, the call would have succeeded.)
        double.fail_next(&[Failure::Slow(Duration::from_secs(5))]);
        assert!(matches!(
            i.create_bootstrap_token(),
            Err(TokenError::Unreachable(_))
        ));
        assert_eq!(double.created().len(), 2);
        // The next call is served (a fresh connection).
        i.create_bootstrap_token().unwrap();
        assert_eq!(double.created().len(), 3);
    }

    #[test]
    fn bad_ca_bundle_is_a_config_error() {
        for pem in [
            "",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\nAAAA",
        ] {
            assert!(matches!(
                KubeApi::new(
                    "https://x",
                    pem,
                    Zeroizing::new(String::new()),
                    Duration::from_secs(1),
                    1,
                ),
                Err(KubeApiError::Config(_))
            ));
        }
    }
}
