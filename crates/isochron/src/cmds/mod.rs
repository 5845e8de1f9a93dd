//! The subcommands.

pub(crate) mod auth;
pub(crate) mod bench;
pub(crate) mod bench_chaos;
pub(crate) mod bench_cluster;
pub(crate) mod bench_disk;
pub(crate) mod cat;
pub(crate) mod cert;
pub(crate) mod disk;
pub(crate) mod fsck;
pub(crate) mod ingest;
pub(crate) mod ls;
pub(crate) mod node;
pub(crate) mod plan;
pub(crate) mod play;
pub(crate) mod profile_disk;
pub(crate) mod rm;
pub(crate) mod serve;
pub(crate) mod shape;
pub(crate) mod simulate;

use std::path::PathBuf;

/// The default store directory, shared by every subcommand.
pub(crate) const DEFAULT_DATA: &str = "isochron-data";

/// `--data DIR`, shared by the store subcommands.
#[derive(Debug, clap::Args)]
pub(crate) struct DataArg {
    /// Store directory (catalog and default disk).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
}

/// An agent for a server's HTTP API (`--server URL`). Credentials in the URL
/// (`http://user:pass@host:8080`) go as HTTP Basic, which the server takes from loopback or
/// over TLS; `ISOCHRON_TOKEN`, when set, goes as a bearer token (`[[auth.users]] token`), which
/// it takes from anywhere. An `https://` URL is checked against the web's roots, or against the
/// PEM certificates of `ISOCHRON_CA_FILE` when set (a self-signed server's own certificate).
///
/// # Errors
///
/// `ISOCHRON_CA_FILE` cannot be read or holds no certificate.
pub(crate) fn api_agent(
    config: ureq::config::ConfigBuilder<ureq::typestate::AgentScope>,
) -> anyhow::Result<ureq::Agent> {
    let config = match ca_roots()? {
        Some(roots) => config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build()),
        None => config,
    };
    Ok(match std::env::var("ISOCHRON_TOKEN") {
        Ok(token) if !token.is_empty() => {
            let value = format!("Bearer {token}");
            config
                .middleware(
                    move |mut req: ureq::http::Request<ureq::SendBody<'_>>,
                          next: ureq::middleware::MiddlewareNext<'_>| {
                        if let Ok(v) = ureq::http::HeaderValue::from_str(&value) {
                            req.headers_mut().insert(ureq::http::header::AUTHORIZATION, v);
                        }
                        next.handle(req)
                    },
                )
                .build()
                .into()
        }
        _ => config.build().into(),
    })
}

/// The certificates of `ISOCHRON_CA_FILE`, if set.
fn ca_roots() -> anyhow::Result<Option<ureq::tls::RootCerts>> {
    let Some(path) = std::env::var_os("ISOCHRON_CA_FILE").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    let pem = std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("ISOCHRON_CA_FILE {}: {e}", path.display()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    anyhow::ensure!(
        !certs.is_empty(),
        "ISOCHRON_CA_FILE {}: no PEM certificate in it",
        path.display()
    );
    Ok(Some(ureq::tls::RootCerts::new_with_certs(&certs)))
}

/// `url` without the `user:password@` of its authority, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// A disk spec whose path is made absolute against the working directory: paths on the command
/// line mean what the shell means (the store would resolve a relative one against its root).
pub(crate) fn absolute_spec(
    spec: &isochron_store::catalog::DiskSpec,
) -> anyhow::Result<isochron_store::catalog::DiskSpec> {
    let path = std::path::absolute(&spec.path)
        .map_err(|e| anyhow::anyhow!("disk path {}: {e}", spec.path.display()))?;
    Ok(isochron_store::catalog::DiskSpec { path, model: spec.model })
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(super::redacted("http://ops:pw@host:8080/api"), "http://host:8080/api");
        assert_eq!(super::redacted("http://host:8080/a@b"), "http://host:8080/a@b");
        assert_eq!(super::redacted("host:8080"), "host:8080");
    }
}
