//! Who may do what: users, permissions and credentials, decided without IO.
//!
//! Why a crate of its own: the same policy guards the HTTP API, the media delivery over HTTP and
//! RTSP, and each protocol only has to say what a request wants ([`Access`]) and what it
//! carried ([`Credentials`]); the decision ([`Decision`]) and its words are made once here. It is
//! sans-IO: no sockets, no clock, so the server, tests and fuzzers drive it alike.
//!
//! The model is the one operators know from MediaMTX (`[auth]` in the TOML config,
//! `config/example.toml`):
//!
//! - three permissions: [`Permission::Read`] (play: RTSP, HLS, `/objects`, the read API),
//!   [`Permission::Record`] (`PUT /api/v1/record`), [`Permission::Admin`] (anything else that
//!   writes or deletes: disks, nodes, ingest, fsck);
//! - `anonymous`: what a client without credentials may do (read only by default);
//! - `[[auth.users]]`: a name, a password (plain, or an argon2 PHC string in `password_hash`), an
//!   optional bearer token, permissions, and name globs restricting which objects read and record
//!   apply to.
//!
//! **Secure by default.** With no user configured, record and admin are open only to *trusted
//! peers* (loopback, and in a cluster the members' own addresses, for node-to-node calls), and the
//! server says so when it starts ([`Authority::notice`]). Once users exist, record and admin need
//! their credentials from everyone. HTTP Basic (RFC 7617) is taken only over TLS or from a
//! trusted peer: on a plain connection from elsewhere the password has already crossed the
//! network in the clear, so it is refused with a reason rather than rewarded; bearer tokens
//! (RFC 6750) are accepted from anywhere. RTSP clients answer Digest challenges ([`digest`],
//! RFC 7616), which never send the password. Secrets are compared in constant time.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

pub mod digest;
mod glob;
pub mod throttle;

pub use digest::{DigestResponse, NonceState, Nonces};
pub use glob::Glob;

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Play an object (RTSP, HLS, `/objects`) and read the API.
    Read,
    /// Record into the store: `PUT /api/v1/record/NAME`, and publishing a live feed over RTSP
    /// (ANNOUNCE, SETUP `mode=record`, RECORD). `publish` in `[auth]` is another name for it.
    #[serde(alias = "publish")]
    Record,
    /// Everything else that writes or deletes: disks, nodes, ingest, fsck.
    Admin,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Record => "record",
            Self::Admin => "admin",
        })
    }
}

/// `[auth]` of the configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// What clients without credentials may do. Default `["read"]`.
    pub anonymous: Vec<Permission>,
    /// The users (`[[auth.users]]`). Default: none, meaning record and admin only from loopback
    /// (and cluster members).
    pub users: Vec<UserSection>,
}

impl Default for AuthSection {
    fn default() -> Self {
        Self { anonymous: vec![Permission::Read], users: Vec::new() }
    }
}

/// One `[[auth.users]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSection {
    /// The user name (RTSP and HTTP Basic).
    pub name: String,
    /// The password in clear (the config file is then a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The password as an argon2 PHC string (`$argon2id$v=19$…`, `isochron auth hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// A bearer token (`Authorization: Bearer TOKEN`) standing for this user, at least 16
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// What the user may do.
    pub permissions: Vec<Permission>,
    /// Name globs (`*`, `?`) of the objects read and record apply to. Default `["*"]`.
    #[serde(default = "all_objects")]
    pub objects: Vec<String>,
}

fn all_objects() -> Vec<String> {
    vec!["*".into()]
}

/// A configuration error, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    /// The key, e.g. `auth.users[1].password_hash`.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
}

#[derive(Clone, Debug)]
enum Secret {
    Plain(String),
    /// A validated PHC string.
    Hash(String),
}

#[derive(Clone, Debug)]
struct User {
    name: String,
    secret: Option<Secret>,
    token: Option<String>,
    permissions: BTreeSet<Permission>,
    objects: Vec<Glob>,
}

/// Credentials a request carried.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// HTTP Basic (RFC 7617), or an RTSP URL's `user:pass@`.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// A bearer token (RFC 6750).
    Bearer(String),
    /// HTTP Digest (RFC 7616), as RTSP clients answer a challenge.
    Digest(Box<DigestResponse>),
}

impl fmt::Debug for Credentials {
    // Never print a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic { user, .. } => write!(f, "Basic({user:?}, <password>)"),
            Self::Bearer(_) => f.write_str("Bearer(<token>)"),
            Self::Digest(d) => write!(f, "{d:?}"),
        }
    }
}

