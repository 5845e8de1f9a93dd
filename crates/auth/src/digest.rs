//! HTTP Digest access authentication as RTSP uses it (RFC 7616; RFC 2617 and RFC 2069 for the
//! clients that still speak them).
//!
//! Why Digest for RTSP: RTSP runs over plain TCP, and Basic would send the password in the clear
//! on every request; the RTSP clients people use (ffmpeg, GStreamer, VLC's live555) all answer a
//! Digest challenge with MD5, and RFC 7616 adds SHA-256, so a challenge offers MD5 first and
//! SHA-256 second. Clients differ in what they send back: with `qop=auth` (ffmpeg: RFC 2617's
//! `nc` and `cnonce`) or without (live555 and GStreamer: RFC 2069's `H(HA1:nonce:HA2)`); both are
//! checked.
//!
//! Nonces are stateless and bound to this server: `TIME.MAC`, where MAC is an HMAC-SHA-256 of the
//! issue time under a secret drawn when the server starts ([`Nonces`]). A nonce from another
//! server or another run does not verify; an old one is *stale* (the challenge says
//! `stale=true`, and clients retry with the new nonce without asking the user again). Replays
//! within the lifetime are not tracked (no per-nonce state), which RFC 7616 §5.5 allows at the
//! cost of accepting a captured request again for that long.
//!
//! Digest needs the password itself (or HA1) on the server: users with only a `password_hash`
//! (argon2) cannot use it.

use std::fmt::Write as _;

use hmac::{Hmac, Mac};
use md5::Md5;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// The hash of a challenge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// `MD5` (what every RTSP client speaks).
    Md5,
    /// `SHA-256` (RFC 7616).
    Sha256,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Self::Md5 => "MD5",
            Self::Sha256 => "SHA-256",
        }
    }

    fn hex(self, data: &str) -> String {
        let mut out = String::new();
        let bytes: Vec<u8> = match self {
            Self::Md5 => Md5::digest(data.as_bytes()).to_vec(),
            Self::Sha256 => Sha256::digest(data.as_bytes()).to_vec(),
        };
        for b in bytes {
            let _ = write!(out, "{b:02x}");
        }
        out
    }
}

/// A client's `Authorization: Digest …` (the fields the check needs).
#[derive(Clone, PartialEq, Eq)]
pub struct DigestResponse {
    /// `username`.
    pub username: String,
    /// `realm`.
    pub realm: String,
    /// `nonce`.
    pub nonce: String,
    /// `uri` (the request URI as the client wrote it).
    pub uri: String,
    /// `response`, lowercase hex.
    pub response: String,
    /// `algorithm` (absent: MD5).
    pub algorithm: Algorithm,
    /// `qop`, `nc` and `cnonce`, when the client used `qop=auth`.
    pub qop: Option<(String, String)>,
}

impl std::fmt::Debug for DigestResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Digest({:?}, <response>)", self.username)
    }
}

impl DigestResponse {
    /// Parses the parameters after `Digest ` (RFC 7616 §3.4): comma-separated `key=value` or
    /// `key="quoted value"` with `\` escapes. `None` if a required one is missing or an
    /// algorithm is unknown.
    #[must_use]
    pub fn parse(params: &str) -> Option<Self> {
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut rest = params.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let key = key.trim().to_ascii_lowercase();
            let after = after.trim_start();
            let (value, tail) = if let Some(q) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = q.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.push(chars.next()?.1),
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &q[end?..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            };
            fields.push((key, value));
            rest = tail.trim_start().strip_prefix(',').unwrap_or(tail).trim_start();
            if !tail.trim_start().is_empty() && !tail.trim_start().starts_with(',') {
                return None;
            }
        }
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
        let algorithm = match get("algorithm").as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("MD5") => Algorithm::Md5,
            Some("SHA-256") => Algorithm::Sha256,
            Some(_) => return None,
        };
        let qop = match get("qop") {
            Some(q) if q.eq_ignore_ascii_case("auth") => Some((get("nc")?, get("cnonce")?)),
            Some(_) => return None,
            None => None,
        };
        Some(Self {
            username: get("username")?,
            realm: get("realm")?,
            nonce: get("nonce")?,
            uri: get("uri")?,
            response: get("response")?.to_ascii_lowercase(),
            algorithm,
            qop,
        })
    }

    /// Whether the response is right for `password` and the request's `method`.
    #[must_use]
    pub fn verifies(&self, password: &str, method: &str) -> bool {
        let a = self.algorithm;
        let ha1 = a.hex(&format!("{}:{}:{password}", self.username, self.realm));
        let ha2 = a.hex(&format!("{method}:{}", self.uri));
        let expected = match &self.qop {
            Some((nc, cnonce)) => a.hex(&format!("{ha1}:{}:{nc}:{cnonce}:auth:{ha2}", self.nonce)),
            None => a.hex(&format!("{ha1}:{}:{ha2}", self.nonce)),
        };
        bool::from(expected.as_bytes().ct_eq(self.response.as_bytes()))
    }
}

/// Issues and checks stateless nonces bound to a secret (see the module docs).
#[derive(Clone)]
pub struct Nonces {
    secret: [u8; 32],
    lifetime_s: u64,
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nonces(<secret>, {} s)", self.lifetime_s)
    }
}

/// What a nonce is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceState {
    /// Issued by this server, within its lifetime.
    Fresh,
    /// Issued by this server, expired: the client should retry with a new one.
    Stale,
    /// Not this server's.
    Invalid,
}

impl Nonces {
    /// Nonces under `secret` (random, drawn by the caller at start), valid for `lifetime_s`.
    #[must_use]
    pub fn new(secret: [u8; 32], lifetime_s: u64) -> Self {
        Self { secret, lifetime_s }
    }

