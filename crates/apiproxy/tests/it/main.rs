//! Integration tests of the gateway through real HTTP and WebSocket on `127.0.0.1:0`, and of the
//! `apiproxy` binary against stores with healthy, torn and corrupt logs.

mod bounds;
mod carrier;
mod cli;
mod clock;
mod copy;
mod crash;
mod create_race;
mod damage;
mod export;
mod follow;
mod history;
mod isolation;
mod limits;
mod owners;
mod partition;
mod postgres_store;
mod replica;
mod sessions;
mod shares;
mod sqlite_store;
mod streams;
mod subagents;
mod support;
// The demo's turns, compiled here too, so the tests' stores hold the turns the demo writes.
#[path = "../../src/cli/turns.rs"]
mod turns;
mod web;
