//! herald beside its peers on one simulator workload: the watch loop a Python user writes with the
//! official client (benches/peer/watch_loop.py) and a raw watch reader (this binary, `raw-reader`
//! mode), each its own process, as is the simulator (this binary, `sim-child` mode, loaded through
//! its in-process bulk API). Interleaved rounds; min/median/max and the ratio to the peers of the
//! same round. Printed, never asserted.
//!
//! Phases: catch-up of a backlog of changes into the file sink with the durable journal (each
//! contender resumes from the same revision: herald from its journal, the loop from its checkpoint
//! file, the reader from `resourceVersion`), initial sync of a preloaded set of objects, latency at a
//! steady rate of creates (each contender beside a raw reader, per event above it), the catch-up with
//! every contender on one CPU (`taskset -c 1`, the simulator on CPU 0), and herald's RSS and journal
//! on disk after the initial sync of many objects.
//!
//! `cargo bench --bench peer` (full) or `cargo bench --bench peer -- --quick` (small sizes); every
//! size has a flag (`--changes`, `--objects`, `--rounds`, `--rate`, `--latency-events`,
//! `--scale-objects`, `--skip-one-core`, `--skip-scale`, `--only PHASE`). Needs python3-kubernetes
//! (Debian) and `taskset`. `HERALD_BENCH_LATENCY_DUMP=DIR` writes the latency phase's per-event
//! figures to `DIR/<round><contender>.csv` (the send time since the first create, the raw reader's
//! delay, the contender's delay above it; the first line holds the first create's Unix time).

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../sim/benches/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{cpu_seconds, process_cpu_seconds};

const GROUP: &str = "example.com";
const PLURAL: &str = "widgets";
const WATCH_PATH: &str = "/apis/example.com/v1/namespaces/default/widgets";
/// Objects the catch-up's changes are spread over.
const CHURN_OBJECTS: u64 = 1000;
/// How long a contender may go without a new event before the bench gives up.
const STALL: Duration = Duration::from_secs(30);
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, kind: Widget}\n  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n";

/// Debian's interpreter, where python3-kubernetes installs (a `python3` earlier on PATH, e.g. pyenv's,
/// does not see it); `HERALD_BENCH_PYTHON` overrides.
fn python() -> String {
    std::env::var("HERALD_BENCH_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_owned())
}

/// The herald binary cargo built beside this bench; `HERALD_BENCH_HERALD` overrides (to compare two
/// builds on one workload).
fn herald_bin() -> String {
    std::env::var("HERALD_BENCH_HERALD").unwrap_or_else(|_| env!("CARGO_BIN_EXE_herald").to_owned())
}

fn widget(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench", "tier": "gold"}},
        "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": -1,
                 "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}]}
    })
}

// ---------------------------------------------------------------------------------------------
// Child modes: the simulator and the raw reader, each in a process of its own.

/// `sim-child OBJECTS HISTORY`: preloads, prints `ready URL KUBECONFIG`, then answers `churn N`
/// and `rv` on stdin with `ok RV` until stdin closes.
fn sim_child(objects: u64, history: usize) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        let sim = herald_sim::Simulator::start(
            herald_sim::SimConfig::default()
                .listen(([127, 0, 0, 1], 0).into())
                .history_limit(history),
        )
        .await
        .expect("simulator");
        sim.load_yaml(CRD).expect("CRD");
        let widgets = herald_sim::ResourceRef::namespaced(GROUP, "v1", PLURAL, "default");
        let names: Vec<String> = (0..objects).map(|i| format!("widget-{i:06}")).collect();
        sim.create_many(&widgets, names.iter().map(|n| widget(n)))
            .expect("preload");
        println!("ready {} {}", sim.url(), sim.kubeconfig_path().display());
        let mut lines = BufReader::new(std::io::stdin()).lines();
        while let Some(Ok(line)) = lines.next() {
            let mut words = line.split_whitespace();
            match (
                words.next(),
                words.next().and_then(|n| n.parse::<u64>().ok()),
            ) {
                (Some("churn"), Some(n)) => {
                    sim.churn(&widgets, &names, 0, n).await.expect("churn");
                }
                (Some("rv"), _) => {}
                _ => panic!("sim-child: unknown command {line:?}"),
            }
            println!("ok {}", sim.resource_version());
        }
        sim.shutdown().await;
    });
}