    fn mac(&self, time: u64) -> String {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("HMAC takes a key of any length");
        m.update(&time.to_be_bytes());
        let tag = m.finalize().into_bytes();
        let mut out = String::new();
        for b in &tag[..16] {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// A nonce issued at `now_unix_s`.
    #[must_use]
    pub fn issue(&self, now_unix_s: u64) -> String {
        format!("{now_unix_s:x}.{}", self.mac(now_unix_s))
    }

    /// What `nonce` is worth at `now_unix_s`.
    #[must_use]
    pub fn check(&self, nonce: &str, now_unix_s: u64) -> NonceState {
        let Some((t, mac)) = nonce.split_once('.') else { return NonceState::Invalid };
        let Ok(time) = u64::from_str_radix(t, 16) else { return NonceState::Invalid };
        if !bool::from(self.mac(time).as_bytes().ct_eq(mac.as_bytes())) {
            return NonceState::Invalid;
        }
        if time > now_unix_s.saturating_add(60)
            || now_unix_s - time.min(now_unix_s) > self.lifetime_s
        {
            return NonceState::Stale;
        }
        NonceState::Fresh
    }

    /// The `WWW-Authenticate` values for a 401 (MD5 first, then SHA-256).
    #[must_use]
    pub fn challenges(&self, realm: &str, now_unix_s: u64, stale: bool) -> [String; 2] {
        let nonce = self.issue(now_unix_s);
        let stale = if stale { ", stale=true" } else { "" };
        [Algorithm::Md5, Algorithm::Sha256].map(|a| {
            format!(
                "Digest realm=\"{realm}\", nonce=\"{nonce}\", algorithm={}, qop=\"auth\"{stale}",
                a.name()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7616 §3.9.1.
    fn rfc_example(algorithm: &str, response: &str) -> String {
        format!(
            "username=\"Mufasa\", realm=\"http-auth@example.org\", uri=\"/dir/index.html\", \
             algorithm={algorithm}, nonce=\"7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v\", \
             nc=00000001, cnonce=\"f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ\", qop=auth, \
             response=\"{response}\", opaque=\"FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS\""
        )
    }

    #[test]
    fn the_rfc_7616_examples_verify() {
        let md5 =
            DigestResponse::parse(&rfc_example("MD5", "8ca523f5e9506fed4657c9700eebdbec")).unwrap();
        assert!(md5.verifies("Circle of Life", "GET"));
        assert!(!md5.verifies("Circle of life", "GET"));
        assert!(!md5.verifies("Circle of Life", "PLAY"));
        let sha = DigestResponse::parse(&rfc_example(
            "SHA-256",
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
        ))
        .unwrap();
        assert_eq!(sha.algorithm, Algorithm::Sha256);
        assert!(sha.verifies("Circle of Life", "GET"));
        assert_eq!(format!("{md5:?}"), "Digest(\"Mufasa\", <response>)");
    }

    #[test]
    fn an_rfc_2069_response_without_qop_verifies() {
        // H(H(user:realm:pass):nonce:H(method:uri)), as live555 and GStreamer send it.
        let a = Algorithm::Md5;
        let ha1 = a.hex("u:isochron:p");
        let ha2 = a.hex("DESCRIBE:rtsp://h/demo");
        let resp = a.hex(&format!("{ha1}:n1:{ha2}"));
        let d = DigestResponse::parse(&format!(
            "username=\"u\", realm=\"isochron\", nonce=\"n1\", uri=\"rtsp://h/demo\", response=\"{resp}\""
        ))
        .unwrap();
        assert!(d.qop.is_none());
        assert!(d.verifies("p", "DESCRIBE"));
    }

    #[test]
    fn malformed_parameters_are_refused() {
        for bad in [
            "",
            "username=\"u\"",
            "username=\"u, realm=x",
            "username=\"u\" realm=\"r\", nonce=n, uri=u, response=r",
            "username=u, realm=r, nonce=n, uri=u, response=r, algorithm=SHA-512",
            "username=u, realm=r, nonce=n, uri=u, response=r, qop=auth",
        ] {
            assert_eq!(DigestResponse::parse(bad), None, "{bad}");
        }
        let ok = DigestResponse::parse("username=u,realm=r,nonce=n,uri=u,response=AB").unwrap();
        assert_eq!(ok.response, "ab");
    }

    #[test]
    fn nonces_are_bound_to_their_server_and_expire() {
        let n = Nonces::new([1; 32], 300);
        let nonce = n.issue(1_000_000);
        assert_eq!(n.check(&nonce, 1_000_100), NonceState::Fresh);
        assert_eq!(n.check(&nonce, 1_000_301), NonceState::Stale);
        assert_eq!(Nonces::new([2; 32], 300).check(&nonce, 1_000_100), NonceState::Invalid);
        assert_eq!(n.check("f4240.00", 1_000_100), NonceState::Invalid);
        assert_eq!(n.check("nonsense", 1_000_100), NonceState::Invalid);
        let [md5, sha] = n.challenges("isochron", 5, true);
        assert!(md5.starts_with("Digest realm=\"isochron\", nonce=\"5."), "{md5}");
        assert!(md5.contains("algorithm=MD5") && md5.ends_with("stale=true"), "{md5}");
        assert!(sha.contains("algorithm=SHA-256"), "{sha}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_parameters_never_panic(s in "\\PC{0,80}") {
            let _ = DigestResponse::parse(&s);
            let _ = Nonces::new([0; 32], 1).check(&s, 7);
        }
    }
}
