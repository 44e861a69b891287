//! `deploy/Dockerfile`'s invariants, checked without a container engine (none runs here): the
//! image builds the README's locked release binary, runs it as a non-root user from the path it was
//! copied to, and its runtime base carries every shared library the binary loads.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const DOCKERFILE: &str = include_str!("../deploy/Dockerfile");
const DOCKERIGNORE: &str = include_str!("../.dockerignore");
const README: &str = include_str!("../README.md");

/// The release build the README documents and the image runs.
const RELEASE_BUILD: &str = "cargo build --release --locked --bin herald";

/// One instruction: keyword (upper case) and its arguments, continuation lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let (keyword, args) = pending.split_once(' ').unwrap_or((&pending, ""));
        out.push(Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.split_whitespace().collect::<Vec<_>>().join(" "),
        });
        pending.clear();
    }
    assert!(pending.is_empty(), "a continuation line ends the file");
    out
}

/// The stages, each from its `FROM` to the next.
fn stages() -> Vec<Vec<Instruction>> {
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for instruction in instructions(DOCKERFILE) {
        if instruction.keyword == "FROM" {
            stages.push(Vec::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push(instruction);
        }
    }
    assert!(stages.len() >= 2, "a multi-stage build: {stages:#?}");
    stages
}

fn find<'a>(stage: &'a [Instruction], keyword: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .collect()
}

/// `["a", "b"]` (exec form) → its words.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("not the exec form: {args}: {e}"))
}

