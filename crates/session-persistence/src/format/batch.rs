//! Batch encoding (reference 01 §4.2): records joined by `\n`, with a trailing `\n`.

use std::borrow::Borrow;

use session_core::{Oversized, SessionEvent, TooLarge};

use super::{
    MAX_RECORD_BYTES,
    chunk_rows::{Record, pack_chunk_runs},
};
use crate::error::{PersistenceError, Result};

/// Appends the lines of `events` to `out`, packing chunk runs when `pack_chunks` is set.
///
/// Fails, leaving `out` as it was, if a record would exceed [`MAX_RECORD_BYTES`]: a reader
/// refuses such a line, so writing it would lose the session.
pub fn encode_batch<E: Borrow<SessionEvent>>(events: &[E], pack_chunks: bool, out: &mut Vec<u8>) -> Result<()> {
    let start = out.len();
    let records = if pack_chunks {
        pack_chunk_runs(events)
    } else {
        events.iter().map(|event| Record::Event(event.borrow())).collect()
    };
    for record in &records {
        let line_start = out.len();
        record.write_json(out);
        if out.len() - line_start > MAX_RECORD_BYTES {
            let size = out.len() - line_start;
            out.truncate(start);
            return Err(match record {
                Record::Event(event) => PersistenceError::TooLarge(TooLarge {
                    what: Oversized::Event { kind: event.kind.clone(), seq: event.seq },
                    size: size as u64,
                    limit: MAX_RECORD_BYTES as u64,
                }),
                // The packer keeps rows within the limit; this is a last line of defence.
                Record::Chunks(row) => PersistenceError::invalid_input(format!(
                    "packed {} row at seq {} encodes to {size} bytes, over the {MAX_RECORD_BYTES}-byte record limit",
                    row.kind.tag(),
                    row.seq0
                )),
            });
        }
        out.push(b'\n');
    }
    Ok(())
}
