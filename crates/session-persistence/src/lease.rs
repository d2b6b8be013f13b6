//! What the storage crates share about writer leases: the name a holder gives itself (host and
//! pid) and a stable key per session, the same in every process and every build.
//!
//! A writer lease marks a session that a live writer holds: while it is held, a repair from any
//! other writer or process leaves the session alone ([`PersistenceError::Held`]). Each backend
//! keeps its leases in a lock that dies with its holder (see `docs/storage-format.md`).
//!
//! [`PersistenceError::Held`]: crate::PersistenceError::Held

/// How a lease holder names itself in messages: `host H, pid P`.
pub fn holder_name() -> String {
    format!("host {}, pid {}", host_name(), std::process::id())
}

/// This machine's host name, or `unknown` where the system does not say.
fn host_name() -> String {
    let from_kernel = session_storage_io::fsio::read_regular(std::path::Path::new("/proc/sys/kernel/hostname"), 256)
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    from_kernel
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A stable 64-bit key for `parts` (FNV-1a over each part and a separator): the same in every
/// process and every build, so two processes agree on which lease a session has. Two sessions
/// may share a key; a lease then covers both, which only ever makes a repair more cautious.
pub fn lease_key(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0xff)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_part_aware() {
        // Fixed values: a key never changes across builds, or two builds would not see each other's leases.
        assert_eq!(lease_key(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(lease_key(&["a"]), lease_key(&["a"]));
        assert_ne!(lease_key(&["ab", "c"]), lease_key(&["a", "bc"]));
        assert!(holder_name().contains(&format!("pid {}", std::process::id())));
    }
}
