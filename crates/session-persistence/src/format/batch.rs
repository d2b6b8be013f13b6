//! Batch encoding (reference 01 §4.2): records joined by `\n`, with a trailing `\n`.

use std::borrow::Borrow;

use session_core::SessionEvent;

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
            let (kind, seq) = match record {
                Record::Event(event) => (event.kind.as_str(), event.seq),
                Record::Chunks(row) => (row.kind.tag(), row.seq0),
            };
            return Err(PersistenceError::invalid_input(format!(
                "session event \"{kind}\" at seq {seq} encodes to {size} bytes, over the {MAX_RECORD_BYTES}-byte record limit"
            )));
        }
        out.push(b'\n');
    }
    Ok(())
}