/// The value of `ARG name=value` before the first stage, for `${name}` in `FROM`.
fn global_arg(name: &str) -> Option<String> {
    instructions(DOCKERFILE)
        .into_iter()
        .take_while(|i| i.keyword != "FROM")
        .filter(|i| i.keyword == "ARG")
        .find_map(|i| i.args.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

/// `FROM image[:tag] [AS name]` → the image reference, global `ARG`s substituted.
fn base_image(stage: &[Instruction]) -> String {
    let from = stage[0]
        .args
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut image = from.clone();
    while let Some(start) = image.find("${") {
        let end = image[start..].find('}').map(|e| start + e).unwrap();
        let name = &image[start + 2..end];
        let value = global_arg(name).unwrap_or_else(|| panic!("no ARG {name} for {from}"));
        image.replace_range(start..=end, &value);
    }
    image
}

#[test]
fn the_image_builds_the_readmes_locked_release_binary() {
    assert!(
        README.contains(RELEASE_BUILD),
        "the README documents the release build `{RELEASE_BUILD}`"
    );
    let stages = stages();
    let builds: Vec<&str> = stages
        .iter()
        .flat_map(|s| find(s, "RUN"))
        .filter(|run| run.contains("cargo build"))
        .collect();
    assert_eq!(builds.len(), 1, "one cargo build: {builds:?}");
    assert!(
        builds[0].contains(RELEASE_BUILD),
        "the image builds with `{RELEASE_BUILD}`: {}",
        builds[0]
    );
    // The toolchain is at least the workspace's rust-version.
    let builder = base_image(&stages[0]);
    let version = builder
        .strip_prefix("rust:")
        .and_then(|tag| tag.split('-').next())
        .unwrap_or_else(|| panic!("the build stage starts from an official rust image: {builder}"));
    let manifest: &str = include_str!("../Cargo.toml");
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    assert!(
        parse(version) >= parse(msrv),
        "{builder} is older than rust-version {msrv}"
    );
}

#[test]
fn the_image_labels_carry_the_packages_version_source_and_licence() {
    let manifest: &str = include_str!("../Cargo.toml");
    let value = |key: &str| -> String {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{key} in Cargo.toml"))
            .to_owned()
    };
    let stages = stages();
    let runtime = stages.last().unwrap();
    // The default of `--build-arg VERSION` is the crate's version, so an image built without it
    // still says which release it is.
    assert!(
        find(runtime, "ARG").contains(&format!("VERSION={}", value("version")).as_str()),
        "ARG VERSION defaults to Cargo.toml's version {}",
        value("version")
    );
    let labels = find(runtime, "LABEL").join(" ");
    for expected in [
        "org.opencontainers.image.version=\"${VERSION}\"".to_owned(),
        format!(
            "org.opencontainers.image.source=\"{}\"",
            value("repository")
        ),
        format!("org.opencontainers.image.licenses=\"{}\"", value("license")),
    ] {
        assert!(labels.contains(&expected), "LABEL {expected} in: {labels}");
    }
}

#[test]
fn the_runtime_stage_runs_the_copied_binary_as_a_non_root_user() {
    let stages = stages();
    let runtime = stages.last().unwrap();

    let users = find(runtime, "USER");
    let user = users.last().expect("the runtime stage sets USER");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    for id in [uid, gid] {
        let id: u32 = id.parse().unwrap_or_else(|_| {
            panic!("USER is numeric (Kubernetes' runAsNonRoot checks it): {user}")
        });
        assert_ne!(id, 0, "USER {user} is root");
    }
    // Nothing after USER switches back.
    let last_user = runtime.iter().rposition(|i| i.keyword == "USER").unwrap();
    assert!(
        runtime[last_user..]
            .iter()
            .all(|i| i.keyword != "RUN" && i.keyword != "USER" || i.args == *user),
        "{runtime:#?}"
    );

    let entrypoint = find(runtime, "ENTRYPOINT");
    let entrypoint = exec_form(entrypoint.last().expect("an ENTRYPOINT"));
    let binary = entrypoint.first().expect("ENTRYPOINT names the binary");
    let copied: Vec<Vec<&str>> = find(runtime, "COPY")
        .into_iter()
        .map(|args| args.split(' ').collect())
        .collect();
    let copy = copied
        .iter()
        .find(|words| words.last() == Some(&binary.as_str()))
        .unwrap_or_else(|| {
            panic!("ENTRYPOINT {binary} is not where a COPY put the binary: {copied:?}")
        });
    // …and what is copied is what the build stage installed from target/release/herald.
    let stage_name = copy
        .iter()
        .find_map(|w| w.strip_prefix("--from="))
        .expect("COPY --from=<build stage>");
    let source = copy[copy.len() - 2];
    let build = stages
        .iter()
        .find(|s| s[0].args.ends_with(&format!(" AS {stage_name}")))
        .unwrap_or_else(|| panic!("no stage named {stage_name}"));
    assert!(
        find(build, "RUN")
            .iter()
            .any(|run| run.contains(RELEASE_BUILD)
                && run.contains(&format!("target/release/herald {source}"))),
        "the build stage puts target/release/herald at {source}"
    );

    let cmd = exec_form(find(runtime, "CMD").last().expect("a CMD"));
    assert_eq!(cmd, ["run", "-c", "/etc/herald/herald.yaml"]);
}

/// Shared libraries (sonames) each runtime base this Dockerfile may use provides, from the
/// image's documented package list. distroless/cc-debian12: libc6, libgcc-s1, libgomp1, libssl3,
/// libstdc++6 (no zlib).
fn runtime_libraries(image: &str) -> Option<BTreeSet<&'static str>> {
    let glibc = [
        "linux-vdso.so.1",
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    ];
    let family = image.split([':', '@']).next().unwrap_or_default();
    match family {
        "gcr.io/distroless/cc-debian12" => Some(
            glibc
                .into_iter()
                .chain([
                    "libgcc_s.so.1",
                    "libgomp.so.1",
                    "libstdc++.so.6",
                    "libssl.so.3",
                    "libcrypto.so.3",
                ])
                .collect(),
        ),
        _ => None,
    }
}

/// The sonames `ldd` lists for `binary`, or `None` when there is no `ldd` to ask.
fn needed_libraries(binary: &Path) -> Option<BTreeSet<String>> {
    let out = Command::new("ldd").arg(binary).output().ok()?;
    assert!(
        out.status.success(),
        "ldd {}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(|name| name.rsplit('/').next().unwrap_or(name).to_owned())
            .collect(),
    )
}

#[test]
fn the_runtime_image_has_every_shared_library_the_binary_loads() {
    let stages = stages();
    let runtime = base_image(stages.last().unwrap());
    let builder = base_image(&stages[0]);
    // glibc: the binary must not need a newer one than the runtime has, so both are one Debian
    // release (bookworm is Debian 12).
    assert!(
        builder.ends_with("-bookworm") && runtime.contains("-debian12"),
        "build ({builder}) and runtime ({runtime}) are one Debian release"
    );
    let provided = runtime_libraries(&runtime).unwrap_or_else(|| {
        panic!("{runtime}: list the libraries of this runtime base in runtime_libraries()")
    });
    let Some(needed) = needed_libraries(Path::new(env!("CARGO_BIN_EXE_herald"))) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "ldd is missing and CI is set: the runtime image's libraries must be checked"
        );
        eprintln!("ldd is missing: the runtime image's libraries were not checked");
        return;
    };
    // Sanity: ldd answered about a dynamically linked binary.
    assert!(needed.contains("libc.so.6"), "{needed:?}");
    // zlib is linked statically in the image (libz-sys honours LIBZ_SYS_STATIC), so a test build
    // that links it dynamically does not need it from the runtime base.
    let build_stage = &stages[0];
    let static_zlib = find(build_stage, "ENV")
        .iter()
        .any(|env| env.split(' ').any(|kv| kv == "LIBZ_SYS_STATIC=1"));
    let missing: Vec<&String> = needed
        .iter()
        .filter(|lib| !provided.contains(lib.as_str()))
        .filter(|lib| !(static_zlib && lib.starts_with("libz.so")))
        .collect();
    assert!(
        missing.is_empty(),
        "herald loads {missing:?}, which {runtime} lacks: link them statically in the build stage or \
         change the runtime base (ldd: {needed:?})"
    );
}

#[test]
fn the_build_context_keeps_what_cargo_needs() {
    let ignored: Vec<&str> = DOCKERIGNORE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    // Cargo.toml names targets in tests/ and benches/, so a build without them fails.
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "sim",
        "sinks",
        "tests",
        "benches",
    ] {
        assert!(
            !ignored
                .iter()
                .any(|pattern| needed == pattern.trim_end_matches('/')
                    || *pattern == "*"
                    || *pattern == "**"),
            ".dockerignore leaves {needed} out of the build context: {ignored:?}"
        );
    }
    assert!(
        ignored.contains(&"target"),
        "the local target dir stays out of the context"
    );
}
