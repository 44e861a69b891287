//! A real `nats-server` for tests (Debian's package, installed by `.ci/run`), started on a free
//! loopback port with its own store and stopped on drop. Without the binary a test fails when `CI`
//! is set and is skipped with a line on stderr otherwise.

use std::fs::File;
use std::io::Write as _;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

const DEFAULT_NATS_SERVER: &str = "/usr/sbin/nats-server";

/// A `nats-server -js` child on a free loopback port, with its own store directory. It can be
/// stopped and started again on the same port and store.
pub struct NatsServer {
    binary: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    jetstream: bool,
    extra: Vec<String>,
    child: Option<Child>,
}

impl NatsServer {
    /// A running server, or `None` (after a skip line on stderr) when the binary is missing and
    /// `CI` is not set.
    pub fn start(extra: &[&str]) -> Option<Self> {
        Self::launch(extra, None, true)
    }

    /// Like [`NatsServer::start`], with `config` written to a file passed as `-c`.
    pub fn start_with_config(extra: &[&str], config: &str) -> Option<Self> {
        Self::launch(extra, Some(config), true)
    }

    /// A server without JetStream.
    pub fn start_without_jetstream() -> Option<Self> {
        Self::launch(&[], None, false)
    }

    fn launch(extra: &[&str], config: Option<&str>, jetstream: bool) -> Option<Self> {
        let binary = find_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let mut extra: Vec<String> = extra.iter().map(ToString::to_string).collect();
        if let Some(config) = config {
            let path = dir.path().join("server.conf");
            std::fs::write(&path, config).unwrap();
            extra.extend(["-c".to_owned(), path.display().to_string()]);
        }
        let mut server = Self {
            binary,
            dir,
            port: free_port(),
            jetstream,
            extra,
            child: None,
        };
        server.run();
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("js")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the process and waits until it accepts connections (JetStream, and the streams in
    /// the store, are ready before the server listens).
    fn run(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let mut command = Command::new(&self.binary);
        command.args(["-a", "127.0.0.1", "-p", &self.port.to_string()]);
        if self.jetstream {
            command.arg("-js").arg("-sd").arg(self.store());
        }
        let child = command
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("nats-server exited with {status}: {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not start: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Asks the server to shut down (SIGTERM: JetStream flushes its store) without waiting.
    pub fn signal_stop(&self) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    /// Stops the server and waits for the process to end (SIGKILL after 10 s).
    pub fn stop(&mut self) {
        self.signal_stop();
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    child.kill().ok();
                    child.wait().ok();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the server again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

fn find_binary() -> Option<PathBuf> {
    let candidate = std::env::var_os("NATS_SERVER")
        .map_or_else(|| PathBuf::from(DEFAULT_NATS_SERVER), PathBuf::from);
    if candidate.is_file() {
        return Some(candidate);
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|path| path.is_file())
    }) {
        return Some(found);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "nats-server not found at {} or on PATH, and CI is set: install it (apt-get install nats-server)",
        candidate.display()
    );
    // Written to the stderr handle, not with eprintln!, which the test harness captures and
    // hides for a passing test: a skip must be visible.
    let _ = writeln!(
        std::io::stderr(),
        "skipping: nats-server not found at {} or on PATH (apt-get install nats-server)",
        candidate.display()
    );
    None
}
