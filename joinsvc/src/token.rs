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

use crate::kube_api::{KubeApi, KubeApiError, Namespace, SendMethod, TOKEN_NAMESPACE};

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

    /// A fresh random token (not yet known to any API server).
    pub fn generate() -> Result<BootstrapToken, TokenError> {
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
    /// The API server did not accept joinsvc's service-account token (401).
    #[error(
        "Kubernetes API answered 401: {message} (joinsvc's service-account token is not accepted)"
    )]
    Unauthorized {
        /// The API server's message (bounded).
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

/// The label every bootstrap-token Secret joinsvc creates carries: the
/// namespace of the joinsvc that created it (its `--kube-namespace`), so
/// its tokens can be told from kubeadm's and from other tenants' in
/// kube-system (`kubectl get secrets -n kube-system -l
/// confboot.io/joinsvc-namespace=kube-system`).
pub const NAMESPACE_LABEL: &str = "confboot.io/joinsvc-namespace";

/// Creates bootstrap-token Secrets through the Kubernetes API.
pub struct KubeApiTokenIssuer {
    api: KubeApi,
    /// `<api_url>/api/v1/namespaces/kube-system/secrets`, parsed once.
    secrets_uri: ureq::http::Uri,
    /// The value of [`NAMESPACE_LABEL`].
    label: Namespace,
}

impl KubeApiTokenIssuer {
    /// Creates tokens through `api`, labelled for kube-system.
    pub fn new(api: KubeApi) -> Result<KubeApiTokenIssuer, TokenError> {
        let secrets_uri = api.uri(&format!("/api/v1/namespaces/{TOKEN_NAMESPACE}/secrets"))?;
        Ok(KubeApiTokenIssuer {
            api,
            secrets_uri,
            label: Namespace::default(),
        })
    }

    /// The same issuer labelling its tokens for the joinsvc of `namespace`
    /// (the Secrets stay in kube-system).
    pub fn labelled_for(mut self, namespace: &Namespace) -> KubeApiTokenIssuer {
        self.label = namespace.clone();
        self
    }
}

impl From<KubeApiError> for TokenError {
    fn from(e: KubeApiError) -> TokenError {
        match e {
            KubeApiError::Unreachable(m) => TokenError::Unreachable(m),
            KubeApiError::Config(m) => TokenError::Config(m),
            KubeApiError::Unauthorized { message } => TokenError::Unauthorized { message },
            KubeApiError::Forbidden { message } => TokenError::Forbidden { message },
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
                    "metadata": {
                        "name": format!("bootstrap-token-{}", token.id),
                        "namespace": TOKEN_NAMESPACE,
                        "labels": {NAMESPACE_LABEL: self.label.as_str()},
                    },
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
            // The body echoes the Secret: the answer is zeroized. A 401 or
            // 403 ends the call at once (`?`): no other id changes it.
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
            let err = TokenError::Api {
                status,
                reason: answer.status_field("reason"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
                TokenError::Unauthorized {
                    message: "Unauthorized".into(),
                },
                "Kubernetes API answered 401: Unauthorized (joinsvc's service-account token is \
                 not accepted)"
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