/// `raw-reader URL OUT`: a plain HTTP watch, every chunk appended to OUT as it arrives.
fn raw_reader(url: &str, out: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut file = std::fs::File::create(out).expect("raw reader output");
    // reqwest's rustls takes the process default provider.
    herald_sim::install_crypto_provider();
    rt.block_on(async move {
        let mut resp = reqwest::get(url).await.expect("watch starts");
        while let Some(chunk) = resp.chunk().await.expect("chunk") {
            file.write_all(&chunk).expect("write");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The simulator child, seen from the bench.

struct Sim {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    url: String,
    kubeconfig: PathBuf,
}

impl Sim {
    fn start(objects: u64, history: u64) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args(["sim-child", &objects.to_string(), &history.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("simulator process");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("ready line");
        let mut words = line.split_whitespace().skip(1);
        let url = words.next().expect("url").to_owned();
        let kubeconfig = PathBuf::from(words.next().expect("kubeconfig"));
        Self {
            child,
            stdin,
            stdout,
            url,
            kubeconfig,
        }
    }

    fn command(&mut self, cmd: &str) -> u64 {
        writeln!(self.stdin, "{cmd}").expect("sim command");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("sim answer");
        line.trim()
            .strip_prefix("ok ")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("sim answered {line:?}"))
    }

    fn pin(&self, cpu: u32) {
        let ok = Command::new("taskset")
            .args([
                "-a",
                "-p",
                "-c",
                &cpu.to_string(),
                &self.child.id().to_string(),
            ])
            .stdout(Stdio::null())
            .status()
            .expect("taskset")
            .success();
        assert!(ok, "taskset failed");
    }

    fn unpin(&self) {
        let ok = Command::new("taskset")
            .args(["-a", "-p", "-c", "0-1", &self.child.id().to_string()])
            .stdout(Stdio::null())
            .status()
            .expect("taskset")
            .success();
        assert!(ok, "taskset failed");
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Contenders.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    Herald,
    Python,
    Raw,
}

impl Who {
    fn label(self) -> &'static str {
        match self {
            Who::Herald => "herald",
            Who::Python => "python loop",
            Who::Raw => "raw reader",
        }
    }
}

/// Where a contender starts reading.
#[derive(Clone, Copy)]
enum From {
    /// A first start: list (herald `initialState: emit`), every object an event.
    Sync,
    /// Resume at this revision: the herald journal given, the loop's checkpoint, the reader's URL.
    Resume(u64),
    /// Start at the current state without emitting it (herald `initialState: skip`, the loop
    /// listing, the reader from now).
    Now,
}

struct Running {
    child: Child,
    out: PathBuf,
    started: Instant,
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn cpu(&self) -> f64 {
        process_cpu_seconds(self.pid())
    }

    fn kill(self) {
        drop(self);
    }

    /// SIGTERM and wait: herald flushes and records where it is.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Also on a panic: no contender outlives the bench.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port()
}

/// Starts `who` in `dir` (its output file, journal or checkpoint live there), on `cpu` if given.
fn spawn(who: Who, sim: &Sim, dir: &Path, from: From, cpu: Option<u32>) -> (Running, Option<u16>) {
    let out = dir.join(format!("{who:?}.jsonl"));
    let mut cmd = match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string()]);
            cmd
        }
        None => Command::new("env"),
    };
    let mut admin = None;
    match who {
        Who::Herald => {
            let port = free_port();
            admin = Some(port);
            let initial = if matches!(from, From::Sync) {
                "emit"
            } else {
                "skip"
            };
            let config = format!(
                "cluster:\n  name: bench\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n    initialState: {initial}\nsinks:\n  - name: out\n    type: file\n    path: {out}\njournal:\n  path: {journal}\nadmin:\n  listen: 127.0.0.1:{port}\n",
                kc = sim.kubeconfig.display(),
                out = out.display(),
                journal = dir.join("journal").display(),
            );
            let path = dir.join("herald.yaml");
            std::fs::write(&path, config).expect("herald config");
            cmd.arg(herald_bin())
                .args(["run", "-c"])
                .arg(&path)
                .env("RUST_LOG", "warn");
        }
        Who::Python => {
            let checkpoint = dir.join("checkpoint");
            if let From::Resume(rv) = from {
                std::fs::write(&checkpoint, rv.to_string()).expect("checkpoint");
            }
            cmd.arg(python())
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer/watch_loop.py"))
                .arg(&sim.kubeconfig)
                .args([GROUP, "v1", "default", PLURAL])
                .arg(&out)
                .arg(&checkpoint);
        }
        Who::Raw => {
            let query = match from {
                From::Sync => "watch=1".to_owned(),
                From::Resume(rv) => format!("watch=1&resourceVersion={rv}"),
                From::Now => unreachable!("the raw reader always starts at a known revision"),
            };
            cmd.arg(std::env::current_exe().expect("own path"))
                .arg("raw-reader")
                .arg(format!("{}{WATCH_PATH}?{query}", sim.url))
                .arg(&out);
        }
    }
    let log = std::fs::File::create(dir.join(format!("{who:?}.log"))).expect("log");
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("contender process");
    (
        Running {
            child,
            out,
            started,
        },
        admin,
    )
}

