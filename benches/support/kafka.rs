//! A Kafka-protocol broker for the Kafka benchmark, copied from `tests/support/kafka.rs`: `tansu`
//! on a free loopback port (`cargo install tansu --locked --features dynostore`), or the broker
//! named by `HERALD_TEST_KAFKA` (`host:port`). Without either the benchmark prints a skip line.

use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

/// A Kafka-protocol broker for one run; a tansu child process is killed on drop.
pub struct Broker {
    pub bootstrap: String,
    child: Option<Child>,
    log: Option<PathBuf>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(log) = &self.log
            && !std::thread::panicking()
        {
            let _ = std::fs::remove_file(log);
        }
    }
}

impl Broker {
    /// `HERALD_TEST_KAFKA` if set, else a fresh tansu; `None` when tansu is not installed.
    pub fn start() -> Option<Self> {
        if let Ok(bootstrap) = std::env::var("HERALD_TEST_KAFKA") {
            return Some(Self {
                bootstrap,
                child: None,
                log: None,
            });
        }
        let tansu = find_tansu()?;
        let port = free_port();
        let listener = format!("tcp://127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("herald-bench-tansu-{port}.log"));
        let log_file = File::create(&log).expect("creating the tansu log file");
        let child = Command::new(&tansu)
            .args([
                "broker",
                "--storage-engine",
                "memory://tansu/",
                "--listener-url",
                &listener,
                "--advertised-listener-url",
                &listener,
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("cloning the log file handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", tansu.display()));
        let mut broker = Self {
            bootstrap: format!("127.0.0.1:{port}"),
            child: Some(child),
            log: Some(log),
        };
        broker.wait_until_listening();
        Some(broker)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(&self.bootstrap).is_ok() {
                return;
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "tansu exited with {status} before listening; {}",
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30s; {}",
                self.bootstrap,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// User + system CPU-seconds of the tansu child so far; `None` for an external broker.
    pub fn cpu_seconds(&self) -> Option<f64> {
        self.child
            .as_ref()
            .map(|c| crate::support::process_cpu_seconds(c.id()))
    }

    /// The end of tansu's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return "no broker log (HERALD_TEST_KAFKA)".to_owned();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        format!("tansu log {}:\n{}", log.display(), &text[start..])
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn find_tansu() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("tansu"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    on_path
        .into_iter()
        .chain(cargo_home.map(|home| home.join("bin").join("tansu")))
        .find(|path| path.is_file())
}

/// Creates `topic` with the admin API (tansu does not create topics on first use), retrying
/// while the broker is still starting up.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("building the admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let result = admin.create_topics([&new_topic], &options).await;
        match result.as_deref() {
            Ok([Ok(_)] | [Err((_, RDKafkaErrorCode::TopicAlreadyExists))]) => return,
            other if Instant::now() > deadline => panic!("creating topic {topic}: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
