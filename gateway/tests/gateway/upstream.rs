//! Upstreams for the proxy tests: real HTTP/1.1 servers with keep-alive (axum on hyper), on
//! loopback, plain or TLS (the fixture CA in tests/tls).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::serve::ListenerExt;
use axum::Router;

/// A running upstream: its port and how many TCP connections it accepted.
pub struct Upstream {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Upstream {
    /// Its plain HTTP URL, as `--upstream` takes it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Serves `app` on a free loopback port until the test's runtime ends.
    pub async fn plain(app: Router) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let listener = listener.tap_io(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream { port, accepted }
    }

    /// Serves `app` over TLS with the certificate of 127.0.0.1 signed by tests/tls/ca.pem.
    pub async fn tls(app: Router) -> Upstream {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
        let certs: Vec<CertificateDer> =
            CertificateDer::pem_file_iter(format!("{dir}/upstream.pem"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(format!("{dir}/upstream.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let acceptor = acceptor.clone();
                let app = app.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return; // the gateway refused our certificate
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Upstream { port, accepted }
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// The request as the upstream saw it: `{"uri": ..., "headers": {name: value, ...}}`
/// (repeated headers comma-joined).
pub fn seen(uri: &http::Uri, headers: &http::HeaderMap) -> serde_json::Value {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        map.entry(k.as_str().to_string())
            .and_modify(|prev| {
                prev.push_str(", ");
                prev.push_str(&v);
            })
            .or_insert(v);
    }
    serde_json::json!({ "uri": uri.to_string(), "headers": map })
}
