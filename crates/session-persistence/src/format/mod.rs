//! The JSONL log format, version 0 (reference 01 §2.9, §4.2–4.5): bytes to records and back.
//!
//! Nothing here opens a file. Readers pull bytes through [`ByteSource`], so the same code scans
//! a file, an in-memory buffer or a damaged copy in a test; writers return byte buffers that the
//! store appends. The layout of files and directories lives in the `jsonl` module.

mod batch;
mod chunk_rows;
mod fields;
mod header;
mod scan;
mod scanner;
mod seek;
mod zstd;

#[cfg(test)]
mod tests;

pub use self::{
    batch::encode_batch,
    chunk_rows::{ChunkKind, ChunkRow, MIN_RUN, Record, RecordError, chunk_runs, decode_record, pack_chunk_runs},
    header::{decode_header_line, encode_header_line},
    scan::{ByteSource, LogScan, MAX_HEADER_BYTES, scan_log},
    zstd::{FrameEncoder, ZSTD_MAGIC},
};
pub(crate) use self::{
    scan::{HeaderRead, KnownHeader, read_header},
    seek::scan_log_from,
};

/// The largest record (one line, newline excluded) a reader buffers and a writer produces.
///
/// A reader must hold one whole line to parse it, so this bounds a scan's memory whatever the
/// bytes on disk say; the writer refuses bigger records so that everything it writes reads back.
/// It is session-core's event bound, so every event a session accepts fits one record, and the
/// packer keeps chunk rows within it too.
pub const MAX_RECORD_BYTES: usize = session_core::MAX_EVENT_BYTES;

/// The physical encoding of a store's logs. One root holds one encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `session.jsonl.zstd`: one checksummed Zstandard frame per durable batch (the default).
    #[default]
    Zstd,
    /// `session.jsonl`: plain UTF-8 lines.
    None,
}

impl Compression {
    /// The transcript's file name inside a session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::Zstd => "session.jsonl.zstd",
            Compression::None => "session.jsonl",
        }
    }

    /// The suffix after `session`, as named in messages.
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::Zstd => ".jsonl.zstd",
            Compression::None => ".jsonl",
        }
    }

    /// The name the reference's configuration uses (`zstd` or `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::None => "none",
        }
    }

    /// The other encoding: the one a log in the wrong encoding for this store has.
    pub fn opposite(self) -> Compression {
        match self {
            Compression::Zstd => Compression::None,
            Compression::None => Compression::Zstd,
        }
    }
}
