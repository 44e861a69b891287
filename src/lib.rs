//! herald turns Kubernetes custom-resource changes into CloudEvents.
//!
//! The binary is a thin shell over [`cli::main`]; the simulator of the Kubernetes API that every test and
//! the demo run against lives in [`sim`].
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod cli;
pub mod exit_code;
pub mod sim;
pub mod telemetry;
