//! herald turns Kubernetes custom-resource changes into CloudEvents.
//!
//! The data flow: [`watch`] (list/watch, resumable) → [`event`] (normalize to CloudEvents) → [`journal`]
//! (durable, in sled) → [`route`] → [`delivery`] (per sink). The binary is a thin shell over
//! [`cli::main`]; [`config`] is its configuration; the simulator of the Kubernetes API that every test,
//! the demo and the benchmarks run against is its own crate, [`herald_sim`].
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod admin;
pub mod app;
pub mod backoff;
mod bytes;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod event;
pub mod exit_code;
pub mod journal;
pub mod leader;
pub mod rbac;
pub mod route;
pub mod telemetry;
pub mod watch;
