//! herald-sim: an in-memory Kubernetes API server for tests, demos and development; start it with
//! [`Simulator::start`].
//!
#![doc = include_str!("../README.md")]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod admin;
mod auth;
mod builtin;
mod crd;
mod discovery;
mod faults;
mod fieldmanager;
mod http;
mod list;
mod load;
mod meta;
mod ops;
mod patch;
mod persist;
mod protobuf;
mod resource;
mod schema;
pub mod selector;
mod status;
mod store;
mod strategic;
mod tls;
mod watch;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::{ClientSelector, DenyRule, FailRule, LatencyRule};
pub use load::LoadError;
pub use resource::GroupResource;
pub use status::ApiError;
pub use tls::{TlsError, install_crypto_provider};

/// Settings of a simulator instance.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address to listen on; port 0 picks a free one. Default `127.0.0.1:0`.
    pub listen: SocketAddr,
    /// How many changes the history keeps (etcd's compaction window). Watches and continue tokens
    /// older than the window get 410. Default 100,000.
    pub history_limit: usize,
    /// How often an idle watch with `allowWatchBookmarks` gets a BOOKMARK. Default 60 s, as the real cacher.
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` ends after a random time in [this, 2 × this]. Default 1800 s.
    pub min_request_timeout: Duration,
    /// A watch whose reader accepts nothing for this long (its buffer stays full) is dropped, as the
    /// real server drops unresponsive watchers. Default 5 s.
    pub slow_reader_timeout: Duration,
    /// Serve HTTPS with a self-signed certificate generated at start (the kubeconfig carries it).
    pub tls: bool,
    /// Keep the state in this directory: it survives restarts and the resourceVersion never goes
    /// backwards. In memory only when `None` (the default).
    pub data_dir: Option<PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            slow_reader_timeout: Duration::from_secs(5),
            tls: false,
            data_dir: None,
        }
    }
}

impl SimConfig {
    /// Sets the listen address.
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Sets the number of changes kept in the history window.
    #[must_use]
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Sets the bookmark interval.
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Sets the minimum default watch timeout.
    #[must_use]
    pub fn min_request_timeout(mut self, d: Duration) -> Self {
        self.min_request_timeout = d;
        self
    }

    /// Persists the state in `dir`.
    #[must_use]
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Serves HTTPS with a generated self-signed certificate.
    #[must_use]
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Sets how long a watch may go without its reader accepting data before it is dropped.
    #[must_use]
    pub fn slow_reader_timeout(mut self, d: Duration) -> Self {
        self.slow_reader_timeout = d;
        self
    }

    fn default_watch_timeout(&self) -> Duration {
        let min = self.min_request_timeout.as_millis().max(1);
        let ms = rand::rng().random_range(min..=2 * min);
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

/// Errors starting or using the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    BindFailed {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig to {path}")]
    KubeconfigWriteFailed {
        /// Where it was to be written.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The simulator's own URL did not parse (a bug).
    #[error("the simulator URL is not a valid URI")]
    InvalidUrl(#[source] axum::http::uri::InvalidUri),
    /// The data directory could not be opened or read.
    #[error("cannot open the data directory {path}")]
    DataDirFailed {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// TLS could not be set up.
    #[error("cannot set up TLS")]
    TlsFailed(#[source] TlsError),
    /// A kube client for the simulator could not be built.
    #[error("cannot build a kube client for the simulator")]
    ClientFailed(#[source] kube::Error),
}

/// A collection, for the in-process API ([`Simulator::create`] and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRef {
    /// API group (`""` for the core group).
    pub group: String,
    /// Version, as in the URL.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Namespace, for namespaced resources.
    pub namespace: Option<String>,
}

impl ResourceRef {
    /// A namespaced collection.
    pub fn namespaced(group: &str, version: &str, plural: &str, namespace: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: Some(namespace.into()),
        }
    }

    /// A cluster-scoped collection.
    pub fn cluster(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: None,
        }
    }

    fn target(&self) -> ops::Target {
        ops::Target {
            gr: GroupResource::new(self.group.clone(), self.plural.clone()),
            version: self.version.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

/// What [`Simulator::churn`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Churned {
    /// Changes written.
    pub changes: u64,
    /// Wall time it took.
    pub elapsed: Duration,
}

/// How long a shutdown or restart waits for open connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How many writes one lock acquisition takes in bulk operations: long enough to amortise the lock,
/// short enough that watchers and requests interleave.
const BULK_CHUNK: usize = 1000;

/// A running simulator. Dropping it stops the server; [`Simulator::shutdown`] also waits for it.
#[derive(Debug)]
pub struct Simulator {
    shared: Arc<http::Shared>,
    kubeconfig: PathBuf,
    _kubeconfig_dir: Option<tempfile::TempDir>,
    server: Option<JoinHandle<()>>,
}

impl Simulator {
    /// Starts a simulator and writes a kubeconfig for it into a temporary directory.
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
        let dir = tempfile::tempdir().map_err(|source| SimError::KubeconfigWriteFailed {
            path: std::env::temp_dir(),
            source,
        })?;
        let path = dir.path().join("kubeconfig");
        let mut sim = Self::start_with_kubeconfig(config, &path).await?;
        sim._kubeconfig_dir = Some(dir);
        Ok(sim)
    }

    /// Starts a simulator and writes its kubeconfig to `kubeconfig`.
    pub async fn start_with_kubeconfig(
        config: SimConfig,
        kubeconfig: &Path,
    ) -> Result<Self, SimError> {
        let listener = bind(config.listen).map_err(|source| SimError::BindFailed {
            addr: config.listen,
            source,
        })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimError::BindFailed {
                addr: config.listen,
                source,
            })?;
        let tls = if config.tls {
            Some(tls::Tls::generate().map_err(SimError::TlsFailed)?)
        } else {
            None
        };
        let store = match &config.data_dir {
            Some(dir) => store::Store::open(config.history_limit, dir).map_err(|source| {
                SimError::DataDirFailed {
                    path: dir.clone(),
                    source,
                }
            })?,
            None => store::Store::new(config.history_limit),
        };
        let store = Arc::new(store);
        let shutdown = CancellationToken::new();
        let watches = std::sync::Mutex::new(shutdown.child_token());
        let shared = Arc::new(http::Shared {
            store,
            config,
            shutdown,
            addr,
            watches,
            faults: faults::Faults::default(),
            open_watches: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            restart: std::sync::Mutex::new(None),
            restart_requested: tokio::sync::Notify::new(),
            tls,
            tokens: auth::Tokens::default(),
        });
        seed(&shared.store);
        write_kubeconfig(kubeconfig, addr, shared.tls.as_ref()).map_err(|source| {
            SimError::KubeconfigWriteFailed {
                path: kubeconfig.to_path_buf(),
                source,
            }
        })?;
        let server = tokio::spawn(serve(shared.clone(), listener));
        tracing::debug!(message = "Simulator listening.", %addr);
        Ok(Self {
            shared,
            kubeconfig: kubeconfig.to_path_buf(),
            _kubeconfig_dir: None,
            server: Some(server),
        })
    }

    /// Whether its state came from its data directory, written by an earlier start (`false`
    /// without a data directory, or when the directory was new): start-up objects (`--load`) are
    /// for a new cluster, and applying them again would revert what changed since.
    pub fn restored(&self) -> bool {
        self.shared.store.restored()
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.shared.addr)
    }

    /// Path of a kubeconfig whose current context points at the simulator.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube client for the simulator (default namespace `default`).
    pub fn client(&self) -> Result<kube::Client, SimError> {
        let uri = self.url().parse().map_err(SimError::InvalidUrl)?;
        let mut config = kube::Config::new(uri);
        if let Some(tls) = &self.shared.tls {
            config.root_cert = Some(vec![tls.cert_der.clone()]);
        }
        kube::Client::try_from(config).map_err(SimError::ClientFailed)
    }

    /// The PEM of the self-signed certificate when serving HTTPS.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.shared.tls.as_ref().map(|t| t.cert_pem.as_str())
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.read().rv
    }

    /// Compacts the history now: every watch or list from an older revision gets 410 Expired.
    pub fn compact(&self) {
        self.shared.store.write(store::State::compact);
    }

    /// Fails the next matching requests (see [`FailRule`]).
    pub fn fail(&self, rule: FailRule) {
        self.shared.faults.add_fail(rule);
    }

    /// Denies matching requests with 403 and answers SelfSubjectAccessReviews for them with
    /// `allowed: false`, as a missing RBAC rule would.
    pub fn deny(&self, rule: DenyRule) {
        self.shared.faults.add_deny(rule);
    }

    /// Delays every matching request.
    pub fn add_latency(&self, rule: LatencyRule) {
        self.shared.faults.add_latency(rule);
    }

    /// Stalls every watch (open and future): connections stay open and nothing is sent until
    /// [`Simulator::resume_watches`] (or [`Simulator::clear_faults`]).
    pub fn stall_watches(&self) {
        self.shared.faults.stall_watches(true);
    }

    /// Ends a stall: held events flow again.
    pub fn resume_watches(&self) {
        self.shared.faults.stall_watches(false);
    }

    /// Garbles every new watch until [`Simulator::mend_watches`] (or [`Simulator::clear_faults`]):
    /// it answers 200 and one line that is not JSON, then ends, as a broken proxy or server might.
    /// Lists and everything else are served as usual.
    pub fn garble_watches(&self) {
        self.shared.faults.garble_watches(true);
    }

    /// Ends garbling: new watches stream events again.
    pub fn mend_watches(&self) {
        self.shared.faults.garble_watches(false);
    }

    /// Removes every fail and latency rule and ends any stall or garbling.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// Watches currently streaming.
    pub fn open_watches(&self) -> usize {
        self.shared
            .open_watches
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Restarts the server: every connection closes, the port refuses connections for `down_for`, then
    /// serves again on the same address. With `keep_state` false, every object is gone (the namespaces
    /// `default` and `kube-system` come back); `reset_revision` also restarts the revision counter, as an
    /// etcd restored from nothing would (the one way to make resourceVersions go backwards).
    pub async fn restart(&self, keep_state: bool, reset_revision: bool, down_for: Duration) {
        let (done, finished) = tokio::sync::oneshot::channel();
        self.shared.request_restart(Restart {
            keep_state,
            reset_revision,
            down_for,
            done: Some(done),
        });
        let _ = finished.await;
    }

    /// Applies a multi-document YAML of CRDs, namespaces and objects (CRDs first; each document a
    /// server-side apply by `herald-sim-load`); returns how many documents were applied.
    pub fn load_yaml(&self, text: &str) -> Result<usize, LoadError> {
        load::load_str(&self.shared.store, text)
    }

    /// [`Simulator::load_yaml`] from a file.
    pub fn load_file(&self, path: &Path) -> Result<usize, LoadError> {
        load::load_file(&self.shared.store, path)
    }

    /// Creates an object in-process (no HTTP round trip), with every rule a POST follows.
    pub fn create(&self, resource: &ResourceRef, object: Value) -> Result<Value, ApiError> {
        let target = resource.target();
        self.shared
            .store
            .write(|s| s.create(&target, object, &ops::WriteOpts::default()))
            .map(|w| w.object)
    }

    /// Test hook: creates an object in-process like [`Simulator::create`], except that its
    /// `metadata.name` is not held to Kubernetes' name rules (DNS subdomain, or DNS label for a
    /// namespace), so it may hold control characters, spaces or anything else. A real API server
    /// refuses such names; they still reach clients through aggregated APIs, proxies or old stored
    /// data, and clients' fault tests need them. Nothing over HTTP can do this.
    pub fn create_with_any_name(
        &self,
        resource: &ResourceRef,
        object: Value,
    ) -> Result<Value, ApiError> {
        let target = resource.target();
        let opts = ops::WriteOpts {
            any_name: true,
            ..ops::WriteOpts::default()
        };
        self.shared
            .store
            .write(|s| s.create(&target, object, &opts))
            .map(|w| w.object)
    }

    /// Creates many objects in-process, a chunk per lock acquisition; returns how many were created.
    /// Stops at the first error.
    pub fn create_many(
        &self,
        resource: &ResourceRef,
        objects: impl IntoIterator<Item = Value>,
    ) -> Result<usize, ApiError> {
        let target = resource.target();
        let opts = ops::WriteOpts::default();
        let mut objects = objects.into_iter().peekable();
        let mut created = 0;
        while objects.peek().is_some() {
            let chunk: Vec<Value> = objects.by_ref().take(BULK_CHUNK).collect();
            created += self.shared.store.write(|s| -> Result<usize, ApiError> {
                let mut n = 0;
                for obj in chunk {
                    s.create(&target, obj, &opts)?;
                    n += 1;
                }
                Ok(n)
            })?;
        }
        Ok(created)
    }

    /// Merge-patches an object in-process.
    pub fn merge_patch(
        &self,
        resource: &ResourceRef,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        self.merge_patch_part(resource, name, ops::Part::Main, patch)
    }

    /// Merge-patches an object's status in-process (the status subresource).
    pub fn merge_patch_status(
        &self,
        resource: &ResourceRef,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        self.merge_patch_part(resource, name, ops::Part::Status, patch)
    }

    fn merge_patch_part(
        &self,
        resource: &ResourceRef,
        name: &str,
        part: ops::Part,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let target = resource.target();
        let opts = ops::WriteOpts::default();
        self.shared
            .store
            .write(|s| s.patch(&target, name, part, ops::PatchKind::Merge, patch, &opts))
            .map(|w| w.object)
    }

    /// Deletes an object in-process (finalizers are honoured as over HTTP).
    pub fn delete(&self, resource: &ResourceRef, name: &str) -> Result<(), ApiError> {
        let target = resource.target();
        self.shared
            .store
            .write(|s| s.delete(&target, name, &ops::DeleteOptions::default()))
            .map(|_| ())
    }

    /// Writes `total` spec changes round-robin over `names` (each sets `spec.churn` to a counter), at
    /// `per_second` (0: as fast as possible), in-process: a load generator that costs no HTTP. The first
    /// change of each object goes through the full patch path; later ones take a short cut that yields
    /// the same stored object (same generation rules and field ownership) at a fraction of the cost.
    pub async fn churn(
        &self,
        resource: &ResourceRef,
        names: &[String],
        per_second: u64,
        total: u64,
    ) -> Result<Churned, ApiError> {
        let target = resource.target();
        let opts = ops::WriteOpts {
            field_manager: Some("herald-sim-churn".into()),
            ..ops::WriteOpts::default()
        };
        let started = tokio::time::Instant::now();
        let mut written: u64 = 0;
        if names.is_empty() {
            return Ok(Churned {
                changes: 0,
                elapsed: started.elapsed(),
            });
        }
        while written < total {
            let due = if per_second == 0 {
                total.min(written + BULK_CHUNK as u64)
            } else {
                let secs = started.elapsed().as_secs_f64();
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let due = ((secs * per_second as f64) as u64 + 1).min(total);
                due.min(written + BULK_CHUNK as u64)
            };
            if due > written {
                let from = written;
                self.shared.store.write(|s| -> Result<(), ApiError> {
                    for i in from..due {
                        let idx = usize::try_from(i).unwrap_or(0) % names.len();
                        s.churn_one(&target, &names[idx], i, &opts)?;
                    }
                    Ok(())
                })?;
                written = due;
            }
            if per_second == 0 {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(Churned {
            changes: written,
            elapsed: started.elapsed(),
        })
    }

    /// Ends every open watch now; clients see a normal end of stream and re-watch from their last revision.
    pub fn drop_watches(&self) {
        self.shared.drop_watches();
    }

    /// Stops the server, ends every open watch and waits for the server task.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.shared.store.write(store::State::checkpoint);
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

/// A restart request for the serving loop.
#[derive(Debug)]
pub(crate) struct Restart {
    pub(crate) keep_state: bool,
    pub(crate) reset_revision: bool,
    pub(crate) down_for: Duration,
    pub(crate) done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Binds with `SO_REUSEADDR`, so a restart can take its own port back at once.
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The plain-HTTP listener: every accepted connection without Nagle's algorithm ([`tls::no_delay`]).
fn plain(
    l: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    l.tap_io(tls::no_delay)
}

/// Serves until shutdown, going down and up again on restart requests.
async fn serve(shared: Arc<http::Shared>, listener: tokio::net::TcpListener) {
    let mut listener = Some(listener);
    while let Some(l) = listener.take() {
        let app = http::router(shared.clone());
        let stop = shared.clone();
        let stopping = CancellationToken::new();
        let signal = stopping.clone();
        let graceful = async move {
            tokio::select! {
                () = stop.shutdown.cancelled() => {}
                () = stop.restart_requested.notified() => {
                    // Watches end first: graceful shutdown waits for every open connection.
                    stop.drop_watches();
                }
            }
            signal.cancel();
        };
        let result = match &shared.tls {
            Some(tls) => match tls::TlsListener::new(l, tls) {
                Ok(tl) => {
                    serve_until(
                        axum::serve(tl, app).with_graceful_shutdown(graceful),
                        &stopping,
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            None => {
                serve_until(
                    axum::serve(plain(l), app).with_graceful_shutdown(graceful),
                    &stopping,
                )
                .await
            }
        };
        if let Err(error) = result {
            tracing::error!(message = "Simulator server failed.", %error);
        }
        if shared.shutdown.is_cancelled() {
            break;
        }
        let Some(restart) = shared.take_restart() else {
            break;
        };
        if !restart.keep_state {
            shared.store.write(|s| s.reset(restart.reset_revision));
            seed(&shared.store);
            // As after an etcd restore: everything before now is compacted, so every client relists.
            shared.store.write(store::State::compact);
        }
        tokio::time::sleep(restart.down_for).await;
        // The port was ours a moment ago; retry briefly in case the OS is slow to release it.
        for attempt in 0..50 {
            match bind(shared.addr) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(error) if attempt == 49 => {
                    tracing::error!(message = "Simulator cannot rebind after restart.", addr = %shared.addr, %error);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        tracing::info!(
            message = "Simulator restarted.",
            keep_state = restart.keep_state
        );
        if let Some(done) = restart.done {
            let _ = done.send(());
        }
    }
}

/// Runs a server until it ends or, once `stopping` fires, at most [`SHUTDOWN_GRACE`] more: a client that
/// stops reading can hold its connection open forever.
async fn serve_until<F>(server: F, stopping: &CancellationToken) -> std::io::Result<()>
where
    F: IntoFuture<Output = std::io::Result<()>>,
{
    let server = server.into_future();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r,
        () = stopping.cancelled() => match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(message = "Connections still open after the shutdown grace period; leaving them.");
                Ok(())
            }
        },
    }
}

/// The namespaces every cluster starts with.
fn seed(store: &store::Store) {
    let target = ops::Target {
        gr: GroupResource::new("", "namespaces"),
        version: "v1".into(),
        namespace: None,
    };
    for ns in ["default", "kube-system"] {
        if store
            .read()
            .get(&target.gr, &resource::ObjectKey::new("", ns))
            .is_some()
        {
            continue;
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        if let Err(error) = store.write(|s| s.create(&target, obj, &ops::WriteOpts::default())) {
            tracing::error!(message = "Cannot create a seed namespace.", namespace = ns, %error);
        }
    }
}

/// Writes a kubeconfig for `addr`. JSON is valid YAML, so every client reads it.
fn write_kubeconfig(path: &Path, addr: SocketAddr, tls: Option<&tls::Tls>) -> std::io::Result<()> {
    use base64::Engine as _;
    let cluster = match tls {
        Some(t) => json!({
            "server": format!("https://{addr}"),
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(&t.cert_pem),
        }),
        None => json!({"server": format!("http://{addr}")}),
    };
    let cfg = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "herald-sim", "cluster": cluster}],
        // kubectl prompts for a password when an HTTPS user has no credentials at all: a token keeps
        // it quiet. This one is not a TokenRequest token: it keeps the all-powerful identity
        // (auth::ADMIN_TOKEN).
        "users": [{"name": "herald-sim", "user": {"token": "herald-sim"}}],
        "contexts": [{"name": "herald-sim", "context": {"cluster": "herald-sim", "user": "herald-sim", "namespace": "default"}}],
        "current-context": "herald-sim",
        "preferences": {},
    });
    let text = serde_json::to_string_pretty(&cfg).map_err(std::io::Error::other)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;

    #[tokio::test]
    async fn plain_listener_sets_nodelay_on_accepted_connections() {
        let l = bind(([127, 0, 0, 1], 0).into()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut listener = plain(l);
        let (_client, (server, _)) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        assert!(server.nodelay().unwrap());
    }
}
