//! `--tls`: a self-signed certificate for the loopback names, generated at start, and the listener that
//! terminates TLS in front of the same router.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The simulator's certificate: PEM for kubeconfigs, DER for kube-rs, and the acceptor.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) cert_pem: String,
    pub(crate) cert_der: Vec<u8>,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// Errors setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate could not be generated.
    #[error("cannot generate the self-signed certificate")]
    CertificateFailed(#[source] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot configure TLS")]
    ConfigFailed(#[source] rustls::Error),
}

/// Installs ring as the process-wide rustls provider, unless one is installed already.
///
/// The simulator never calls it: its TLS server names ring explicitly. It is for programs and tests
/// that use the simulator standalone with a client that takes the process default and refuses to
/// pick one itself (reqwest): call it once at start-up, before the first client is built.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is the state we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Tls {
    /// A fresh certificate valid for `localhost`, `127.0.0.1` and `::1`.
    pub(crate) fn generate() -> Result<Self, TlsError> {
        let names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        let certified =
            rcgen::generate_simple_self_signed(names).map_err(TlsError::CertificateFailed)?;
        let cert_der = certified.cert.der().to_vec();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        // An explicit provider, so serving TLS does not depend on what the process installed.
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::ConfigFailed)?
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert_der.clone())], key)
        .map_err(TlsError::ConfigFailed)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            cert_pem: certified.cert.pem(),
            cert_der,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// Turns Nagle's algorithm off on an accepted connection, as kube-apiserver (Go's net package) does on
/// every TCP connection: a watch event is one small write, and with Nagle on it waits for the client's
/// delayed ACK of the previous one (tens of milliseconds) before it leaves.
pub(crate) fn no_delay(tcp: &mut TcpStream) {
    if let Err(error) = tcp.set_nodelay(true) {
        // The connection still works, only slower; not worth refusing it.
        tracing::debug!(message = "Cannot set TCP_NODELAY.", %error);
    }
}

/// Accepts TCP connections and hands over those whose TLS handshake succeeded. Handshakes run in their
/// own tasks, so one slow or broken client never holds up the others.
pub(crate) struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, tls: &Tls) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tls.acceptor.clone();
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok((mut tcp, peer)) = listener.accept().await else {
                    continue;
                };
                no_delay(&mut tcp);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(stream) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Err(error) => {
                            tracing::debug!(message = "TLS handshake failed.", %peer, %error)
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            ready,
            accept_loop,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // The accept loop owns the socket: stopping it frees the port for a restart.
        self.accept_loop.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when this listener is dropped, so this never resolves then.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;

    #[tokio::test]
    async fn tls_listener_sets_nodelay_on_accepted_connections() {
        let tls = Tls::generate().unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut listener = TlsListener::new(tcp, &tls).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(tls.cert_der.clone()))
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let client = async {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            connector.connect(name, tcp).await.unwrap()
        };
        let (_client, (server, _)) = tokio::join!(client, listener.accept());
        assert!(server.get_ref().0.nodelay().unwrap());
    }
}
