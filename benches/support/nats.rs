//! A `nats-server -js` for the NATS benchmark, after `tests/support/nats.rs`: Debian's binary
//! (`/usr/sbin/nats-server`, or `NATS_SERVER`, or on `PATH`) on a free loopback port with its own
//! store, killed on drop. Without the binary the benchmark prints a skip line.

use std::fs::File;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_NATS_SERVER: &str = "/usr/sbin/nats-server";

/// A JetStream-enabled `nats-server` child with its store in a temporary directory.
pub struct NatsServer {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl NatsServer {
    /// A running server, or `None` when the binary is missing.
    pub fn start() -> Option<Self> {
        let binary = find_binary()?;
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let log = File::create(dir.path().join("server.log")).expect("log file");
        let child = Command::new(&binary)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path().join("js"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", binary.display()));
        let mut server = Self { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
                return Some(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("nats-server exited with {status}: {}", server.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not start: {}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// User + system CPU-seconds of the server process so far.
    pub fn cpu_seconds(&self) -> f64 {
        crate::support::process_cpu_seconds(self.child.id())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn find_binary() -> Option<PathBuf> {
    let candidate = std::env::var_os("NATS_SERVER")
        .map_or_else(|| PathBuf::from(DEFAULT_NATS_SERVER), PathBuf::from);
    if candidate.is_file() {
        return Some(candidate);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|path| path.is_file())
    })
}
