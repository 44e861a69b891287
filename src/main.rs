//! The `herald` binary: parse, dispatch, exit with a documented code (see `herald::exit_code`).

fn main() -> std::process::ExitCode {
    herald::cli::main()
}