/// Why an `Authorization` header is not credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// A scheme other than Basic, Bearer and Digest.
    #[error("Authorization scheme {0:?} is not supported (Basic, Bearer or Digest)")]
    Scheme(String),
    /// Digest parameters that are incomplete or name an unknown algorithm.
    #[error("Digest credentials are incomplete or use an unknown algorithm")]
    BadDigest,
    /// Basic credentials that are not base64 of `user:password` in UTF-8.
    #[error("Basic credentials are not base64 of user:password")]
    Malformed,
}

impl Credentials {
    /// Parses an HTTP `Authorization` header value (RFC 9110 §11.6.2).
    pub fn from_authorization(value: &str) -> Result<Self, CredentialsError> {
        let value = value.trim();
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| CredentialsError::Malformed)?;
            let text = String::from_utf8(raw).map_err(|_| CredentialsError::Malformed)?;
            let (user, password) = text.split_once(':').ok_or(CredentialsError::Malformed)?;
            Ok(Self::Basic { user: user.to_owned(), password: password.to_owned() })
        } else if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
            Ok(Self::Bearer(rest.to_owned()))
        } else if scheme.eq_ignore_ascii_case("digest") {
            DigestResponse::parse(rest)
                .map(|d| Self::Digest(Box::new(d)))
                .ok_or(CredentialsError::BadDigest)
        } else {
            Err(CredentialsError::Scheme(scheme.chars().take(32).collect()))
        }
    }

    /// The `Authorization` header value for Basic and Bearer credentials (`None` for Digest,
    /// which answers one challenge).
    #[must_use]
    pub fn to_authorization(&self) -> Option<String> {
        Some(match self {
            Self::Basic { user, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            Self::Bearer(t) => format!("Bearer {t}"),
            Self::Digest(_) => return None,
        })
    }
}

/// What a request wants, and from where.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    /// The permission it needs.
    pub permission: Permission,
    /// The object it reads or records, if one (checked against the user's globs).
    pub object: Option<&'a str>,
    /// What it carried.
    pub credentials: Option<&'a Credentials>,
    /// It comes from loopback or a cluster member's address.
    pub trusted_peer: bool,
    /// The connection is TLS.
    pub secure: bool,
    /// The request's method (Digest hashes it).
    pub method: &'a str,
    /// Unix seconds now (Digest nonces expire).
    pub now_unix_s: u64,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead (as this user, or anonymously).
    Allow {
        /// The user, if credentials were given.
        user: Option<String>,
    },
    /// No or wrong credentials: HTTP/RTSP 401 with a challenge.
    Unauthorized(String),
    /// Known, but not allowed: 403.
    Forbidden(String),
}

/// The checked policy (see the module docs).
#[derive(Clone, Debug)]
pub struct Authority {
    anonymous: BTreeSet<Permission>,
    users: Vec<User>,
    nonces: Nonces,
    /// Basic credentials verified against an argon2 hash lately: an HMAC of the user and
    /// password under `cache_key`, to when they stay good (unix s). argon2 costs about 20 ms of
    /// CPU a check, which a client sending Basic on every request would pay each time.
    verified: Arc<Mutex<HashMap<[u8; 32], u64>>>,
    cache_key: [u8; 32],
    /// Wrong answers, per client address and per user ([`throttle::Throttle`]).
    failures: Arc<Mutex<throttle::Throttle>>,
}

/// How long verified Basic credentials are taken without hashing again, seconds.
pub const BASIC_CACHE_S: u64 = 60;
/// The most verified Basic credentials remembered (expired ones go first, then all).
const BASIC_CACHE_ENTRIES: usize = 4096;

/// The realm of every challenge.
pub const REALM: &str = "isochron";

/// How long a Digest nonce is good for, seconds.
pub const NONCE_LIFETIME_S: u64 = 300;

impl Default for Authority {
    fn default() -> Self {
        Self::new(&AuthSection::default(), [0; 32]).expect("the default policy is valid")
    }
}

/// Shortest bearer token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

