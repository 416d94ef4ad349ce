//! The TCP key-value store rank 0 hosts, and the job token that guards it.
//!
//! Rank 0 runs a [`StoreServer`]; every rank (rank 0 too) talks to it through a
//! [`TcpStore`], which implements [`Store`](crate::rendezvous::Store). The
//! server keeps everything in memory and serves each connection on its own
//! thread, so a `get` that waits for a key blocks only its own connection.
//!
//! - `token.rs`: the job token every connection presents.
//! - `wire.rs`: the framing and message layout both sides speak.
//! - `server.rs`: the store rank 0 hosts.
//! - `client.rs`: every rank's connection to it.
//!
//! The token travels in clear text: it keeps other jobs and stray connections
//! out of the store, not an attacker who can read the network.

mod client;
mod server;
mod token;
mod wire;

/// Also the fixtures (a loopback server, its clients) other modules' tests use.
#[cfg(test)]
pub(crate) mod tests;

pub use client::TcpStore;
pub use server::StoreServer;
pub(crate) use token::env_var;
pub use token::{TOKEN_VAR, Token};