/// Waits for herald's `/readyz` to answer 200 (every resource listed and watched).
fn wait_ready(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(
                s,
                "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("herald not ready within 60 s");
}

/// Reads a growing file line by line.
struct Tail {
    file: Option<std::fs::File>,
    path: PathBuf,
    partial: Vec<u8>,
    lines: u64,
}

impl Tail {
    fn new(path: &Path) -> Self {
        Self {
            file: None,
            path: path.to_path_buf(),
            partial: Vec::new(),
            lines: 0,
        }
    }

    /// New complete lines, handed to `each`.
    fn poll(&mut self, mut each: impl FnMut(&[u8])) {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut buf = [0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut rest = &buf[..n];
            while let Some(i) = rest.iter().position(|b| *b == b'\n') {
                self.partial.extend_from_slice(&rest[..i]);
                each(&self.partial);
                self.partial.clear();
                self.lines += 1;
                rest = &rest[i + 1..];
            }
            self.partial.extend_from_slice(rest);
        }
    }
}

/// One contender's run of a phase: start to first and to last event, CPU and peak RSS.
#[derive(Clone, Copy, Default)]
struct Run {
    events: u64,
    first: f64,
    wall: f64,
    cpu: f64,
    peak_rss_mib: f64,
    idle_rss_mib: f64,
    journal_mib: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.events as f64 / self.wall
    }
    fn cpu_per_k(&self) -> f64 {
        self.cpu / (self.events as f64 / 1000.0)
    }
}

fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn disk_mib(dir: &Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                bytes += meta.blocks() * 512;
            }
        }
    }
    bytes as f64 / 1024.0 / 1024.0
}

/// Waits until `r` wrote `want` lines; measures from its spawn.
fn until_lines(r: &mut Running, want: u64) -> Run {
    let mut tail = Tail::new(&r.out);
    let mut first = None;
    let mut last_progress = (0, Instant::now());
    loop {
        tail.poll(|_| {});
        if tail.lines > 0 && first.is_none() {
            first = Some(r.started.elapsed());
        }
        if tail.lines >= want {
            let wall = r.started.elapsed();
            return Run {
                events: want,
                first: first.unwrap_or(wall).as_secs_f64(),
                wall: wall.as_secs_f64(),
                cpu: r.cpu(),
                peak_rss_mib: status_mib(r.pid(), "VmHWM:"),
                ..Run::default()
            };
        }
        if tail.lines != last_progress.0 {
            last_progress = (tail.lines, Instant::now());
        }
        if let Ok(Some(status)) = r.child.try_wait() {
            let log = std::fs::read_to_string(r.out.with_extension("log")).unwrap_or_default();
            panic!(
                "{}: exited ({status}) after {} of {want} lines:\n{log}",
                r.out.display(),
                tail.lines
            );
        }
        assert!(
            last_progress.1.elapsed() < STALL,
            "{}: stalled at {} of {want} lines",
            r.out.display(),
            tail.lines
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// Catch-up: every contender resumes at the same revision with `changes` changes waiting.
fn catch_up(sim: &mut Sim, who: Who, changes: u64, cpu: Option<u32>) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let rv = match who {
        Who::Herald => {
            // A first start records where herald is in its journal; the restart resumes from it.
            let (r, port) = spawn(who, sim, dir.path(), From::Now, cpu);
            wait_ready(port.expect("admin port"));
            r.stop();
            sim.command("rv")
        }
        _ => sim.command("rv"),
    };
    sim.command(&format!("churn {changes}"));
    let (mut r, _) = spawn(who, sim, dir.path(), From::Resume(rv), cpu);
    let run = until_lines(&mut r, changes);
    r.kill();
    run
}

/// Initial sync of every object of `sim` (`objects` of them).
fn initial_sync(sim: &Sim, who: Who, objects: u64, idle: bool) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut r, _) = spawn(who, sim, dir.path(), From::Sync, None);
    let mut run = until_lines(&mut r, objects);
    if idle {
        std::thread::sleep(Duration::from_secs(3));
        run.idle_rss_mib = status_mib(r.pid(), "VmRSS:");
        run.peak_rss_mib = status_mib(r.pid(), "VmHWM:");
        run.journal_mib = disk_mib(&dir.path().join("journal"));
    }
    r.kill();
    run
}

