//! `CacheConfig`: the write policy's two throttles, validated (reference 02 §8.1).

use serde_json::Value;
use session_core::json::{MAX_SAFE_INTEGER, as_safe_u64};

use crate::error::{CacheError, Result};

/// The largest `writeIntervalMs`: the longest timer delay a host in the reference can arm.
pub const MAX_WRITE_INTERVAL_MS: u64 = 2_147_483_647;

/// How often a live session's checkpoint is written besides the two mandatory points (`turn/end`
/// and disposal). Both throttles are required and have no default, as in the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Events (other than `turn/end`) a session may append after its last write before the next
    /// write is forced. At least 1.
    pub write_every_events: u64,
    /// The longest time, in milliseconds of the injected clock, a dirty checkpoint stays unwritten.
    /// Between 1 and [`MAX_WRITE_INTERVAL_MS`].
    pub write_interval_ms: u64,
}

impl CacheConfig {
    /// A validated configuration.
    pub fn new(write_every_events: u64, write_interval_ms: u64) -> Result<CacheConfig> {
        let config = CacheConfig { write_every_events, write_interval_ms };
        config.validate()?;
        Ok(config)
    }

    /// Checks both throttles.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_SAFE_INTEGER).contains(&self.write_every_events) {
            return Err(invalid_every(&self.write_every_events.to_string()));
        }
        if !(1..=MAX_WRITE_INTERVAL_MS).contains(&self.write_interval_ms) {
            return Err(invalid_interval(&self.write_interval_ms.to_string()));
        }
        Ok(())
    }

    /// Reads the host's JSON configuration `{writeEveryEvents, writeIntervalMs}`. Both fields are
    /// required natural numbers; unknown fields are ignored.
    pub fn from_json(value: &Value) -> Result<CacheConfig> {
        let Some(object) = value.as_object() else {
            return Err(CacheError::InvalidConfig {
                message: format!("session projection cache config must be an object, got {value}"),
            });
        };
        let field = |name: &str, invalid: fn(&str) -> CacheError| -> Result<u64> {
            let value = object.get(name).ok_or_else(|| CacheError::InvalidConfig {
                message: format!("session projection cache config requires {name}"),
            })?;
            as_safe_u64(value).ok_or_else(|| invalid(&value.to_string()))
        };
        let write_every_events = field("writeEveryEvents", invalid_every)?;
        let write_interval_ms = field("writeIntervalMs", invalid_interval)?;
        CacheConfig::new(write_every_events, write_interval_ms)
    }
}

fn invalid_every(got: &str) -> CacheError {
    CacheError::InvalidConfig { message: format!("writeEveryEvents must be a positive safe integer, got {got}") }
}

fn invalid_interval(got: &str) -> CacheError {
    CacheError::InvalidConfig {
        message: format!("writeIntervalMs must be an integer between 1 and {MAX_WRITE_INTERVAL_MS}, got {got}"),
    }
}