impl Authority {
    /// Checks `[auth]` once, at start: every error names its key. `nonce_secret` binds Digest
    /// nonces to this server: random, drawn by the caller (this crate does no IO).
    pub fn new(section: &AuthSection, nonce_secret: [u8; 32]) -> Result<Self, ConfigError> {
        let mut users: Vec<User> = Vec::new();
        for (i, u) in section.users.iter().enumerate() {
            let key = |k: &str| format!("auth.users[{i}].{k}");
            let err = |k: &str, p: String| ConfigError { key: key(k), problem: p };
            if u.name.is_empty() || u.name.contains(':') || u.name.chars().any(char::is_control) {
                return Err(err("name", format!("{:?}: empty, or with ':' or a control", u.name)));
            }
            if users.iter().any(|o| o.name == u.name) {
                return Err(err("name", format!("{:?} is configured twice", u.name)));
            }
            let secret = match (&u.password, &u.password_hash) {
                (Some(_), Some(_)) => {
                    return Err(err("password", "give password or password_hash, not both".into()));
                }
                (Some(p), None) if p.is_empty() => {
                    return Err(err("password", "empty".into()));
                }
                (Some(p), None) => Some(Secret::Plain(p.clone())),
                (None, Some(h)) => {
                    PasswordHash::new(h).map_err(|e| {
                        err("password_hash", format!("not an argon2 PHC string ({e})"))
                    })?;
                    Some(Secret::Hash(h.clone()))
                }
                (None, None) => None,
            };
            if let Some(t) = &u.token
                && (t.len() < MIN_TOKEN_LEN
                    || t.chars().any(|c| c.is_whitespace() || c.is_control()))
            {
                return Err(err(
                    "token",
                    format!("at least {MIN_TOKEN_LEN} characters, no spaces or controls"),
                ));
            }
            if let Some(t) = &u.token
                && users.iter().any(|o| o.token.as_ref() == Some(t))
            {
                return Err(err("token", "another user has the same token".into()));
            }
            if secret.is_none() && u.token.is_none() {
                return Err(err(
                    "password",
                    "a user needs a password, password_hash or token".into(),
                ));
            }
            let objects = u
                .objects
                .iter()
                .map(|g| Glob::new(g).map_err(|p| err("objects", p)))
                .collect::<Result<Vec<_>, _>>()?;
            users.push(User {
                name: u.name.clone(),
                secret,
                token: u.token.clone(),
                permissions: u.permissions.iter().copied().collect(),
                objects,
            });
        }
        // The cache's key: derived from the nonce secret, never equal to it.
        let cache_key = {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&nonce_secret)
                .expect("HMAC takes a key of any length");
            mac.update(b"isochron basic cache");
            mac.finalize().into_bytes().into()
        };
        Ok(Self {
            anonymous: section.anonymous.iter().copied().collect(),
            users,
            nonces: Nonces::new(nonce_secret, NONCE_LIFETIME_S),
            verified: Arc::default(),
            cache_key,
            failures: Arc::default(),
        })
    }

    /// How long a request with credentials from `client` (as `user`) must wait before it is
    /// checked, at `now_ms` (unix ms): nothing until a few wrong answers, then exponentially
    /// longer (capped); each call takes its turn ([`throttle::Throttle::admit`]).
    #[must_use]
    pub fn wait_before_check(&self, client: IpAddr, user: Option<&str>, now_ms: u64) -> u64 {
        let mut t = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        t.admit(&throttle::keys(client, user), now_ms)
    }

    /// Credentials from `client` (as `user`) were wrong at `now_ms`: returns how many wrong
    /// answers in a row that address has now sent.
    pub fn wrong_answer(&self, client: IpAddr, user: Option<&str>, now_ms: u64) -> u32 {
        let mut t = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        t.failed(&throttle::keys(client, user), now_ms)
    }

    /// Credentials from `client` as `user` were right: that address and user start afresh.
    pub fn right_answer(&self, client: IpAddr, user: Option<&str>) {
        let mut t = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        t.succeeded(&throttle::keys(client, user));
    }

    /// Whether `password` is `user`'s `secret`; a hash verified in the last [`BASIC_CACHE_S`]
    /// for the same user and password is not hashed again.
    fn verify_basic(&self, secret: &Secret, user: &str, password: &str, now_unix_s: u64) -> bool {
        let Secret::Hash(_) = secret else { return verify(secret, password) };
        let key: [u8; 32] = {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.cache_key)
                .expect("HMAC takes a key of any length");
            mac.update(user.as_bytes());
            mac.update(&[0]);
            mac.update(password.as_bytes());
            mac.finalize().into_bytes().into()
        };
        let cached = {
            let cache = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            cache.get(&key).is_some_and(|&until| until > now_unix_s)
        };
        if cached {
            return true;
        }
        let good = verify(secret, password);
        if good {
            let mut cache = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= BASIC_CACHE_ENTRIES {
                cache.retain(|_, until| *until > now_unix_s);
                if cache.len() >= BASIC_CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, now_unix_s + BASIC_CACHE_S);
        }
        good
    }

    /// The Digest challenges for a 401 at `now_unix_s` (`WWW-Authenticate` values, MD5 first),
    /// `stale` when the client's nonce had expired (RFC 7616 §3.3).
    #[must_use]
    pub fn digest_challenges(&self, now_unix_s: u64, stale: bool) -> [String; 2] {
        self.nonces.challenges(REALM, now_unix_s, stale)
    }

    /// Whether `credentials` are Digest with a nonce of this server's that has expired.
    #[must_use]
    pub fn is_stale(&self, credentials: Option<&Credentials>, now_unix_s: u64) -> bool {
        matches!(credentials, Some(Credentials::Digest(d))
            if self.nonces.check(&d.nonce, now_unix_s) == NonceState::Stale)
    }

    /// Whether any user is configured.
    #[must_use]
    pub fn has_users(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether clients without credentials may `permission`.
    #[must_use]
    pub fn anonymous_may(&self, permission: Permission) -> bool {
        self.anonymous.contains(&permission)
    }

    /// What the server should say at start about who may write (one line).
    #[must_use]
    pub fn notice(&self) -> String {
        let anon: Vec<String> = self.anonymous.iter().map(ToString::to_string).collect();
        let anon = if anon.is_empty() { "nothing".to_owned() } else { anon.join(", ") };
        if self.has_users() {
            format!(
                "auth: {} user(s) configured; anonymous clients may: {anon}; record and admin \
                 need credentials",
                self.users.len()
            )
        } else {
            format!(
                "auth: no users configured ([auth] users): record and admin are open only to \
                 loopback and cluster members; anonymous clients may: {anon}"
            )
        }
    }

    /// Decides `access` (see the module docs).
    #[must_use]
    pub fn check(&self, access: &Access<'_>) -> Decision {
        let p = access.permission;
        let Some(creds) = access.credentials else {
            if self.anonymous.contains(&p) {
                return Decision::Allow { user: None };
            }
            if !self.has_users() && p != Permission::Read && access.trusted_peer {
                return Decision::Allow { user: None };
            }
            return Decision::Unauthorized(if self.has_users() || p == Permission::Read {
                format!("{p} needs credentials")
            } else {
                format!("{p} is open only to loopback until users are configured ([auth] users)")
            });
        };
        let user = match creds {
            Credentials::Basic { .. } if !access.secure && !access.trusted_peer => {
                return Decision::Unauthorized(
                    "Basic credentials are taken only over TLS or from loopback; use a bearer \
                     token"
                        .into(),
                );
            }
            Credentials::Basic { user, password } => self.users.iter().find(|u| {
                u.name == *user
                    && u.secret
                        .as_ref()
                        .is_some_and(|s| self.verify_basic(s, user, password, access.now_unix_s))
            }),
            Credentials::Bearer(t) => self.users.iter().find(|u| {
                u.token.as_ref().is_some_and(|k| bool::from(k.as_bytes().ct_eq(t.as_bytes())))
            }),
            Credentials::Digest(d) => {
                match self.nonces.check(&d.nonce, access.now_unix_s) {
                    NonceState::Fresh => {}
                    NonceState::Stale => return Decision::Unauthorized("nonce expired".into()),
                    NonceState::Invalid => {
                        return Decision::Unauthorized("nonce not issued by this server".into());
                    }
                }
                let user = self.users.iter().find(|u| u.name == d.username);
                if let Some(u) = user
                    && matches!(u.secret, Some(Secret::Hash(_)))
                {
                    return Decision::Unauthorized(format!(
                        "user {} has only a password_hash, and Digest needs the password \
                         (set password, or use Basic over TLS)",
                        u.name
                    ));
                }
                user.filter(|u| {
                    d.realm == REALM
                        && matches!(&u.secret, Some(Secret::Plain(p)) if d.verifies(p, access.method))
                })
            }
        };
        let Some(user) = user else {
            return Decision::Unauthorized("wrong user name, password or token".into());
        };
        if !user.permissions.contains(&p) {
            return Decision::Forbidden(format!("user {} may not {p}", user.name));
        }
        if let Some(object) = access.object
            && p != Permission::Admin
            && !user.objects.iter().any(|g| g.matches(object))
        {
            return Decision::Forbidden(format!("user {} may not {p} {object:?}", user.name));
        }
        Decision::Allow { user: Some(user.name.clone()) }
    }
}

fn verify(secret: &Secret, password: &str) -> bool {
    match secret {
        Secret::Plain(p) => bool::from(p.as_bytes().ct_eq(password.as_bytes())),
        Secret::Hash(h) => PasswordHash::new(h).is_ok_and(|h| {
            argon2::Argon2::default().verify_password(password.as_bytes(), &h).is_ok()
        }),
    }
}

/// An argon2id PHC string for `password` with `salt` (16 random bytes from the caller: this
/// crate does no IO, randomness included; `isochron auth hash`).
pub fn hash_password(password: &str, salt: &[u8; 16]) -> Result<String, String> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::encode_b64(salt).map_err(|e| e.to_string())?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