/// Latency: `who` and a raw reader watch while the bench creates `events` objects at `rate`/s over
/// HTTP. Returns each event's delay of the raw reader after the create was sent and of `who`
/// after the raw reader, in ms.
fn latency(sim: &mut Sim, who: Who, rate: u64, events: u64, tag: &str) -> (Vec<f64>, Vec<f64>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let raw_dir = tempfile::tempdir().expect("tempdir");
    // The loop resumes from its checkpoint rather than listing every object created so far.
    let rv = sim.command("rv");
    let from = if who == Who::Herald {
        From::Now
    } else {
        From::Resume(rv)
    };
    let (r, port) = spawn(who, sim, dir.path(), from, None);
    match port {
        Some(p) => wait_ready(p),
        None => std::thread::sleep(Duration::from_secs(2)),
    }
    let (raw, _) = spawn(Who::Raw, sim, raw_dir.path(), From::Resume(rv), None);
    std::thread::sleep(Duration::from_millis(500));

    let stop = Arc::new(AtomicBool::new(false));
    let needle = format!("lat-{tag}-").into_bytes();
    let watcher = |path: PathBuf| {
        let stop = stop.clone();
        let needle = needle.clone();
        std::thread::spawn(move || {
            let mut tail = Tail::new(&path);
            let mut seen: HashMap<u64, Instant> = HashMap::new();
            while !stop.load(Ordering::Relaxed) && (seen.len() as u64) < events {
                tail.poll(|line| {
                    if let Some(k) = key_of(line, &needle) {
                        seen.entry(k).or_insert_with(Instant::now);
                    }
                });
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        })
    };
    let theirs = watcher(r.out.clone());
    let raws = watcher(raw.out.clone());

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("{}{WATCH_PATH}", sim.url);
    let sent: Vec<Instant> = rt.block_on(async {
        let client = reqwest::Client::new();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        let mut sent = Vec::new();
        for i in 0..events {
            tick.tick().await;
            sent.push(Instant::now());
            let resp = client
                .post(&url)
                .json(&widget(&format!("lat-{tag}-{i:06}")))
                .send()
                .await
                .expect("create");
            assert!(resp.status().is_success(), "create: {}", resp.status());
        }
        sent
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(theirs.is_finished() && raws.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let theirs = theirs.join().expect("tail");
    let raws = raws.join().expect("tail");
    r.kill();
    raw.kill();
    assert_eq!(
        theirs.len() as u64,
        events,
        "{}: missed events",
        who.label()
    );
    assert_eq!(raws.len() as u64, events, "raw reader: missed events");
    let mut raw_after_send = Vec::new();
    let mut above_raw = Vec::new();
    for (i, t) in sent.iter().enumerate() {
        let i = i as u64;
        raw_after_send.push(ms_between(*t, raws[&i]));
        above_raw.push(ms_between(raws[&i], theirs[&i]));
    }
    // Per event, for finding where a tail comes from (docs/operations.md, "Latency tail at 500
    // changes/s"): when each create was sent, and the two delays, one CSV per contender and round.
    if let Ok(dir) = std::env::var("HERALD_BENCH_LATENCY_DUMP") {
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - Instant::now().duration_since(sent[0]).as_secs_f64();
        let mut csv = format!("# first send unix {epoch:.6}\ni,sent_ms,raw_after_send,above_raw\n");
        for (i, t) in sent.iter().enumerate() {
            csv.push_str(&format!(
                "{i},{:.3},{:.3},{:.3}\n",
                ms_between(sent[0], *t),
                raw_after_send[i],
                above_raw[i]
            ));
        }
        std::fs::write(Path::new(&dir).join(format!("{tag}.csv")), csv).unwrap();
    }
    (raw_after_send, above_raw)
}

/// The number after `needle` in `line` (the created object's name), if any.
fn key_of(line: &[u8], needle: &[u8]) -> Option<u64> {
    let at = line.windows(needle.len()).position(|w| w == needle)?;
    let digits = &line[at + needle.len()..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// Signed milliseconds from `a` to `b`.
fn ms_between(a: Instant, b: Instant) -> f64 {
    match b.checked_duration_since(a) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(a.duration_since(b).as_secs_f64() * 1000.0),
    }
}

// ---------------------------------------------------------------------------------------------
// Figures.

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((p / 100.0) * (s.len() - 1) as f64).round() as usize]
}

/// `min / median / max` of `v`.
fn mmm(v: &[f64], decimals: usize) -> String {
    format!(
        "{:.d$} / {:.d$} / {:.d$}",
        pct(v, 0.0),
        pct(v, 50.0),
        pct(v, 100.0),
        d = decimals
    )
}

fn row(label: &str, v: &[f64], decimals: usize) {
    println!("  {label:<46} {}", mmm(v, decimals));
}

/// Prints a phase's figures per contender and herald's ratios to the others, round by round.
fn report(title: &str, rounds: &[HashMap<&'static str, Run>], whos: &[Who], first_event: bool) {
    println!("\n{title} ({} rounds; min / median / max)", rounds.len());
    let get = |who: Who, f: &dyn Fn(&Run) -> f64| -> Vec<f64> {
        rounds.iter().map(|r| f(&r[who.label()])).collect()
    };
    for who in whos {
        row(
            &format!("{} events/s", who.label()),
            &get(*who, &Run::rate),
            0,
        );
        row(
            &format!("{} CPU-s per 1k events", who.label()),
            &get(*who, &Run::cpu_per_k),
            4,
        );
        if first_event {
            row(
                &format!("{} first event after (s)", who.label()),
                &get(*who, &|r| r.first),
                3,
            );
        }
    }
    for peer in whos.iter().filter(|w| **w != Who::Herald) {
        let ratio: Vec<f64> = rounds
            .iter()
            .map(|r| r["herald"].rate() / r[peer.label()].rate())
            .collect();
        row(&format!("herald events/s ÷ {}'s", peer.label()), &ratio, 2);
        let cpu: Vec<f64> = rounds
            .iter()
            .map(|r| r["herald"].cpu_per_k() / r[peer.label()].cpu_per_k())
            .collect();
        row(&format!("herald CPU/event ÷ {}'s", peer.label()), &cpu, 2);
    }
}

struct Opts {
    changes: u64,
    objects: u64,
    rounds: usize,
    rate: u64,
    latency_events: u64,
    scale_objects: u64,
    one_core: bool,
    scale: bool,
    only: Option<String>,
}

fn parse_opts(args: &[String]) -> Opts {
    let mut o = Opts {
        changes: 20_000,
        objects: 20_000,
        rounds: 3,
        rate: 500,
        latency_events: 5_000,
        scale_objects: 100_000,
        one_core: true,
        scale: true,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{a} needs a number"))
        };
        match a.as_str() {
            "--quick" => {
                o.changes = 2_000;
                o.objects = 2_000;
                o.latency_events = 500;
                o.scale_objects = 10_000;
            }
            "--changes" => o.changes = num(),
            "--objects" => o.objects = num(),
            "--rounds" => o.rounds = usize::try_from(num()).expect("rounds"),
            "--rate" => o.rate = num(),
            "--latency-events" => o.latency_events = num(),
            "--scale-objects" => o.scale_objects = num(),
            "--skip-one-core" => o.one_core = false,
            "--skip-scale" => o.scale = false,
            // Runs one phase alone: catch-up, sync, latency, one-core or scale.
            "--only" => o.only = it.next().cloned(),
            // cargo bench passes `--bench`; anything else is a mistake worth hearing about.
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("sim-child") => {
            return sim_child(
                args[1].parse().expect("objects"),
                args[2].parse().expect("history"),
            );
        }
        Some("raw-reader") => return raw_reader(&args[1], Path::new(&args[2])),
        _ => {}
    }
    let o = parse_opts(&args);
    herald_sim::install_crypto_provider();
    let python_ok = Command::new(python())
        .args(["-c", "import kubernetes"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        python_ok,
        "the peer needs the official Python client: apt-get install python3-kubernetes"
    );
    let phase = |name: &str| o.only.as_deref().is_none_or(|only| only == name);
    let all = [Who::Herald, Who::Python, Who::Raw];
    // Rotates who goes first, so no contender always runs on a machine just warmed (or loaded) by
    // another.
    let order = |round: usize| -> Vec<Who> { (0..3).map(|i| all[(i + round) % 3]).collect() };
    println!(
        "herald beside the Python watch loop and a raw reader: catch-up {} changes, initial sync {} objects, \
         latency at {}/s ({} creates), {} rounds, {} CPUs",
        o.changes,
        o.objects,
        o.rate,
        o.latency_events,
        o.rounds,
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );

    let runs_per_phase = o.rounds as u64 * 3 * 2;
    let mut sim = Sim::start(
        CHURN_OBJECTS,
        CHURN_OBJECTS
            + o.changes * runs_per_phase
            + o.latency_events * o.rounds as u64 * 2
            + 10_000,
    );
    if phase("catch-up") {
        let mut rounds = Vec::new();
        for round in 0..o.rounds {
            let mut r = HashMap::new();
            for who in order(round) {
                r.insert(who.label(), catch_up(&mut sim, who, o.changes, None));
            }
            rounds.push(r);
        }
        report(
            &format!(
                "catch-up of {} changes into the file sink, herald with its durable journal; each from its own start",
                o.changes
            ),
            &rounds,
            &all,
            true,
        );
    }
    if o.one_core && phase("one-core") {
        sim.pin(0);
        let mut rounds = Vec::new();
        for round in 0..o.rounds {
            let mut r = HashMap::new();
            for who in order(round) {
                r.insert(who.label(), catch_up(&mut sim, who, o.changes, Some(1)));
            }
            rounds.push(r);
        }
        sim.unpin();
        report(
            &format!(
                "one core: catch-up of {} changes, each contender on CPU 1 (taskset), simulator on CPU 0",
                o.changes
            ),
            &rounds,
            &all,
            false,
        );
    }
    if phase("latency") {
        let mut raw = Vec::new();
        let mut above: HashMap<&str, (Vec<f64>, Vec<f64>)> = HashMap::new();
        for round in 0..o.rounds {
            let pair = if round % 2 == 0 {
                [Who::Herald, Who::Python]
            } else {
                [Who::Python, Who::Herald]
            };
            for who in pair {
                let tag = format!("{round}{}", &who.label()[..1]);
                let (r, a) = latency(&mut sim, who, o.rate, o.latency_events, &tag);
                raw.push((pct(&r, 50.0), pct(&r, 99.0)));
                let e = above.entry(who.label()).or_default();
                e.0.push(pct(&a, 50.0));
                e.1.push(pct(&a, 99.0));
            }
        }
        println!(
            "\nlatency at {}/s, {} creates per run, ms ({} rounds; min / median / max)",
            o.rate, o.latency_events, o.rounds
        );
        let (p50, p99): (Vec<f64>, Vec<f64>) = raw.into_iter().unzip();
        row("raw reader p50 after the create was sent", &p50, 2);
        row("raw reader p99 after the create was sent", &p99, 2);
        for who in [Who::Herald, Who::Python] {
            let (p50, p99) = &above[who.label()];
            row(&format!("{} p50 above the raw reader", who.label()), p50, 2);
            row(&format!("{} p99 above the raw reader", who.label()), p99, 2);
        }
    }
    drop(sim);
    if phase("sync") {
        let sim = Sim::start(o.objects, o.objects + 10_000);
        let mut rounds = Vec::new();
        for round in 0..o.rounds {
            let mut r = HashMap::new();
            for who in order(round) {
                r.insert(who.label(), initial_sync(&sim, who, o.objects, false));
            }
            rounds.push(r);
        }
        report(
            &format!(
                "initial sync of {} objects (herald initialState: emit, the loop's list, the reader's watch without resourceVersion)",
                o.objects
            ),
            &rounds,
            &all,
            true,
        );
    }
    println!(
        "\n(this bench process: load generator and file pollers, {:.1} CPU-s in all)",
        cpu_seconds()
    );
    if o.scale && phase("scale") {
        let sim = Sim::start(o.scale_objects, o.scale_objects + 10_000);
        println!(
            "\nat scale: initial sync of {} objects, one run each",
            o.scale_objects
        );
        for who in [Who::Herald, Who::Python] {
            let r = initial_sync(&sim, who, o.scale_objects, true);
            println!(
                "  {:<12} {:>8.0} events/s, first event {:.2} s, peak RSS {:.1} MiB, idle RSS {:.1} MiB (3 s after the last event){}",
                who.label(),
                r.rate(),
                r.first,
                r.peak_rss_mib,
                r.idle_rss_mib,
                if who == Who::Herald {
                    format!(", journal on disk {:.1} MiB", r.journal_mib)
                } else {
                    String::new()
                }
            );
        }
    }
}
